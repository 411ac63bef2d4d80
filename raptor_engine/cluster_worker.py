"""Clustering in a separate, low-priority process.

UMAP's numba kernels hold Python's interpreter lock while they run, and
:func:`~raptor_engine.clustering.cluster_rows` limits BLAS to one thread
process-wide while it lasts; run in the bot's own process, a rebuild's
clustering therefore slows every question answered meanwhile. Here it runs in
one worker process (spawned, not forked: the parent holds torch and Chroma
threads that a fork would copy mid-flight), at a lower CPU priority, shared by
every engine of the process and kept for its lifetime (its numba compilation
is paid once; ``NUMBA_CACHE_DIR`` makes even that cheap).

A worker that dies (killed, out of memory) is replaced at the next call; the
call that saw it die raises ``BuildError``. Where no process can be started,
clustering runs in a thread of this process instead.

The worker never outlives this process. Its pipes cannot tell it (a spawned
worker holds both ends of its task queue, so it never reads an end of file),
so it watches its parent itself and exits as soon as the parent is gone,
however the parent went: a clean exit, SIGTERM, SIGKILL, the kernel's
out-of-memory killer. The other way round, this process's exit never waits for
the worker: :func:`stop` kills it, and runs at exit before ``concurrent.futures``
would join the pool (which waits for the running task, a compile of tens of
seconds). multiprocessing's resource tracker, the other process that spawning
starts, exits by itself once neither process holds its pipe.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import multiprocessing
import os
import select
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from raptor_engine.background import BACKGROUND_NICENESS
from raptor_engine.errors import BuildError

if TYPE_CHECKING:
    import numpy as np

    from raptor_engine.clustering import ClusteringSettings

# ``raptor_engine.clustering`` (scikit-learn, UMAP: seconds to import on a loaded machine) is
# imported where it is used, not here: a new worker imports this module to run its
# initializer, and the sooner that runs, the sooner the worker watches its parent.

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_unavailable = False  # set once starting a process failed: do not try on every call
_exiting = False  # this process is shutting down: no new worker may start
_prestarted: ProcessPoolExecutor | None = None  # the pool prestart() warmed (a new worker is warmed again)
PARENT_POLL_S = 0.5  # how often a worker without a pidfd checks that its parent still lives
ORPHAN_EXIT_CODE = 70  # what a worker whose parent went exits with (nothing waits for it)


def _initialise_worker(parent_pid: int) -> None:
    """Runs first in the worker: exit with the parent, then yield the CPU to it."""
    exit_with_parent(parent_pid)
    try:
        os.nice(BACKGROUND_NICENESS)
    except OSError:  # not permitted here: the process still works, at normal priority
        pass


def exit_with_parent(parent_pid: int) -> None:
    """Ends this process (``os._exit``) as soon as ``parent_pid`` is no longer its parent.

    A daemon thread waits on a pidfd of the parent (Linux 5.3+; no wake-ups), or else
    checks ``os.getppid()`` every ``PARENT_POLL_S``: an orphan is adopted by another
    process, so its parent id changes. Not ``PR_SET_PDEATHSIG``: that signal follows
    the parent *thread* that spawned the worker (here the short-lived warm-up thread,
    or whichever thread first asks for clustering), so it would kill a healthy worker.
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


def _executor() -> ProcessPoolExecutor | None:
    """The shared worker pool, started on first use; None where processes cannot be started."""
    global _pool, _unavailable
    with _lock:
        if _pool is None and not _unavailable and not _exiting:
            try:
                _pool = ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_initialise_worker, initargs=(os.getpid(),),
                )
            except (OSError, ValueError) as exc:
                log.warning("clustering runs in this process: cannot start a worker process (%s)", exc)
                _unavailable = True
        return _pool


def _discard(broken: ProcessPoolExecutor) -> None:
    global _pool
    with _lock:
        if _pool is broken:
            _pool = None
    broken.shutdown(wait=False, cancel_futures=True)


async def cluster(
    vectors: np.ndarray, token_counts: Sequence[int], settings: ClusteringSettings
) -> list[list[int]]:
    """:func:`~raptor_engine.clustering.cluster_rows`, computed in the worker process.
    Raises ``BuildError`` if the worker dies meanwhile, or the process is exiting."""
    if _exiting:
        raise BuildError("the bot is stopping; the previous tree still answers")
    from raptor_engine import clustering

    pool = _executor()
    if pool is None:
        return await asyncio.to_thread(clustering.cluster_rows, vectors, list(token_counts), settings)
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(pool, clustering.cluster_rows, vectors, list(token_counts), settings)
    except BrokenProcessPool as exc:
        _discard(pool)
        raise BuildError("the clustering worker process stopped unexpectedly (out of memory?); "
                         "the previous tree still answers, try the rebuild again") from exc


def prestart() -> None:
    """Starts the worker, and UMAP's warm-up in it, without waiting for either. A one-shot
    command that is about to cluster calls it first, so that the worker's start (a fresh
    interpreter importing scikit-learn, UMAP and numba's cached kernels: seconds) overlaps
    the command's own imports and model loading instead of following them. A failure is
    left to the first real call, which replaces a dead worker or reports it. Imports nothing
    heavy here (the worker imports the clustering code), and warms a worker once."""
    global _prestarted
    pool = _executor()
    if pool is None or _prestarted is pool:
        return
    _prestarted = pool
    try:
        pool.submit(_warm_up_in_worker)
    except RuntimeError:  # stop() shut the pool down just now
        log.debug("the clustering worker was stopped before its warm-up started")


def _warm_up_in_worker() -> bool:
    """UMAP's warm-up, run in the worker: the clustering code is imported there, not here."""
    from raptor_engine import clustering

    clustering.warm_up()
    return True


def warm_up() -> bool:
    """Starts the worker and compiles UMAP's kernels in it now, rather than in the first
    rebuild. Blocking (seconds); call it from a thread at start-up. True once compiled;
    False, without an error, when :func:`stop` ended the worker meanwhile (or the process
    is exiting). Raises ``BuildError`` if the worker dies otherwise."""
    from raptor_engine import clustering

    pool = _executor()
    if pool is None:
        if _exiting:
            return False
        clustering.warm_up()
        return True
    try:
        future = pool.submit(clustering.warm_up)
    except RuntimeError:  # stop() shut the pool down just now
        return False
    try:
        future.result()
    except BrokenProcessPool as exc:
        with _lock:
            stopped = _pool is not pool
        if stopped:
            log.debug("the UMAP warm-up was abandoned: the clustering worker was stopped")
            return False
        _discard(pool)
        raise BuildError("the clustering worker process stopped while compiling UMAP") from exc
    return True


def stop() -> None:
    """Kills the worker process now, abandoning any task it runs (whoever waits for one gets
    ``BuildError``), and forgets the pool: the next call starts a new worker. Idempotent.

    Killing is safe: the worker only computes, it writes nothing. It also runs at this
    process's exit, before ``concurrent.futures`` joins its pools."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is None:
        return
    # ProcessPoolExecutor has no public way to end a running task before Python 3.14
    # (terminate_workers); its process table is the only handle on the worker.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        try:
            process.kill()
        except (OSError, ValueError):  # already gone, or already closed
            pass
    pool.shutdown(wait=False, cancel_futures=True)
    log.debug("stopped the clustering worker (%d process(es))", len(processes))


def stop_for_exit() -> None:
    """For this process's exit (Python's own, or an ``os._exit`` that skips it): an idle
    worker is shut down cleanly (it ends at once, and the pool's queues release their
    semaphores, which a kill leaves for the resource tracker to warn about); a busy one
    is killed, so that exit never waits for its task."""
    global _exiting, _pool
    _exiting = True  # a rebuild thread still running must not start a new worker now
    with _lock:
        pool = _pool
        idle = pool is not None and not getattr(pool, "_pending_work_items", True)
        if idle:
            _pool = None
    if pool is not None and idle:
        pool.shutdown(wait=True)
        return
    stop()


def _register_exit_hook() -> None:
    """Runs :func:`stop_for_exit` at exit before ``concurrent.futures`` joins its pools.

    That join is registered with ``threading``'s exit hooks, which run before
    ``atexit``'s and in reverse order of registration; ``concurrent.futures.process``
    registered its own when this module imported it, so ours runs first.
    """
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # not CPython 3.9+: atexit is the next best (the join may come first)
        atexit.register(stop_for_exit)
        return
    register(stop_for_exit)


_register_exit_hook()
