"""The soak (issue 13), CI-sized: one bot under a steady chat workload must not leak.

``bench.soak.main`` runs once for the module (about 75 s of workload on four
channels, plus start-up), driven through the console adapter and the real
handler, scheduler, engine and embedded Chroma. Each target is its own test,
so a failure names what grows. Settings, and why they differ from the 15-minute run:

* articles cut to 3,000 characters, so that a rebuild takes about a second
  and a minute holds a dozen rebuild cycles (a leak of one descriptor per
  rebuild then shows as +12 or more);
* samples every 5 s and churn every 2 s instead of every 30 s and 10 s;
* the baseline after TWO rebuild cycles, not one: the first cycle pays every
  first-time cost (UMAP's warm-up in the worker, each channel's first tree,
  Chroma's connection and thread pools filling up, the answerer's caches),
  and the second makes sure those pools are full; growth after that is the
  soak's business. At least three cycles follow the baseline, however slow
  the machine.

The growth thresholds are the benchmark's own (RSS +10 %, descriptors +4,
threads +4, children +0, data directory 1.5x), asserted on the JSON figures.
The pure helpers (``judge``, ``descendants``, ``directory_size``, ``grown``)
have fast exact tests of their own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench import soak
from bench.data import DEFAULT_DATA
from bench.procfs import descendants
from bench.soak_probe import Sample, directory_size, grown
from bench.soak_report import half_time, judge

CI_ARGS = ["--minutes", "1.25", "--sample-s", "5", "--churn-s", "2", "--question-pause-s", "0.3",
           "--chars", "3000", "--articles-per-channel", "1", "--warm-cycles", "2", "--min-cycles", "3"]


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON figures of one CI-sized soak (run once for every test below)."""
    assert DEFAULT_DATA.is_file(), f"the soak's dev data is missing: {DEFAULT_DATA} (../shared/data beside the repo)"
    folder = tmp_path_factory.mktemp("soak")
    report = folder / "soak.json"
    assert soak.main([*CI_ARGS, "--data-dir", str(folder / "work"), "--json", str(report)]) == 0
    return json.loads(report.read_text())


def target(figures: dict[str, Any], starts: str) -> dict[str, Any]:
    """The target whose name starts with ``starts``; its figure is in the assertion message."""
    found = [t for t in figures["targets"] if t["name"].startswith(starts)]
    assert len(found) == 1, [t["name"] for t in figures["targets"]]
    return found[0]


# -- the CI-sized soak ---------------------------------------------------------



@pytest.mark.slow
def test_soak_ran_the_whole_workload(figures: dict[str, Any]) -> None:
    assert figures["baseline"] is not None and figures["cycles"] >= 5
    assert figures["rebuilds"] >= 4 * figures["cycles"]
    assert figures["questions"] > 20 and figures["replies"]["answer"] > 20
    for action in ("pin", "forget", "unpin", "duplicate", "reupload", "status"):
        assert figures["actions"].get(action, 0) >= 1, figures["actions"]
    assert len(figures["samples"]) >= 8
    assert [t["name"].split()[0] for t in figures["targets"]] == [
        "RSS", "descriptors", "threads", "child", "data", "zero", "every"]


@pytest.mark.slow
def test_soak_makes_no_error_and_keeps_every_source(figures: dict[str, Any]) -> None:
    assert target(figures, "zero errors")["passed"], figures["errors"][:5]
    assert target(figures, "every source")["passed"], figures["missing"]


@pytest.mark.slow
def test_soak_rss_grows_less_than_10_percent_after_warm_up(figures: dict[str, Any]) -> None:
    rss = target(figures, "RSS")
    assert rss["passed"], rss["figure"]


@pytest.mark.slow
def test_soak_descriptors_threads_and_children_stay_flat(figures: dict[str, Any]) -> None:
    for name in ("descriptors", "threads", "child processes"):
        flat = target(figures, name)
        assert flat["passed"], f"{name}: {flat['figure']}; grown: {figures['grown']}"


@pytest.mark.slow
def test_soak_data_directory_stays_within_1_5x(figures: dict[str, Any]) -> None:
    data = target(figures, "data directory")
    assert data["passed"], data["figure"]


# -- the helpers ---------------------------------------------------------------


def sample(**changes: float) -> Sample:
    values: dict[str, Any] = {"t_s": 0.0, "cycles": 1, "rss_mib": 1000.0, "fds": 100, "threads": 30, "children": 2,
                              "children_rss_mib": 300.0, "data_mib": 10.0, "data_files": 50}
    return Sample(**{**values, **changes})


def test_judge_passes_a_level_run_and_names_each_growth() -> None:
    level = judge(sample(), sample(rss_mib=1090.0, fds=104, threads=34, data_mib=15.0), 0, [])
    assert all(t.passed for t in level), level
    grown = judge(sample(), sample(rss_mib=1100.0, fds=105, threads=35, children=3, data_mib=15.1), 2, ["x"])
    assert not any(t.passed for t in grown), grown
    assert "+10.0%" in grown[0].figure and "100 -> 105" in grown[1].figure


def test_judge_takes_the_data_directory_at_its_largest_after_the_baseline() -> None:
    swung = judge(sample(), sample(data_mib=12.0), 0, [], peak_data_mib=16.0)
    data = next(t for t in swung if t.name.startswith("data directory"))
    assert not data.passed and "16.0 at most (1.60x)" in data.figure


def test_judge_takes_counts_from_half_time_and_still_names_a_leak() -> None:
    """Pools fill up after the baseline and then stay: judged from half-time, that passes; a
    count still growing through the second half fails."""
    filled = judge(sample(), sample(fds=108, threads=38), 0, [], midway=sample(fds=108, threads=38))
    assert all(t.passed for t in filled), filled
    assert "108 -> 108 (baseline 100)" in filled[1].figure
    leaking = judge(sample(), sample(fds=120, threads=50), 0, [], midway=sample(fds=108, threads=38))
    assert [t.passed for t in leaking[1:3]] == [False, False]


def test_half_time_is_the_sample_nearest_half_the_run() -> None:
    samples = [sample(t_s=t) for t in (0.0, 30.0, 60.0, 95.0, 120.0)]
    assert half_time(samples) == samples[2] and half_time(samples[:2]) is None


def test_judge_fails_every_growth_target_without_a_baseline() -> None:
    targets = judge(None, sample(), 0, [])
    assert [t.passed for t in targets] == [False, True, True]


def test_descendants_find_a_child_and_its_child() -> None:
    script = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; time.sleep(30)'])"
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while len(found := descendants(child.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(found) == 1  # the grandchild of this process
        assert child.pid in descendants(os.getpid())
    finally:
        for pid in descendants(child.pid):
            os.kill(pid, signal.SIGKILL)
        child.kill()
        child.wait()


def test_directory_size_counts_every_file_below(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.bin").write_bytes(b"x" * 1000)
    (tmp_path / "two.bin").write_bytes(b"y" * 24)
    assert directory_size(tmp_path) == (1024, 2)


def test_grown_lists_only_what_is_more_numerous() -> None:
    before = Counter({"<n>/header.bin": 2, "socket:[<n>]": 3, "python": 5})
    after = Counter({"<n>/header.bin": 6, "socket:[<n>]": 1, "python": 5, "sqlx-sqlite-wor": 2})
    assert grown(before, after) == {"<n>/header.bin": 4, "sqlx-sqlite-wor": 2}
