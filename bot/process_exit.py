"""Ending this process at once, without Python's clean-up, once what matters has stopped.

Python's own exit joins every thread, stops the engine's worker processes, runs
``atexit`` hooks and frees torch's objects: seconds on a small machine, and
unbounded when a thread still works (a model being loaded). A one-shot command
whose work is written, or a bot that was told to stop, needs none of it: what is
cut off is cut off as a kill would cut it, which the store survives (its write
log is replayed) and the data directory's lock survives (a dead holder's lock is
taken over).

Light on purpose: the entry point imports it whatever command ran (the engine's
``stop_worker_processes`` imports nothing heavy, and starts nothing).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import NoReturn

from raptor_engine import stop_worker_processes

FLUSH_WITHIN_S = 0.5  # how long ending the process waits for logs and output to be written


def end_process(status: int) -> NoReturn:
    """Ends this process now, without Python's clean-up: stops the clustering worker,
    writes out logs and output (waiting at most ``FLUSH_WITHIN_S``), then ``os._exit``.

    For a process that has stopped what matters (see the module docstring); threads
    still running are cut off as a kill would cut them off.
    """
    stop_worker_processes()  # as Python's exit would: an idle worker ends cleanly, a busy one is killed
    # In a thread: a stream lock held by a thread that will never run again must not
    # keep the process alive.
    flushing = threading.Thread(target=_flush_output, name="flush-at-exit", daemon=True)
    flushing.start()
    flushing.join(FLUSH_WITHIN_S)
    os._exit(status)


def _flush_output() -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing more can be written
            pass
