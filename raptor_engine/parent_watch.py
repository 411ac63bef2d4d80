"""A child process that ends as soon as its parent is gone.

The engine's child processes (the clustering worker, the ONNX export) must never
outlive the process that started them, however it went: a clean exit, SIGTERM,
SIGKILL, the kernel's out-of-memory killer. Their pipes cannot always tell them (a
child busy computing reads none), so each watches its parent itself.
"""

from __future__ import annotations

import os
import select
import threading
import time

PARENT_POLL_S = 0.5  # how often a child without a pidfd checks that its parent still lives
ORPHAN_EXIT_CODE = 70  # what a child whose parent went exits with (nothing waits for it)


def exit_with_parent(parent_pid: int) -> None:
    """Ends this process (``os._exit``) as soon as ``parent_pid`` is no longer its parent.

    A daemon thread waits on a pidfd of the parent (Linux 5.3+; no wake-ups), or else
    checks ``os.getppid()`` every ``PARENT_POLL_S``: an orphan is adopted by another
    process, so its parent id changes. Not ``PR_SET_PDEATHSIG``: that signal follows
    the parent *thread* that spawned the child (for the clustering worker, the
    short-lived warm-up thread, or whichever thread first asks for clustering), so it
    would kill a healthy child.
    """
    if os.getppid() != parent_pid:
        os._exit(ORPHAN_EXIT_CODE)  # the parent went before we got here
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="parent-watch", daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    pidfd = _pidfd_of_parent(parent_pid)
    if pidfd is not None:
        parent = select.poll()
        parent.register(pidfd, select.POLLIN)
        parent.poll()  # returns once the parent has exited
    else:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
    # No clean-up: the parent that would want a result is gone, and a clean exit
    # would wait for the task this process is running.
    os._exit(ORPHAN_EXIT_CODE)


def _pidfd_of_parent(parent_pid: int) -> int | None:
    """A pidfd of the parent, None where pidfds are not available (then polling is used)."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        pidfd = int(pidfd_open(parent_pid))
    except OSError:  # an old kernel or a sandbox without the call; or the parent is gone already
        return None
    if os.getppid() != parent_pid:  # it went (and its pid may be reused) before the pidfd was taken
        os._exit(ORPHAN_EXIT_CODE)
    return pidfd
