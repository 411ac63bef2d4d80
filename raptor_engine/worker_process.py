"""One child process computing for this one, owned through a pipe.

A :class:`WorkerProcess` starts a child with multiprocessing's ``spawn`` method (not
``fork``: the parent may hold threads of torch and Chroma that a fork would copy
mid-flight), sends it one task at a time over a :func:`multiprocessing.Pipe` and
waits for the reply. The child lowers its CPU priority when asked to, and ends as
soon as its parent is gone (:func:`~raptor_engine.parent_watch.exit_with_parent`),
however the parent went.

A child that dies mid-task (killed, out of memory) makes that call raise
:class:`WorkerLost`; the next call starts a new child. :meth:`WorkerProcess.stop`
asks an idle child to exit and kills a busy one (a child only computes, it writes
nothing), so stopping never waits for a task.

This process's exit never waits for a busy child either: :func:`stop_worker_processes`
stops every worker and lets none start again. Python's exit runs it: it is registered
with ``atexit`` when the first child has started, after multiprocessing registered its
own exit hook (which joins every child still running), and ``atexit`` runs hooks in
reverse order of registration, so ours comes first. Code that ends the process without
Python's clean-up (``os._exit``) calls it itself. One case is out of its reach:
Python joins non-daemon threads before any ``atexit`` hook, so a non-daemon thread
waiting in :meth:`WorkerProcess.call` holds the exit until the task ends. Callers
therefore wait on daemon threads (the engine's rebuilds and its clustering calls do).

A pipe and a process hold no named semaphores, so multiprocessing's resource tracker
(the other process that spawning starts) has nothing to warn about, and it exits by
itself once neither process holds its pipe.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from raptor_engine.parent_watch import exit_with_parent

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

log = logging.getLogger(__name__)

T = TypeVar("T")
STOP_WITHIN_S = 1.0  # how long stop() lets a child end by itself before killing it

_workers: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()  # every worker of this process
_exit_hook = threading.Lock()
_exit_hook_registered = False


class WorkerUnavailable(Exception):
    """No child can run: starting one failed, or the worker was closed."""


class WorkerLost(Exception):
    """The child ended before it replied. ``stopped``: :meth:`WorkerProcess.stop` ended
    it; otherwise it died (killed, out of memory)."""

    def __init__(self, message: str, stopped: bool) -> None:
        super().__init__(message)
        self.stopped = stopped


class _Child(NamedTuple):  # not a dataclass: importing dataclasses would slow the entry point
    process: BaseProcess
    connection: Connection  # this process's end of the pipe


class WorkerProcess:
    """One child process computing this process's calls, one at a time. Thread-safe."""

    def __init__(self, name: str, niceness: int = 0) -> None:
        """``name`` names the child process (and appears in errors); the child raises its
        nice value by ``niceness``. No child starts before the first :meth:`start` or
        :meth:`call`."""
        self.name = name
        self._niceness = niceness
        self._calls = threading.Lock()  # held for the whole of a call: one task at a time
        self._state = threading.Lock()  # guards the three fields below; never held while waiting
        self._child: _Child | None = None
        self._busy = False
        self._closed = False
        _workers.add(self)

    @property
    def pid(self) -> int | None:
        """The running child's process id, None when none runs."""
        child = self._child
        return None if child is None else child.process.pid

    @property
    def is_busy(self) -> bool:
        """Whether a task is running in the child (a call waits for its reply)."""
        return self._busy

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called: no child starts any more."""
        return self._closed

    def start(self) -> None:
        """Starts the child unless one runs; returns at once (the child's interpreter is
        still starting). Raises ``WorkerUnavailable`` when none can start, or once closed."""
        with self._state:
            self._running_child()

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)``, computed in the child (started first if none runs); blocks
        until it replies. Calls from several threads run one after the other.

        ``function`` and ``args`` are pickled (a module-level function goes by name, so
        the child imports its module). An exception ``function`` raises is raised here,
        with the child's traceback in a note. Raises ``WorkerLost`` when the child ends
        before replying (the next call starts a new one), ``WorkerUnavailable`` when no
        child can start.
        """
        with self._calls:
            with self._state:
                child = self._running_child()
                self._busy = True
            try:
                succeeded, value = self._exchange(child, (function, args))
            finally:
                with self._state:
                    self._busy = False
        if not succeeded:
            raise value
        return value

    def stop(self) -> None:
        """Ends the child, if one runs: an idle one is asked to exit (and killed if it has
        not within ``STOP_WITHIN_S``); a busy one is killed at once, so stopping never waits
        for a task, and its caller gets ``WorkerLost`` with ``stopped``. The next call
        starts a new child (unless closed). Idempotent."""
        with self._state:
            child, self._child = self._child, None
            busy = self._busy
        if child is None:
            return
        if busy:
            child.process.kill()  # the caller sees the end of its pipe, and closes it
        else:
            _ask_to_exit(child.connection)
        child.process.join(STOP_WITHIN_S)
        if child.process.exitcode is None:
            child.process.kill()
            child.process.join(STOP_WITHIN_S)
        log.debug("stopped the %s process (pid %s, %s)", self.name, child.process.pid, "busy" if busy else "idle")

    def close(self) -> None:
        """Stops the child (see :meth:`stop`) for good: no child starts afterwards, and
        calls raise ``WorkerUnavailable``."""
        with self._state:
            self._closed = True
        self.stop()

    def _running_child(self) -> _Child:
        """The child, started if none runs. Called with ``_state`` held."""
        if self._closed:
            raise WorkerUnavailable(f"the {self.name} process was stopped for good")
        if self._child is None:
            self._child = self._spawn()
        return self._child

    def _spawn(self) -> _Child:
        # Imported here: a process that never starts a child (and the entry point, which
        # imports stop_worker_processes whatever command runs) does not pay for it.
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        try:
            ours, theirs = context.Pipe()
        except OSError as exc:
            raise WorkerUnavailable(f"cannot start the {self.name} process: {exc}") from exc
        process = context.Process(target=_serve, args=(theirs, os.getpid(), self._niceness), name=self.name)
        try:
            process.start()
        except (OSError, ValueError) as exc:
            ours.close()
            raise WorkerUnavailable(f"cannot start the {self.name} process: {exc}") from exc
        finally:
            theirs.close()  # the child holds its own copy: its death is then an end of file here
        _stop_all_at_exit()
        log.debug("started the %s process (pid %s)", self.name, process.pid)
        return _Child(process, ours)

    def _exchange(self, child: _Child, task: tuple[Callable[..., Any], tuple[Any, ...]]) -> tuple[bool, Any]:
        """Sends ``task`` and returns the child's reply: (True, result) or (False, exception)."""
        try:
            child.connection.send(task)
            reply: tuple[bool, Any] = child.connection.recv()
        except (EOFError, OSError) as exc:  # the child has ended: its end of the pipe is closed
            raise self._lost(child) from exc
        return reply

    def _lost(self, child: _Child) -> WorkerLost:
        """The error for a child that ended mid-call; forgets it, unless stop() already did
        (then stop() reaps it)."""
        with self._state:
            stopped = self._child is not child
            if not stopped:
                self._child = None
        child.connection.close()
        if stopped:
            return WorkerLost(f"the {self.name} process was stopped", stopped=True)
        child.process.join(STOP_WITHIN_S)  # it has ended: reap it
        return WorkerLost(f"the {self.name} process ended unexpectedly (exit code {child.process.exitcode})",
                          stopped=False)


def stop_worker_processes() -> None:
    """Stops every worker of this process for good (:meth:`WorkerProcess.close`): idle
    children exit, busy ones are killed, and none starts again. For this process's exit:
    Python's runs it (see the module docstring); code ending the process with
    ``os._exit`` calls it first. Idempotent; cheap when no worker ever started."""
    for worker in list(_workers):
        worker.close()


def _stop_all_at_exit() -> None:
    """Registers :func:`stop_worker_processes` with ``atexit``, once, after a child has
    started: multiprocessing has registered its own exit hook by then, so ours runs first."""
    global _exit_hook_registered
    with _exit_hook:
        if not _exit_hook_registered:
            atexit.register(stop_worker_processes)
            _exit_hook_registered = True


def _ask_to_exit(connection: Connection) -> None:
    try:
        connection.send(None)
    except OSError:  # it has ended already
        pass
    connection.close()


# -- in the child ------------------------------------------------------------------------


def _serve(connection: Connection, parent_pid: int, niceness: int) -> None:
    """The child's main loop: exit with the parent, yield the CPU to it, then run each task
    received until told to stop (``None``) or until the parent's end of the pipe closes."""
    import pickle  # here: the parent never needs it (multiprocessing has loaded it in the child)

    exit_with_parent(parent_pid)
    if niceness:
        try:
            os.nice(niceness)
        except OSError:  # not permitted here: the child still works, at normal priority
            pass
    while True:
        try:
            task = connection.recv()
        except EOFError:
            return
        if task is None:
            return
        function, args = task
        reply = _outcome(function, args)
        try:
            connection.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:  # nothing was sent yet
            connection.send((False, RuntimeError(f"the worker process cannot send its reply back: {exc!r}")))


def _outcome(function: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, function(*args)
    except Exception as exc:  # handed to the caller, as a call in its own process would raise it
        exc.add_note(f"raised in the worker process {os.getpid()}:\n{traceback.format_exc()}")
        return False, exc
