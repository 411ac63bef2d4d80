"""Background work: the low-priority rebuild thread, the foreground gate and the clustering worker."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import numpy as np
import pytest

from raptor_engine import cluster_worker
from raptor_engine.background import ForegroundGate, run_in_background
from raptor_engine.clustering import ClusteringSettings, cluster_rows
from raptor_engine.errors import BuildError


def test_the_coroutine_runs_on_a_thread_of_its_own_at_lower_priority() -> None:
    async def where() -> tuple[int, int]:
        tid = threading.get_native_id()
        return tid, os.getpriority(os.PRIO_PROCESS, tid)

    async def scenario() -> tuple[int, int]:
        return await run_in_background(where(), name="test")

    tid, niceness = asyncio.run(scenario())
    assert tid != threading.get_native_id()
    if os.uname().sysname == "Linux":
        assert niceness > os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_results_and_errors_come_back() -> None:
    async def fails() -> None:
        raise ValueError("from the background")

    async def scenario() -> int:
        with pytest.raises(ValueError, match="from the background"):
            await run_in_background(fails(), name="test")
        return await run_in_background(asyncio.sleep(0, result=7), name="test")

    assert asyncio.run(scenario()) == 7


def test_cancelling_the_caller_cancels_the_coroutine() -> None:
    seen = threading.Event()

    async def long_work() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.set()
            raise

    async def scenario() -> None:
        task = asyncio.ensure_future(run_in_background(long_work(), name="test"))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert seen.wait(5)


def test_the_gate_holds_background_steps_while_foreground_work_runs() -> None:
    gate = ForegroundGate(max_wait_s=5)
    released = []

    def background_step() -> None:
        gate.wait_quiet()
        released.append(time.monotonic())

    with gate.foreground():
        worker = threading.Thread(target=background_step)
        worker.start()
        time.sleep(0.2)
        assert not released and gate.busy
        ended = time.monotonic()
    worker.join(5)
    assert released and released[0] >= ended and not gate.busy


def test_the_gate_never_holds_a_step_longer_than_its_limit() -> None:
    gate = ForegroundGate(max_wait_s=0.1)
    with gate.foreground():
        started = time.monotonic()
        gate.wait_quiet()
        assert time.monotonic() - started < 1.0


def _points(seed: int = 3) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, 16))
    rows = np.vstack([c + 0.05 * rng.normal(size=(15, 16)) for c in centres]).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True), [20] * len(rows)


def test_the_worker_clusters_exactly_as_this_process_does() -> None:
    vectors, tokens = _points()
    settings = ClusteringSettings()
    assert asyncio.run(cluster_worker.cluster(vectors, tokens, settings)) == cluster_rows(vectors, tokens, settings)


def test_a_worker_that_dies_is_a_build_error_and_is_replaced() -> None:
    vectors, tokens = _points()
    asyncio.run(cluster_worker.cluster(vectors, tokens, ClusteringSettings()))  # the worker is up
    pid = cluster_worker.worker.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the worker process dies, as it would when killed for memory
    with pytest.raises(BuildError, match="stopped unexpectedly"):
        asyncio.run(cluster_worker.cluster(vectors, tokens, ClusteringSettings()))
    assert asyncio.run(cluster_worker.cluster(vectors, tokens, ClusteringSettings()))  # a new worker
    assert cluster_worker.worker.pid not in (None, pid)
