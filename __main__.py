"""``python -m torchdeck``: the same as the ``torchdeck`` command."""

import sys

from torchdeck.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
