"""bot.observability against the real thing: prometheus_client's own parser reads the metrics,
a real aiohttp server on 127.0.0.1 answers real HTTP clients, and real loggers write JSON."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bot.observability import (
    CONTENT_TYPE,
    HealthServer,
    JsonFormatter,
    Metrics,
    Probe,
    channel_context,
    json_handler,
    set_process_role,
)


def samples(text: bytes | str) -> list[Sample]:
    raw = text.decode() if isinstance(text, bytes) else text
    return [s for family in text_string_to_metric_families(raw) for s in family.samples]


def value(text: bytes | str, name: str, **labels: str) -> float:
    """The one sample ``name`` with exactly ``labels`` (fails when absent)."""
    found = [s.value for s in samples(text) if s.name == name and s.labels == labels]
    assert len(found) == 1, f"{name}{labels} not in scrape"
    return found[0]


# Metrics


def test_counters_show_their_counts() -> None:
    m = Metrics()
    m.observe_question("slack", "answered", 0.3)
    m.observe_question("slack", "answered", 0.7)
    m.observe_question("discord", "refused", 0.01)
    m.observe_rebuild("built", 12.0)
    m.observe_rebuild("busy", 0.5)
    m.count_model_call("summary", tokens=120)
    m.count_model_call("summary", tokens=30)
    m.count_error("engine")
    out = m.render()
    assert value(out, "raptor_questions_total", platform="slack", outcome="answered") == 2
    assert value(out, "raptor_questions_total", platform="discord", outcome="refused") == 1
    assert value(out, "raptor_rebuilds_total", outcome="built") == 1
    assert value(out, "raptor_rebuilds_total", outcome="busy") == 1
    assert value(out, "raptor_model_calls_total", purpose="summary") == 2
    assert value(out, "raptor_model_tokens_total", purpose="summary") == 150
    assert value(out, "raptor_errors_total", kind="engine") == 1


def test_histograms_count_into_buckets() -> None:
    m = Metrics()
    m.observe_question("slack", "answered", 0.3)
    m.observe_question("slack", "failed", 45.0)
    m.observe_ack("slack", 0.002)
    m.observe_rebuild("built", 90.0)
    out = m.render()
    assert value(out, "raptor_question_seconds_count", platform="slack") == 2
    assert value(out, "raptor_question_seconds_sum", platform="slack") == pytest.approx(45.3)
    assert value(out, "raptor_question_seconds_bucket", platform="slack", le="0.5") == 1
    assert value(out, "raptor_question_seconds_bucket", platform="slack", le="60.0") == 2
    assert value(out, "raptor_ack_seconds_bucket", platform="slack", le="0.001") == 0
    assert value(out, "raptor_ack_seconds_bucket", platform="slack", le="0.0025") == 1
    assert value(out, "raptor_rebuild_seconds_bucket", le="60.0") == 0
    assert value(out, "raptor_rebuild_seconds_bucket", le="120.0") == 1


def test_question_outcome_is_checked() -> None:
    m = Metrics()
    with pytest.raises(ValueError, match="outcome"):
        m.observe_question("slack", "answred", 1.0)
    assert not [s for s in samples(m.render()) if s.name == "raptor_questions_total"]


def test_two_instances_count_apart() -> None:
    a, b = Metrics(), Metrics()
    a.count_error("x")
    assert value(a.render(), "raptor_errors_total", kind="x") == 1
    assert not [s for s in samples(b.render()) if s.name == "raptor_errors_total"]


def test_queue_depth_is_read_at_each_scrape() -> None:
    m = Metrics()
    assert math.isnan(value(m.render(), "raptor_queue_depth"))  # unknown until watched
    depth = [3]
    m.watch_queue(lambda: depth[0])
    assert value(m.render(), "raptor_queue_depth") == 3
    depth[0] = 7
    assert value(m.render(), "raptor_queue_depth") == 7


def test_a_raising_queue_callable_does_not_break_the_scrape() -> None:
    m = Metrics()
    m.count_error("kept")

    def broken() -> float:
        raise ConnectionError("queue unreachable")

    m.watch_queue(broken)
    out = m.render()
    assert math.isnan(value(out, "raptor_queue_depth"))
    assert value(out, "raptor_errors_total", kind="kept") == 1


# HealthServer


def ok() -> bool:
    return True


def not_ready() -> bool:
    return False


def raises() -> bool:
    raise RuntimeError("db down")


def hangs() -> bool:
    threading.Event().wait(5)  # a server that does not answer (its thread is a daemon: it ends on its own)
    return True


async def fetch(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.headers["Content-Type"], await response.text()


def serve(server: HealthServer, *paths: str) -> list[tuple[int, str, str]]:
    """Start ``server`` on a free port, GET each path, stop it; the (status, type, body) of each."""
    async def run() -> list[tuple[int, str, str]]:
        port = await server.start("127.0.0.1", 0)
        try:
            return [await fetch(f"http://127.0.0.1:{port}{path}") for path in paths]
        finally:
            await server.stop()
    return asyncio.run(run())


def test_healthz_and_metrics() -> None:
    metrics = Metrics()
    metrics.observe_question("slack", "answered", 1.0)
    (health, scrape) = serve(HealthServer(metrics), "/healthz", "/metrics")
    assert health[0] == 200 and health[2] == "ok"
    status, content_type, body = scrape
    assert status == 200
    assert content_type == CONTENT_TYPE
    assert value(body, "raptor_questions_total", platform="slack", outcome="answered") == 1


def test_readyz_is_200_when_every_probe_passes() -> None:
    server = HealthServer(Metrics())
    server.add_probe("chroma", ok)
    server.add_probe("model", ok)
    [(status, _, body)] = serve(server, "/readyz")
    assert status == 200
    assert json.loads(body) == {"ready": True, "checks": {"chroma": "ok", "model": "ok"}}


def test_readyz_with_no_probes_is_ready() -> None:
    [(status, _, body)] = serve(HealthServer(Metrics()), "/readyz")
    assert (status, json.loads(body)) == (200, {"ready": True, "checks": {}})


@pytest.mark.parametrize(("probe", "status"), [(not_ready, "failing"), (raises, "error"), (hangs, "timeout")])
def test_readyz_is_503_naming_the_failing_probe(probe: Probe, status: str) -> None:
    server = HealthServer(Metrics(), probe_timeout=0.2)
    server.add_probe("chroma", ok)
    server.add_probe("broken", probe)
    started = time.monotonic()
    [(code, _, body)] = serve(server, "/readyz")
    assert time.monotonic() - started < 3  # a hung probe is cut off, not waited for
    assert code == 503
    assert json.loads(body) == {"ready": False, "checks": {"chroma": "ok", "broken": status}}


def test_probes_run_concurrently() -> None:
    def slow() -> bool:
        time.sleep(0.4)
        return True

    server = HealthServer(Metrics(), probe_timeout=2.0)
    for name in ("a", "b", "c"):
        server.add_probe(name, slow)
    started = time.monotonic()
    [(code, _, _)] = serve(server, "/readyz")
    assert code == 200
    assert time.monotonic() - started < 1.1  # three in a row would take 1.2 s


def test_a_hung_probe_is_run_once_and_waited_on_again_never_stacked() -> None:
    """Each /readyz while a probe hangs answers 503 within the probe's timeout, and waits on the
    check already running: one thread, however often the orchestrator asks. Once the check
    ends, the next /readyz runs a new one."""
    release = threading.Event()
    calls: list[str] = []

    def stuck() -> bool:
        calls.append(threading.current_thread().name)
        return release.wait(10)

    server = HealthServer(Metrics(), probe_timeout=0.3)
    server.add_probe("chroma", stuck)

    async def run() -> list[tuple[int, str, str]]:
        port = await server.start("127.0.0.1", 0)
        url = f"http://127.0.0.1:{port}/readyz"
        try:
            answers = []
            for _ in range(4):
                started = time.monotonic()
                answers.append(await fetch(url))
                assert time.monotonic() - started < 2
            release.set()
            await asyncio.sleep(0.1)  # the stuck check ends, its thread with it
            answers.append(await fetch(url))
            return answers
        finally:
            await server.stop()

    answers = asyncio.run(run())
    assert [status for status, _, _ in answers] == [503, 503, 503, 503, 200]
    assert json.loads(answers[0][2])["checks"] == {"chroma": "timeout"}
    assert calls == ["probe-chroma", "probe-chroma"]  # the four hung asks shared one check
    assert not [t for t in threading.enumerate() if t.name == "probe-chroma"]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_thread_mode_answers_while_the_caller_blocks() -> None:
    metrics = Metrics()
    metrics.watch_queue(lambda: 4)
    server = HealthServer(metrics)
    probe_threads: list[str] = []

    def where() -> bool:
        probe_threads.append(threading.current_thread().name)
        return True

    server.add_probe("where", where)
    port = server.start_in_thread("127.0.0.1", 0)
    try:
        assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok")
        code, body = get(f"http://127.0.0.1:{port}/metrics")
        assert code == 200 and value(body, "raptor_queue_depth") == 4
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 200
        assert probe_threads == ["probe-where"]  # a thread of its own, not the server's loop
        with pytest.raises(RuntimeError):
            server.start_in_thread("127.0.0.1", 0)
    finally:
        server.stop_thread()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
    assert not [t for t in threading.enumerate() if t.name == "health-server"]


def test_thread_mode_reports_a_port_in_use() -> None:
    first = HealthServer(Metrics())
    port = first.start_in_thread("127.0.0.1", 0)
    try:
        with pytest.raises(OSError):
            HealthServer(Metrics()).start_in_thread("127.0.0.1", port)
    finally:
        first.stop_thread()


# JSON logs


@pytest.fixture
def json_log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of the test's own, writing JSON lines to a buffer; the role reset after."""
    stream = io.StringIO()
    logger = logging.getLogger("tests.observability.json")
    handler = json_handler(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)
        set_process_role("")


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_line_has_the_contracted_keys(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = json_log
    set_process_role("worker")
    with channel_context("C123"):
        logger.warning("built %d nodes\nin %s", 5, "C123", extra={"reference": "doc.pdf#p3"})
    logger.info("outside")
    [inside, outside] = lines(stream)
    assert inside["level"] == "WARNING" and inside["logger"] == "tests.observability.json"
    assert inside["message"] == "built 5 nodes\nin C123"
    assert (inside["role"], inside["channel"], inside["reference"]) == ("worker", "C123", "doc.pdf#p3")
    stamp = str(inside["time"])
    assert stamp.endswith("Z") and len(stamp.split(".")[1]) == 4  # milliseconds, then Z
    assert datetime.fromisoformat(stamp).utcoffset() is not None
    assert "channel" not in outside and "reference" not in outside and "exception" not in outside


def test_extra_channel_wins_over_the_context(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = json_log
    with channel_context("C1"):
        logger.info("x", extra={"channel": "C2"})
    assert lines(stream)[0]["channel"] == "C2"


def test_exception_is_formatted(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = json_log
    try:
        raise KeyError("missing-node")
    except KeyError:
        logger.exception("lookup failed")
    [entry] = lines(stream)
    assert entry["message"] == "lookup failed"
    assert "Traceback" in str(entry["exception"]) and "missing-node" in str(entry["exception"])


def test_channel_follows_work_into_to_thread_and_tasks(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = json_log

    async def handle(channel: str) -> None:
        with channel_context(channel):
            await asyncio.to_thread(logger.info, "in thread")
            task = asyncio.create_task(log_later())
        await task  # created inside the context: keeps the channel after the block ends

    async def log_later() -> None:
        await asyncio.sleep(0.01)
        logger.info("in task")

    async def main() -> None:
        await asyncio.gather(handle("C-A"), handle("C-B"))
        logger.info("after")

    asyncio.run(main())
    entries = lines(stream)
    by_message = sorted((e["message"], e.get("channel")) for e in entries)
    assert by_message == [("after", None), ("in task", "C-A"), ("in task", "C-B"),
                          ("in thread", "C-A"), ("in thread", "C-B")]
    assert {str(e["role"]) for e in entries} == {""}


def test_formatter_survives_values_json_cannot_hold() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    record.reference = object()
    entry = json.loads(JsonFormatter().format(record))
    assert entry["reference"].startswith("<object object")
