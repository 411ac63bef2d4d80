"""Clustering in a separate, low-priority process.

UMAP's numba kernels hold Python's interpreter lock while they run, and
:func:`~raptor_engine.clustering.cluster_rows` limits BLAS to one thread
process-wide while it lasts; run in the bot's own process, a rebuild's
clustering therefore slows every question answered meanwhile. Here it runs in
:data:`worker`, one child process (a :class:`~raptor_engine.worker_process.WorkerProcess`)
at a lower CPU priority, shared by every engine of the process and kept for its
lifetime (its numba compilation is paid once; ``NUMBA_CACHE_DIR`` makes even that
cheap).

A worker that dies (killed, out of memory) is replaced at the next call; the
call that saw it die raises ``BuildError``. Where no process can be started,
clustering runs in a thread of this process instead.

The worker never outlives this process: it watches its parent and exits as soon
as the parent is gone, however the parent went (a clean exit, SIGTERM, SIGKILL,
the kernel's out-of-memory killer). The other way round, this process's exit
never waits for the worker: ``raptor_engine.stop_worker_processes`` (run by
Python's exit, or called before an ``os._exit``) asks an idle worker to exit and
kills a busy one, and no new one starts afterwards (clustering then raises
``BuildError``). Calls wait for the worker on daemon threads of their own, which
an exit does not join (see ``worker_process``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from raptor_engine.background import BACKGROUND_NICENESS
from raptor_engine.errors import BuildError
from raptor_engine.worker_process import WorkerLost, WorkerProcess, WorkerUnavailable

if TYPE_CHECKING:
    import numpy as np

    from raptor_engine.clustering import ClusteringSettings

# ``raptor_engine.clustering`` (scikit-learn, UMAP: seconds to import on a loaded machine) is
# imported where it is used, not here: prestart() runs before a command's heavy imports,
# and the worker imports this module to run its warm-up.

log = logging.getLogger(__name__)

T = TypeVar("T")

worker = WorkerProcess("clustering", niceness=BACKGROUND_NICENESS)
"""The clustering worker every engine of this process shares."""
_unavailable = False  # set once starting a process failed: do not try on every call
_prestarted_pid: int | None = None  # the worker prestart() warmed (a new worker is warmed again)

STOPPING = "the bot is stopping; the previous tree still answers"
DIED = ("the clustering worker process stopped unexpectedly (out of memory?); "
        "the previous tree still answers, try the rebuild again")


def _worker_started() -> bool:
    """Starts the worker unless it runs. False where no process can start: clustering
    then runs in this process (one failure is enough: no process is tried again).
    Raises ``WorkerUnavailable`` once the worker is closed (this process is exiting)."""
    global _unavailable
    if worker.closed:
        raise WorkerUnavailable("the clustering worker was stopped for good")
    if _unavailable:
        return False
    try:
        worker.start()
    except WorkerUnavailable as exc:
        if worker.closed:
            raise
        log.warning("clustering runs in this process: cannot start a worker process (%s)", exc)
        _unavailable = True
        return False
    return True


async def cluster(
    vectors: np.ndarray, token_counts: Sequence[int], settings: ClusteringSettings
) -> list[list[int]]:
    """:func:`~raptor_engine.clustering.cluster_rows`, computed in the worker process.
    Raises ``BuildError`` if the worker dies meanwhile, or the process is exiting."""
    from raptor_engine import clustering

    counts = list(token_counts)
    try:
        if not _worker_started():
            return await asyncio.to_thread(clustering.cluster_rows, vectors, counts, settings)
        return await _on_daemon_thread(worker.call, clustering.cluster_rows, vectors, counts, settings)
    except (WorkerLost, WorkerUnavailable) as exc:
        raise _build_error(exc) from exc


def _build_error(exc: WorkerLost | WorkerUnavailable) -> BuildError:
    if isinstance(exc, WorkerLost) and not exc.stopped:
        return BuildError(DIED)
    if worker.closed:
        return BuildError(STOPPING)
    return BuildError(f"{exc}; the previous tree still answers")


async def _on_daemon_thread(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` on a daemon thread of its own, awaited.

    Not ``asyncio.to_thread``: the loop's default executor is joined when the loop closes,
    and its threads when this process exits, so a caller that gave up (a cancelled rebuild)
    would still wait there for the worker's task. This thread is abandoned instead."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    future.set_running_or_notify_cancel()  # running: a cancelled awaiter leaves it to finish

    def run() -> None:
        try:
            future.set_result(function(*args))
        except BaseException as exc:  # handed to the awaiting coroutine
            future.set_exception(exc)

    threading.Thread(target=run, name="clustering-call", daemon=True).start()
    return await asyncio.wrap_future(future)


def prestart() -> None:
    """Starts the worker, and UMAP's warm-up in it, without waiting for either. A one-shot
    command that is about to cluster calls it first, so that the worker's start (a fresh
    interpreter importing scikit-learn, UMAP and numba's cached kernels: seconds) overlaps
    the command's own imports and model loading instead of following them. A failure is
    left to the first real call, which replaces a dead worker or reports it. Imports nothing
    heavy here (the worker imports the clustering code), and warms a worker once."""
    global _prestarted_pid
    try:
        if not _worker_started():
            return
    except WorkerUnavailable:  # this process is exiting
        return
    pid = worker.pid
    if pid is None or pid == _prestarted_pid:
        return
    _prestarted_pid = pid
    threading.Thread(target=_warm_up_quietly, name="umap-prestart", daemon=True).start()


def _warm_up_quietly() -> None:
    try:
        worker.call(_warm_up_in_worker)
    except Exception:  # the first real call replaces a dead worker, or reports it
        log.debug("the clustering worker's warm-up did not complete", exc_info=True)


def _warm_up_in_worker() -> None:
    """UMAP's warm-up, run in the worker: the clustering code is imported there, not here."""
    from raptor_engine import clustering

    clustering.warm_up()


def warm_up() -> bool:
    """Starts the worker and compiles UMAP's kernels in it now, rather than in the first
    rebuild. Blocking (seconds); call it from a thread at start-up. True once compiled;
    False, without an error, when the worker was stopped meanwhile (this process is
    exiting). Raises ``BuildError`` if the worker dies otherwise."""
    from raptor_engine import clustering

    try:
        if _worker_started():
            worker.call(clustering.warm_up)
        else:
            clustering.warm_up()
    except WorkerLost as exc:
        if not exc.stopped:
            raise BuildError("the clustering worker process stopped while compiling UMAP") from exc
        log.debug("the UMAP warm-up was abandoned: the clustering worker was stopped")
        return False
    except WorkerUnavailable as exc:
        log.debug("no UMAP warm-up: %s", exc)
        return False
    return True
