"""Cold-start benchmark: one-shot commands and the bot's start, each in a fresh process.

Every figure is the wall-clock time of a new ``python -m bot`` process, from
spawn to exit (or to the first answer): interpreter start, imports, model
load, the work, exit. All of it happens in one fresh data directory, so
numba's cache is where the bot puts it by default (``<data_dir>/numba-cache``;
``NUMBA_CACHE_DIR`` is removed from the children's environment):

1. ``ingest`` of one ~4,000-word QuALITY article (the first) into a channel;
2. its first ``rebuild``, in a data directory whose numba cache holds nothing
   yet: it is seeded from the kernels compiled at install
   (``python -m raptor_engine.install_kernels``, run by ``make install``), or,
   without them, compiles UMAP's kernels; judged against the ``ingest``
   (issue 31's target: within 3x);
3. its second ``rebuild`` (``--force``), a new process with the cache filled:
   judged against the ``ingest`` (target: within 3x);
4. ``ingest`` then ``rebuild`` of all 15 dev articles in a second channel;
   the rebuild is judged against the warm rebuild of the same articles in
   this process, measured as ``bench.build`` does (model loaded, clustering
   worker warmed; target: within 1.5x). ``--warm-rebuild-s`` skips that
   measurement and uses a figure from an earlier ``bench.build`` run;
   then ``sources`` of that channel and a ``rebuild`` with nothing changed,
   the second judged against the first (issue 31's target: within 2x: it
   says "Nothing changed" and writes nothing);
5. the console chat (``python -m bot serve``) on the same directory, with the
   article uploaded: seconds from spawn to the first answer's first
   citation line (target: under 10 s), then to exit after end of input.

Run: ``python -m bench.cold [--warm-rebuild-s S] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.build import measure_size
from bench.common import (
    base_parser,
    heading,
    load_embedder,
    machine_info,
    machine_line,
    start_run,
    table,
    verdict,
    warm_up_clustering,
    write_json,
)
from bench.data import Article, load_articles

TARGET_PAPER_RATIO = 3.0  # cold rebuild of one article / its cold ingest
TARGET_ARTICLES_RATIO = 1.5  # cold rebuild of 15 articles / warm rebuild of the same
TARGET_FIRST_ANSWER_S = 10.0
TARGET_UNCHANGED_RATIO = 2.0  # a rebuild with nothing changed / `sources`, fresh processes
FIRST_REBUILD = "rebuild 1 article, new data directory"
SOURCES = "sources of the 15 articles"
UNCHANGED = "rebuild with nothing changed"
QUESTION = "Why did the Tr'en leave Korvin's door unlocked and a weapon nearby?"
CITATION_LINE = re.compile(r"^\[\d+\] ")
TIMEOUT_S = 1800.0
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Step:
    """One fresh process: what it did and how long it took, spawn to exit."""

    label: str
    command: str
    seconds: float


def child_env() -> dict[str, str]:
    """The environment of every child: offline, numba's cache left to the bot's default."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def bot_command(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "bot", "--data-dir", str(data_dir), *args]


def run_step(label: str, data_dir: Path, *args: str) -> Step:
    """Runs ``python -m bot ARGS`` to completion; raises ``RuntimeError`` when it fails."""
    command = bot_command(data_dir, *args)
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=child_env(), capture_output=True, text=True, check=False, timeout=TIMEOUT_S)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{label} failed ({result.returncode}): {result.stderr.strip()[-500:]}")
    print(f"{label}: {seconds:.1f} s", flush=True)  # a later failure keeps the figures so far
    return Step(label, "python -m bot " + " ".join(args[:3]), seconds)


def chat(data_dir: Path, lines: Sequence[str], until: re.Pattern[str] | None) -> tuple[float | None, float]:
    """Runs the console chat, typing ``lines``; returns (seconds to the first
    output line matching ``until``, seconds to exit after end of input)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        bot_command(data_dir, "serve"), cwd=REPO, env=child_env(), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    matched: list[float] = []
    seen = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if until is not None and not matched and until.search(line):
                matched.append(time.perf_counter() - started)
                seen.set()
        seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    for line in lines:
        process.stdin.write(line + "\n")
        process.stdin.flush()
    if until is not None:
        seen.wait(TIMEOUT_S)
    process.stdin.close()  # end of input: the chat says goodbye and exits
    process.wait(TIMEOUT_S)
    reader.join(10)
    return (matched[0] if matched else None), time.perf_counter() - started


def write_articles(articles: Sequence[Article], directory: Path) -> list[Path]:
    paths = []
    for article in articles:
        path = directory / f"article-{article.index:02d}.txt"
        path.write_text(article.text, encoding="utf-8")
        paths.append(path)
    return paths


def warm_rebuild_seconds(articles: Sequence[Article]) -> tuple[float, float | None]:
    """(rebuild, ingest + rebuild) seconds of ``articles`` in this warm process, as
    ``bench.build`` measures them (model loaded and clustering worker warmed first)."""
    embedder = load_embedder()
    warm_up_clustering()
    result = measure_size(articles, embedder)
    rebuild = sum(result.rebuild_stages_s.values()) + result.rebuild_other_s
    return rebuild, result.total_s


def build_parser() -> argparse.ArgumentParser:
    parser = base_parser("bench.cold", __doc__.split("\n\n")[0])
    parser.add_argument(
        "--warm-rebuild-s", type=float, default=None, metavar="S",
        help="the warm rebuild time of the 15 articles from a bench.build run (default: measure it here)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the cold-start benchmark; returns the process exit code."""
    args = build_parser().parse_args(argv)
    articles = load_articles(args.data)
    start_info = start_run()
    steps: list[Step] = []
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as temporary:
        root = Path(temporary)
        data_dir = root / "data"
        files = root / "files"
        files.mkdir()
        paths = write_articles(articles, files)
        paper = paths[0]
        words = len(articles[0].text.split())
        steps.append(run_step("ingest 1 article", data_dir, "ingest", "--channel", "paper", str(paper)))
        steps.append(run_step(FIRST_REBUILD, data_dir, "rebuild", "--channel", "paper"))
        steps.append(run_step("rebuild 1 article", data_dir, "rebuild", "--channel", "paper",
                                  "--force"))  # the same article: force, or nothing is rebuilt
        steps.append(run_step(f"ingest {len(paths)} articles", data_dir, "ingest", "--channel", "all",
                              *map(str, paths)))
        steps.append(run_step(f"rebuild {len(paths)} articles", data_dir, "rebuild", "--channel", "all"))
        steps.append(run_step(SOURCES, data_dir, "sources", "--channel", "all"))
        steps.append(run_step(UNCHANGED, data_dir, "rebuild", "--channel", "all"))
        # The console channel gets the article through the chat, as a person would add it.
        chat(data_dir, [f"/upload {paper}"], re.compile(r"^Added .article-00"))
        first_answer, chat_exit = chat(data_dir, [QUESTION], CITATION_LINE)
        cache_files = sum(1 for p in (data_dir / "numba-cache").rglob("*") if p.is_file())
    if args.warm_rebuild_s is not None:
        warm_rebuild, warm_total = args.warm_rebuild_s, None
    else:
        warm_rebuild, warm_total = warm_rebuild_seconds(articles)
    by_label = {step.label: step.seconds for step in steps}
    paper_ratio = by_label["rebuild 1 article"] / by_label["ingest 1 article"]
    first_ratio = by_label[FIRST_REBUILD] / by_label["ingest 1 article"]
    unchanged_ratio = by_label[UNCHANGED] / by_label[SOURCES]
    articles_ratio = by_label[f"rebuild {len(paths)} articles"] / warm_rebuild
    print(heading("Fresh processes (spawn to exit, one data directory, numba's cache under it)"))
    print(table(["step", "command", "seconds"], [(s.label, s.command, f"{s.seconds:.1f}") for s in steps]
                + [("chat: first answer", "python -m bot serve", "-" if first_answer is None else f"{first_answer:.1f}"),
                   ("chat: exit after end of input", "python -m bot serve", f"{chat_exit:.1f}")]))
    print(f"article: {words} words; numba cache files after the run: {cache_files}")
    print(f"warm rebuild of {len(paths)} articles in this process (as bench.build): {warm_rebuild:.1f} s"
          + ("" if warm_total is None else f" (ingest + rebuild {warm_total:.1f} s)"))
    passes = {
        "paper": paper_ratio <= TARGET_PAPER_RATIO,
        "articles": articles_ratio <= TARGET_ARTICLES_RATIO,
        "first_answer": first_answer is not None and first_answer < TARGET_FIRST_ANSWER_S,
        "first": first_ratio <= TARGET_PAPER_RATIO,
        "unchanged": unchanged_ratio <= TARGET_UNCHANGED_RATIO,
    }
    print(heading("Targets (issue 13)"))
    print(f"cold rebuild of 1 article <= {TARGET_PAPER_RATIO:g}x its cold ingest: "
          f"{paper_ratio:.2f}x: {verdict(passes['paper'])}")
    print(f"cold rebuild of {len(paths)} articles <= {TARGET_ARTICLES_RATIO:g}x the warm rebuild: "
          f"{articles_ratio:.2f}x: {verdict(passes['articles'])}")
    answer_text = "no answer" if first_answer is None else f"{first_answer:.1f} s"
    print(f"bot start-up to first answer < {TARGET_FIRST_ANSWER_S:g} s: {answer_text}: "
          f"{verdict(passes['first_answer'])}")
    print(heading("Targets (issue 31)"))
    print(f"first rebuild of 1 article in a new data directory <= {TARGET_PAPER_RATIO:g}x its cold ingest: "
          f"{first_ratio:.2f}x: {verdict(passes['first'])}")
    print(f"rebuild with nothing changed <= {TARGET_UNCHANGED_RATIO:g}x `sources` in the same run: "
          f"{unchanged_ratio:.2f}x: {verdict(passes['unchanged'])}")
    print("\n" + machine_line("machine at end"))
    write_json(args.json, {
        "benchmark": "cold",
        "data": str(args.data),
        "machine_start": start_info,
        "machine_end": machine_info(),
        "article_words": words,
        "steps": [asdict(step) for step in steps],
        "first_answer_s": first_answer,
        "chat_exit_s": chat_exit,
        "numba_cache_files": cache_files,
        "warm_rebuild_s": warm_rebuild,
        "warm_total_s": warm_total,
        "targets": {
            "paper_ratio": paper_ratio, "paper_ratio_max": TARGET_PAPER_RATIO, "paper_pass": passes["paper"],
            "articles_ratio": articles_ratio, "articles_ratio_max": TARGET_ARTICLES_RATIO,
            "articles_pass": passes["articles"],
            "first_answer_max_s": TARGET_FIRST_ANSWER_S, "first_answer_pass": passes["first_answer"],
            "first_ratio": first_ratio, "first_pass": passes["first"],
            "unchanged_ratio": unchanged_ratio, "unchanged_ratio_max": TARGET_UNCHANGED_RATIO,
            "unchanged_pass": passes["unchanged"],
        },
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
