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
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from raptor_engine import clustering
from raptor_engine.background import BACKGROUND_NICENESS
from raptor_engine.errors import BuildError

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_unavailable = False  # set once starting a process failed: do not try on every call


def _initialise_worker() -> None:
    try:
        os.nice(BACKGROUND_NICENESS)
    except OSError:  # not permitted here: the process still works, at normal priority
        pass


def _executor() -> ProcessPoolExecutor | None:
    """The shared worker pool, started on first use; None where processes cannot be started."""
    global _pool, _unavailable
    with _lock:
        if _pool is None and not _unavailable:
            try:
                _pool = ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_initialise_worker
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
    vectors: np.ndarray, token_counts: Sequence[int], settings: clustering.ClusteringSettings
) -> list[list[int]]:
    """:func:`~raptor_engine.clustering.cluster_rows`, computed in the worker process."""
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


def warm_up() -> None:
    """Starts the worker and compiles UMAP's kernels in it now, rather than in the first
    rebuild. Blocking (seconds); call it from a thread at start-up."""
    pool = _executor()
    if pool is None:
        clustering.warm_up()
        return
    pool.submit(clustering.warm_up).result()


@atexit.register
def _shutdown() -> None:
    with _lock:
        pool = _pool
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
