"""The owned worker process: calls, errors, a death, stopping it idle or busy, closing it,
and a process exit that neither waits for a busy worker nor leaves one behind.

The tasks are standard-library functions: the child imports a task's module by name.
"""

from __future__ import annotations

import operator
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from raptor_engine.worker_process import STOP_WITHIN_S, WorkerLost, WorkerProcess, WorkerUnavailable
from tests.conftest import REPO


@pytest.fixture
def worker() -> Iterator[WorkerProcess]:
    started = WorkerProcess("test-worker", niceness=3)
    yield started
    started.close()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def busy_call(worker: WorkerProcess, seconds: float) -> tuple[threading.Thread, list[BaseException]]:
    """Starts ``time.sleep(seconds)`` in the worker from a thread; returns once it runs there."""
    errors: list[BaseException] = []

    def call() -> None:
        try:
            worker.call(time.sleep, seconds)
        except BaseException as exc:  # noqa: BLE001  (the test reads it)
            errors.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not worker.is_busy and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.is_busy
    return thread, errors


def test_a_call_runs_in_a_lower_priority_child_and_its_errors_come_back(worker: WorkerProcess) -> None:
    assert worker.pid is None  # nothing starts before it is needed
    child = worker.call(os.getpid)
    assert child == worker.pid and child != os.getpid()
    assert worker.call(os.nice, 0) == os.nice(0) + 3
    with pytest.raises(ZeroDivisionError) as raised:
        worker.call(operator.truediv, 1, 0)
    assert f"raised in the worker process {child}" in raised.value.__notes__[0]
    assert worker.call(os.getpid) == child  # the same child serves call after call


def test_a_child_that_dies_fails_its_call_and_is_replaced(worker: WorkerProcess) -> None:
    first = worker.call(os.getpid)
    with pytest.raises(WorkerLost, match="exit code 3") as lost:
        worker.call(os._exit, 3)
    assert not lost.value.stopped
    assert worker.call(os.getpid) != first


def test_stopping_an_idle_child_lets_it_exit(worker: WorkerProcess) -> None:
    child = worker.call(os.getpid)
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < STOP_WITHIN_S  # it exited when asked: no kill was needed
    assert gone(child) and worker.pid is None
    assert worker.call(os.getpid) != child  # the next call starts a new one


def test_stopping_a_busy_child_kills_it_at_once(worker: WorkerProcess) -> None:
    child = worker.call(os.getpid)
    thread, errors = busy_call(worker, 60)
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < STOP_WITHIN_S
    thread.join(5)
    assert len(errors) == 1 and isinstance(errors[0], WorkerLost) and errors[0].stopped
    assert gone(child) and not worker.is_busy


def test_a_closed_worker_starts_no_child(worker: WorkerProcess) -> None:
    child = worker.call(os.getpid)
    worker.close()
    assert gone(child) and worker.closed
    with pytest.raises(WorkerUnavailable):
        worker.call(os.getpid)
    with pytest.raises(WorkerUnavailable):
        worker.start()


# A process with a busy worker and an idle one, ended either by Python's exit or by
# stop_worker_processes and os._exit (as bot.process_exit does).
EXITING = """
import contextlib, os, sys, threading, time
from raptor_engine.worker_process import WorkerLost, WorkerProcess, stop_worker_processes

def wait_long(worker):
    with contextlib.suppress(WorkerLost):  # the exit stops it
        worker.call(time.sleep, 600)

if __name__ == "__main__":
    idle, busy = WorkerProcess("idle"), WorkerProcess("busy")
    idle.start()
    threading.Thread(target=wait_long, args=(busy,), daemon=True).start()
    while not busy.is_busy:
        time.sleep(0.01)
    print(idle.pid, busy.pid, flush=True)
    if sys.argv[1] == "os._exit":
        stop_worker_processes()
        os._exit(0)
"""


@pytest.mark.parametrize("how", ["python", "os._exit"])
def test_exiting_neither_waits_for_a_busy_worker_nor_leaves_one(tmp_path: os.PathLike[str], how: str) -> None:
    script = os.path.join(tmp_path, "exiting.py")  # a file: a spawned child imports its parent's main module
    with open(script, "w", encoding="utf-8") as file:
        file.write(EXITING)
    started = time.monotonic()
    ended = subprocess.run([sys.executable, script, how], capture_output=True, text=True, timeout=120, cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    took = time.monotonic() - started
    assert ended.returncode == 0, ended.stderr
    assert took < 30, f"the exit took {took:.1f} s"  # far from the busy worker's 600 s (the start is seconds)
    assert "leaked" not in ended.stderr and "Traceback" not in ended.stderr, ended.stderr
    pids = [int(pid) for pid in ended.stdout.split()]
    deadline = time.monotonic() + 5
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(pid) for pid in pids), pids
