"""The soak's verdict and report (``bench.soak``): its targets, judged from the samples, and
the tables and lines it prints.

Targets (issue 13), each printed PASS/FAIL:

* RSS at the end within +10 % of the baseline;
* descriptors, threads and child processes flat: the final count at most the
  count at half-time plus a small slack (:data:`FD_SLACK`, :data:`THREAD_SLACK`,
  :data:`CHILD_SLACK`; one per rebuild would exceed it within a few cycles). Not
  the baseline's: Chroma's SQLite connection pool (a thread and a descriptor per
  connection) and Python's default executor open what they need on demand, up to
  their caps, over the first two or three minutes of this workload (+4 to +8 over
  a baseline taken seconds in, then level, in every 15-minute run); a leak keeps
  growing through the second half. The growth since the baseline is shown too;
* the data directory at most 1.5x its size at the baseline;
* zero errors (ERROR replies and ERROR log records);
* every source that should be there is there at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.common import heading, table, verdict
from bench.soak_probe import Sample

RSS_GROWTH = 0.10  # final RSS at most baseline x 1.10
DATA_GROWTH = 1.5  # final data directory at most baseline x 1.5
FD_SLACK = 4  # descriptors, threads, children: final at most the half-time count + slack
THREAD_SLACK = 4
CHILD_SLACK = 0


# -- targets -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """One target of the module docstring: what it asks, the figure measured, and whether it passed."""

    name: str
    figure: str
    passed: bool


def judge(baseline: Sample | None, final: Sample, errors: int, missing: Sequence[str],
          peak_data_mib: float = 0.0, midway: Sample | None = None) -> list[Target]:
    """The targets of the module docstring; the growth targets fail when no baseline was taken
    (the run ended before its warm-up cycles). The data directory must stay within its bound:
    it is judged by its largest sample after the baseline (``peak_data_mib``) or the final one,
    whichever is larger (compactions make it swing: the last sample alone can flatter it).
    Counts are judged from ``midway``, the sample at half-time (the baseline if None)."""
    targets: list[Target] = []
    if baseline is None:
        targets.append(Target("warm-up cycles ended before the time was up", "no baseline", False))
    else:
        growth = final.rss_mib / baseline.rss_mib - 1.0
        targets.append(Target(f"RSS growth after the baseline < {RSS_GROWTH:.0%}",
                              f"{baseline.rss_mib:.0f} -> {final.rss_mib:.0f} MiB ({growth:+.1%})", growth < RSS_GROWTH))
        middle = midway or baseline
        for name, slack, first, before, after in (
            ("descriptors", FD_SLACK, baseline.fds, middle.fds, final.fds),
            ("threads", THREAD_SLACK, baseline.threads, middle.threads, final.threads),
            ("child processes", CHILD_SLACK, baseline.children, middle.children, final.children),
        ):
            targets.append(Target(f"{name} flat from half-time (at most +{slack})",
                                  f"{before} -> {after} (baseline {first})", after <= before + slack))
        largest = max(final.data_mib, peak_data_mib)
        ratio = largest / baseline.data_mib if baseline.data_mib else float("inf")
        targets.append(Target(f"data directory within {DATA_GROWTH}x of the baseline",
                              f"{baseline.data_mib:.1f} -> {final.data_mib:.1f} MiB at the end, {largest:.1f} at most "
                              f"({ratio:.2f}x), {baseline.data_files} -> {final.data_files} files", ratio <= DATA_GROWTH))
    targets.append(Target("zero errors", str(errors), errors == 0))
    targets.append(Target("every source present at the end", f"{len(missing)} missing", not missing))
    return targets


# -- half-time -----------------------------------------------------------------


def half_time(samples: Sequence[Sample]) -> Sample | None:
    """The sample nearest half the run's length (None with fewer than three samples)."""
    middle = _nearest_half([s.t_s for s in samples])
    return None if middle is None else samples[middle]


def _nearest_half(times: Sequence[float]) -> int | None:
    """The index of the time nearest half the last one; None with fewer than three."""
    if len(times) < 3:
        return None
    return min(range(len(times)), key=lambda i: abs(times[i] - times[-1] / 2))


def second_half(samples: Sequence[dict[str, Any]]) -> str:
    """Growth from the sample nearest half-time to the last one: not a target, but what tells a
    leak (which keeps growing) from pools and caches filling up after the baseline (which stop)."""
    index = _nearest_half([s["t_s"] for s in samples])
    if index is None:
        return "second half: too few samples"
    end, middle = samples[-1], samples[index]
    return (f"second half ({middle['t_s']:.0f} s -> {end['t_s']:.0f} s, not a target): "
            f"RSS {middle['rss_mib']:.0f} -> {end['rss_mib']:.0f} MiB ({end['rss_mib'] / middle['rss_mib'] - 1:+.1%}), "
            f"data {middle['data_mib']:.1f} -> {end['data_mib']:.1f} MiB ({end['data_mib'] / middle['data_mib']:.2f}x), "
            f"descriptors {middle['fds']} -> {end['fds']}, threads {middle['threads']} -> {end['threads']}")


# -- the report ----------------------------------------------------------------


def report(figures: dict[str, Any]) -> None:
    """Prints the soak's figures (as ``bench.soak.soak`` returns them): the workload's counts,
    a row per sample, what grew, the first errors and missing sources, and the targets."""
    settings = figures["settings"]
    print(heading(f"Soak of {settings['minutes']:g} min: four channels, {figures['cycles']} rebuild cycles"))
    print(f"{figures['rebuilds']} rebuilds, {figures['questions']} questions, replies {figures['replies']}")
    print(f"churn actions {figures['actions']}")
    rows = [[f"{s['t_s']:.0f}", s["cycles"], s["rss_mib"], s["heap_used_mib"], s["heap_free_mib"], s["fds"],
             s["threads"], s["children"], s["children_rss_mib"], s["data_mib"], s["data_files"]] for s in figures["samples"]]
    print(table(["t s", "cycles", "RSS MiB", "heap used", "heap free", "fds", "threads", "children", "children MiB",
                 "data MiB", "files"], rows))
    for kind, extra in figures["grown"].items():
        if extra:
            print(f"{kind} grown since the baseline: "
                  + ", ".join(f"{name} +{n}" for name, n in list(extra.items())[:12]))
    for error in figures["errors"][:10]:
        print(f"error: {error}")
    for missing in figures["missing"][:10]:
        print(f"missing: {missing}")
    print(heading("Targets (issue 13)"))
    for target in figures["targets"]:
        print(f"{target['name']}: {target['figure']}: {verdict(target['passed'])}")
    print(second_half(figures["samples"]))

