"""`python3 -m kubecluster COMMAND`: see cli."""

import sys

from kubecluster.cli import main

sys.exit(main(sys.argv[1:]))
