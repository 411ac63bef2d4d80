"""Smoke tests of the benchmarks: each runs on one article and prints its tables.

They check that the benchmarks run end to end and report what they should,
not the figures themselves (timings depend on the machine). Skipped when the
data file is not there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import build, query, retrieval
from bench.common import DEFAULT_DATA

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not DEFAULT_DATA.is_file(), reason=f"benchmark data not found at {DEFAULT_DATA}"),
]


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Chroma data directory for the query and retrieval runs, so one article is built once."""
    return tmp_path_factory.mktemp("bench-data")


def test_build_reports_stages_memory_and_targets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "build.json"
    assert build.main(["--sizes", "1", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    for expected in ("One-time costs", "clustering.warm_up()", "Build per size", "rb:cluster",
                     "total/embed-only", "peak RSS MiB", "== Targets ==", "2.5 GiB"):
        assert expected in out
    figures = json.loads(report.read_text())
    size = figures["sizes"][0]
    assert size["articles"] == 1 and size["leaves"] > 11 and size["tokens"] > 0
    assert figures["targets"]["judged_on_articles"] == 1


def test_query_reports_latency_percentiles(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert query.main(["--articles", "1", "--data-dir", str(shared_dir)]) == 0
    out = capsys.readouterr().out
    for expected in ("Latency per question", "retrieve (collapsed", "answer (retrieve", "p50 ms", "p95 ms",
                     "p95 retrieve", "target < 50 ms"):
        assert expected in out
    assert "PASS" in out or "FAIL" in out


def test_retrieval_reports_every_method(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert retrieval.main(["--articles", "1", "--data-dir", str(shared_dir)]) == 0
    out = capsys.readouterr().out
    for expected in ("one tree per document", "Accuracy", "collapsed", "traversal", "leaves", "bm25", "dense",
                     "whole article", "random", "25.0 %", "Right answers per article", "== Target =="):
        assert expected in out
    assert "baseline chunks identical to the engine's leaves: yes" in out


def test_question_parsing_handles_every_option_layout() -> None:
    from bench.common import parse_question

    for instruction in ("Why?\n\n (A) one \n (B) two\n (C) three\n (D) four",
                        "Why?\n\n(A) one\n(B) two\n(C) three\n(D) four",
                        "Why?\n(A) one\n(B) two\n(C) three\n(D) four"):
        question = parse_question(instruction, "(C) three")
        assert question.text == "Why?" and question.options == ("one", "two", "three", "four")
        assert question.answer == 2 and question.letter == "C"
