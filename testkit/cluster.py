"""Several real bot processes for the scale-out tests and benchmark: front-ends (``python -m bot serve``,
Slack in HTTP mode against the tests' stand-in) and workers (``python -m bot worker``),
sharing a ``chroma run`` server and a Valkey server, all on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testkit.slack_api import BOT_TOKEN, SIGNING_SECRET
from testkit.valkey import free_port

START_TIMEOUT_S = 180.0  # four processes loading the model on two cores
COORDINATION_SECRET = "cluster-test-secret-0123456789abcdef0123456789abcdef"  # coordination.secret of every process


@dataclass
class BotProcess:
    name: str
    role: str  # "serve" or "worker"
    popen: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int
    http_port: int = 0
    stopped: bool = field(default=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def url(self) -> str:
        """Where Slack posts events to this front-end."""
        return f"http://127.0.0.1:{self.http_port}/slack/events"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def records(self) -> list[dict[str, Any]]:
        """The process's JSON log lines (``observability.log_format: json``), parsed."""
        found = []
        for line in self.log().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a library printing to stdout
            if isinstance(record, dict):
                found.append(record)
        return found

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """GET ``path`` on the process's metrics port: (status, body); (0, error) when refused."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError as error:
            return 0, str(error)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)  # a paused process cannot handle SIGTERM
            terminate(self.popen)
        self.stopped = True


class Cluster:
    """Front-ends and workers of one test module, with their configuration files and logs."""

    def __init__(self, directory: Path, chroma: tuple[str, int], redis_url: str, slack_api: str,
                 lease_s: float = 3.0, log_format: str = "json") -> None:
        self.directory = directory
        self.log_format = log_format
        self.chroma = chroma
        self.redis_url = redis_url
        self.slack_api = slack_api
        self.lease_s = lease_s
        self.processes: list[BotProcess] = []

    def config(self, name: str, metrics_port: int, http_port: int = 0) -> Path:
        settings: dict[str, Any] = {
            "data_dir": str(self.directory / f"data-{name}"),
            "log_level": "INFO",
            "chroma": {"host": self.chroma[0], "port": self.chroma[1]},
            "coordination": {"redis_url": self.redis_url, "secret": COORDINATION_SECRET, "lease_s": self.lease_s,
                             "sweep_every_s": 0.5, "connect_timeout_s": 0.5},
            "observability": {"host": "127.0.0.1", "port": metrics_port, "log_format": self.log_format},
            "bot": {
                "admins": ["UANA"],
                "progress_every_s": 600,
                "schedule": {"enabled": False},
                "rate_limits": {"questions_per_user_per_minute": 0, "rebuilds_per_channel_per_hour": 0},
            },
        }
        if http_port:
            settings["slack"] = {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET, "mode": "http",
                                 "api_base_url": self.slack_api, "http_host": "127.0.0.1", "http_port": http_port}
        path = self.directory / f"{name}.yaml"
        path.write_text(yaml.safe_dump(settings), encoding="utf-8")
        return path

    def start(self, name: str, role: str) -> BotProcess:
        """Starts ``python -m bot serve`` (a front-end) or ``python -m bot worker``; returns at once."""
        metrics_port = free_port()
        http_port = free_port() if role == "serve" else 0
        config = self.config(name, metrics_port, http_port)
        log_path = self.directory / f"{name}.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        with open(log_path, "wb") as log:
            popen = subprocess.Popen([sys.executable, "-m", "bot", "--config", str(config), role],
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        process = BotProcess(name, role, popen, log_path, metrics_port, http_port)
        self.processes.append(process)
        return process

    def wait_ready(self, *processes: BotProcess, timeout: float = START_TIMEOUT_S) -> None:
        """Until each process's ``/readyz`` says ready (and a front-end's Slack endpoint listens)."""
        deadline = time.monotonic() + timeout
        for process in processes:
            while True:
                if process.popen.poll() is not None:
                    raise AssertionError(f"{process.name} exited with {process.popen.returncode}:\n{process.log()[-3000:]}")
                status, _ = process.get("/readyz")
                if status == 200 and (process.role != "serve" or _listens(process.http_port)):
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"{process.name} not ready in {timeout:.0f} s:\n{process.log()[-3000:]}")
                time.sleep(0.3)

    def stop_all(self) -> None:
        for process in self.processes:
            process.stop()

    def lease_holder(self, redis: Any, key_digest: str) -> int | None:
        """The pid holding a channel's lease (from its value ``token|host:pid``), if any."""
        value = redis.get(f"raptor:lease:{key_digest}")
        if value is None:
            return None
        return int(value.decode().rsplit(":", 1)[-1])


def terminate(popen: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if the process has not ended within ``grace_s``."""
    if popen.poll() is not None:
        return
    popen.terminate()
    try:
        popen.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=5)


def _listens(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels`` in a scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def dumps(value: Any) -> str:
    return json.dumps(value, indent=1)


class ChromaServer:
    """``chroma run`` on 127.0.0.1, restartable on the same port (a server that goes away and returns).

    ``open_indexes``, where given, bounds how many collections' vector indexes the server keeps
    open in memory (least recently used closed first), as ``deploy/chroma.yaml`` does; None
    leaves Chroma's default (65,536: in effect every collection it ever opened)."""

    def __init__(self, directory: Path, open_indexes: int | None = None) -> None:
        self.directory = directory
        self.port = free_port()
        self.open_indexes = open_indexes
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    @property
    def pid(self) -> int | None:
        """The running server's process id (None when it is not running)."""
        return self._popen.pid if self._popen is not None and self._popen.poll() is None else None

    def start(self, timeout: float = 60.0) -> None:
        from raptor_engine.reclaim import chroma_command

        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "server.log", "ab") as log:
            self._popen = subprocess.Popen([chroma_command(), "run", *self._arguments()], stdout=log,
                                           stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not _listens(self.port):
            if self._popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chroma run did not start on port {self.port}")
            time.sleep(0.2)

    def _arguments(self) -> list[str]:
        """``chroma run``'s arguments: a configuration file when the open indexes are bounded
        (a file is the only way to set it), else the path, host and port."""
        if self.open_indexes is None:
            return ["--path", str(self.directory / "db"), "--host", "127.0.0.1", "--port", str(self.port)]
        config = self.directory / "chroma.yaml"
        config.write_text(yaml.safe_dump(chroma_config(self.directory / "db", self.port, self.open_indexes)))
        return [str(config)]

    def pause(self) -> None:
        """Stops the server with SIGSTOP: it keeps its port and takes connections (the kernel
        does), but answers nothing, as a hung or silently cut-off server does."""
        if self._popen is not None:
            self._popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Lets a paused server go on (SIGCONT); harmless on one that runs."""
        if self._popen is not None and self._popen.poll() is None:
            self._popen.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._popen is not None:
            self.resume()  # a stopped process would take SIGTERM only once continued
            terminate(self._popen)
        self._popen = None


def chroma_config(persist_path: Path, port: int, open_indexes: int) -> dict[str, Any]:
    """A ``chroma run`` configuration (Chroma 1.x) on 127.0.0.1 that keeps at most ``open_indexes``
    collections' vector indexes open. The pool is Chroma's ``hnsw_index_pool_cache_config``, an
    LRU of entries weighing one each, split into shards that each evict on their own: one shard,
    so the bound is the number given, not a share of it per shard."""
    pool = {"lru": {"capacity": open_indexes, "shards": 1}}
    return {"persist_path": str(persist_path), "listen_address": "127.0.0.1", "port": port,
            "segment_manager": {"hnsw_index_pool_cache_config": pool}}


class BackgroundLoop:
    """An event loop on its own thread, for stand-ins that must outlive one ``asyncio.run``."""

    def __init__(self) -> None:
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="stand-ins", daemon=True)
        self._thread.start()

    def run(self, coroutine: Any, timeout: float = 120.0) -> Any:
        """Runs ``coroutine`` on the loop and returns its result (raises what it raised)."""
        import asyncio

        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
