"""``python -m torchdeck.trainer``: see ``train.main``.

The process leaves with ``os._exit`` once everything is written. DDP keeps
the gloo process group's native threads (``gloo_tcp_loop`` and two
``pt_gloo_runloop``) running after ``destroy_process_group``, even with the
model deleted and garbage collected; a normal exit then tears the
interpreter and the C++ statics down around live threads, which now and then
ends in ``terminate called without an active exception`` after ``done``, and
torchrun restarts a job that had finished. Every metric line is written
unbuffered and every file is closed by then, so nothing is lost by skipping
that teardown."""

import os
import sys

from .train import main

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
