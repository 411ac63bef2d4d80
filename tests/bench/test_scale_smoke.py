"""Smoke test of ``bench.scale``: the scale-out benchmark, shrunk to run in a couple of minutes.

``bench.scale.main`` runs once with two channels per round, five questions per
condition and fifty calls per coordination operation, articles cut to 4,000 characters, on real processes (a
``chroma run`` server, Valkey, a front-end and two workers). The test checks that
every figure is produced, in the tables and in the JSON, and that every build
and question went through; not the figures themselves (they depend on the
machine and on what else runs on it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import scale
from bench.data import DEFAULT_DATA

pytestmark = [pytest.mark.heavy, pytest.mark.slow]

CHANNELS, QUESTIONS, CALLS = 2, 5, 50
CHARS = 4000  # ~900 tokens per article: ingests and builds of a second or so


def test_the_scale_bench_produces_every_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert DEFAULT_DATA.is_file(), f"the bench's dev data is missing: {DEFAULT_DATA} (../shared/data beside the repo)"
    report = tmp_path / "scale.json"
    assert scale.main(["--channels", str(CHANNELS), "--questions", str(QUESTIONS), "--overhead-calls", str(CALLS),
                       "--chars", str(CHARS), "--work-dir", str(tmp_path / "work"), "--json", str(report)]) == 0
    out = capsys.readouterr().out
    for expected in ("== Rebuild throughput", "builds/min", "speed-up, 2 workers / 1 worker",
                     "== Question latency at the front-end", "while 2 workers build",
                     "== Coordination overhead per call", "SharedLedger.first", "period claim (SET NX EX)",
                     "enqueue_once (no job waiting)", "enqueue_once (a job waits)",
                     "== Costs for capacity arithmetic", "of worker time", "a question:", "== Targets =="):
        assert expected in out, expected
    assert "PASS" in out or "FAIL" in out
    figures = json.loads(report.read_text())

    rounds = figures["rounds"]
    assert [(r["label"], r["workers"], r["channels"]) for r in rounds] == [
        ("W1", 1, CHANNELS), ("W2", 2, CHANNELS), ("WQ", 2, CHANNELS)]
    for r in rounds:
        assert r["outcomes"] == {"built": CHANNELS}, r
        assert r["told"] == CHANNELS  # every requester got the result, posted by the front-end
        assert sum(r["jobs_per_worker"].values()) == CHANNELS
        assert r["wall_s"] > 0 and r["builds_per_minute"] > 0 and r["job_s"]["p50"] > 0
        assert sum(v for k, v in r["cpu_s_per_build"].items() if k.startswith("worker")) > 0
        assert {"front_end", "chroma", "valkey"} <= set(r["cpu_s"])
    assert rounds[0]["jobs_per_worker"] == {"worker-1": CHANNELS}
    assert figures["speed_up"] > 0 and figures["unbuilt"] == []
    assert {job["worker"] for job in figures["warm_up"]} >= {"worker-1"}

    questions = figures["questions"]
    assert list(questions) == ["idle", "while 2 workers build"]
    for q in questions.values():
        assert len(q["latencies_s"]) == QUESTIONS and q["empty_answers"] == 0
        assert 0 < q["summary"]["p50_ms"] <= q["summary"]["p95_ms"]
        assert q["cpu_s_per_question"]["front_end"] > 0

    overhead = figures["overhead"]
    assert len(overhead) == 4
    for summary in overhead.values():
        assert summary["n"] == CALLS and 0 < summary["p50_ms"] <= summary["p95_ms"]

    costs = figures["costs"]
    assert set(costs) == {"worker_s_per_build_1_worker", "worker_s_per_build_2_workers", "wall_s_per_build_1_worker",
                          "wall_s_per_build_2_workers", "worker_cpu_s_per_build", "chroma_cpu_s_per_build",
                          "s_per_question_idle", "front_end_cpu_s_per_question", "chroma_cpu_s_per_question"}
    assert all(math.isfinite(v) and v >= 0 for v in costs.values())
    assert costs["worker_s_per_build_1_worker"] > 0 and costs["s_per_question_idle"] > 0

    targets = figures["targets"]
    assert len(targets) == 1 + len(overhead)
    assert targets[0]["name"].startswith("question p95 while building")
    assert all(isinstance(t["pass"], bool) and math.isfinite(t["value"]) for t in targets)
