"""Entry point: ``python -m bot``. Sets the process-wide environment before anything heavy loads."""

from __future__ import annotations

import os

# Never reach for a model hub: a missing model must fail at once, not after a minute of time-outs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from bot.cli import main  # noqa: E402  (the environment above must be set first)
from bot.process_exit import end_process  # noqa: E402

if __name__ == "__main__":
    # Once a command has returned, its work is written and its output printed: the process
    # ends now rather than spend seconds in Python's clean-up (see bot.process_exit).
    end_process(main())
