"""The test kit's Valkey server: it starts, answers, forgets everything on a restart (no
persistence), comes back on the same port, and is unreachable once stopped."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import redis

from testkit.valkey import ValkeyError, ValkeyProcess, ping


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)


def test_the_session_server_answers_and_is_empty(redis_url: str) -> None:
    assert redis_url.startswith("redis://127.0.0.1:") and redis_url.endswith("/0")
    r = client(redis_url)
    assert r.ping() is True
    assert r.dbsize() == 0
    r.set("kit:key", "value")
    assert r.get("kit:key") == b"value"
    r.close()


def test_flushed_between_tests(redis_url: str) -> None:
    r = client(redis_url)
    assert r.get("kit:key") is None  # written by the previous test, flushed since
    r.close()


def test_restart_keeps_the_port_and_forgets_the_keys(own_valkey: ValkeyProcess) -> None:
    url, port, pid = own_valkey.url, own_valkey.port, own_valkey.pid
    r = client(url)
    r.set("kit:survivor", "1")
    r.rpush("kit:queue", "job")
    own_valkey.restart()
    assert (own_valkey.url, own_valkey.port) == (url, port)
    assert own_valkey.pid != pid
    assert r.ping() is True  # the same client reconnects to the new server
    assert r.exists("kit:survivor", "kit:queue") == 0
    r.close()


def test_stop_makes_clients_fail_to_connect(own_valkey: ValkeyProcess) -> None:
    r = client(own_valkey.url)
    assert r.ping() is True
    own_valkey.stop()
    assert not own_valkey.running and own_valkey.pid is None
    assert not ping(own_valkey.port)
    with pytest.raises(redis.ConnectionError):
        r.ping()
    own_valkey.stop()  # stopping twice does nothing
    own_valkey.start()
    assert r.ping() is True
    r.close()


def test_pause_stalls_clients_until_resumed(own_valkey: ValkeyProcess) -> None:
    r = redis.Redis.from_url(own_valkey.url, socket_connect_timeout=1, socket_timeout=0.3)
    r.ping()
    own_valkey.pause()
    assert own_valkey.paused
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError):
        r.ping()
    assert time.monotonic() - started < 2
    own_valkey.resume()
    assert not own_valkey.paused
    assert r.ping() is True
    r.close()


def test_context_manager_and_a_temporary_directory() -> None:
    with ValkeyProcess() as server:
        directory = server.directory
        assert directory is not None and directory.is_dir()
        assert client(server.url).ping() is True
        assert "Ready to accept connections" in server.log_text()
    assert not server.running
    assert not directory.exists()  # the temporary directory made for it is gone


def test_a_missing_binary_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VALKEY_SERVER", str(tmp_path / "no-such-valkey-server"))
    with pytest.raises(ValkeyError, match="VALKEY_SERVER"):
        ValkeyProcess().start()


def test_a_taken_port_is_refused(own_valkey: ValkeyProcess, tmp_path: Path) -> None:
    clash = ValkeyProcess(port=own_valkey.port, directory=tmp_path / "clash")
    with pytest.raises(ValkeyError, match="taken"):
        clash.start()
    assert not clash.running


def test_a_server_that_cannot_start_reports_its_output(tmp_path: Path) -> None:
    with socket.socket() as holder:  # the port is bound by something that is not a server
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        clash = ValkeyProcess(port=holder.getsockname()[1], directory=tmp_path / "clash")
        with pytest.raises(ValkeyError, match="exited") as failure:
            clash.start()
    assert "address already in use" in str(failure.value).lower()
    assert not clash.running
