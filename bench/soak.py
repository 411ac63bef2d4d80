"""Soak: one bot process under a steady chat workload, watched for slow leaks.

One bot (``bot.runtime.Assistant`` on the offline defaults, embedded Chroma in a
temporary data directory, UMAP warmed in the background as the bot does it)
serves four console channels. Everything goes through the console adapter's
``ConsoleChannel.handle_line``, i.e. the neutral events the adapters produce
and the real chat handler and scheduler, never engine shortcuts:

* **questions** round-robin over the four channels, one every
  ``--question-pause-s`` seconds (the channels' own articles' questions);
* **rebuilds** cycling through the channels: ``/rebuild force`` in one, wait for its
  result, the next one; four rebuilds make a *cycle*;
* **churn**, one action every ``--churn-s`` seconds on the next channel in turn:
  pin a note, unpin the oldest note (at most :data:`MAX_LIVE_PINS` stay),
  forget an uploaded file and upload it again later, upload a file that is
  already there (a duplicate), ``/status``, ``/sources``, ``/tree``.

The served material therefore stays about the same size all run long, so what
grows is what leaks. Set-up uploads every channel's files and builds its first tree;
the rebuild cycles then rewrite trees that exist (a channel keeps two, the served one
and the one before, so the baseline is taken once both are there: with the first
build counted as a cycle, it held one). Every ``--sample-s`` seconds the process's RSS, open file
descriptors (``/proc/self/fd``), threads (``/proc/self/task``, native ones
included), descendant processes with their RSS, and the data directory's size
and file count are sampled. The *baseline* is the sample taken when the first
``--warm-cycles`` rebuild cycles have ended; the *final* sample is taken at
the same point, just after the last rebuild. Then every forgotten file is
uploaded again, and every source is looked for.

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

Uploads are the dev articles of ``--data`` (default ``shared/data/quality-dev.jsonl``),
``--articles-per-channel`` of them per channel (cut to ``--chars`` characters
when given), written to files, plus the bundled sample handbook in every channel.

Run: ``python -m bench.soak --minutes 15 [--sample-s 30] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import re
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from adapters.console.app import ConsoleChannel
from adapters.console.translate import PIN_PREFIX, pin_number_of
from bench.common import (
    base_parser,
    heading,
    machine_info,
    machine_line,
    start_run,
    table,
    verdict,
    write_json,
)
from bench.data import Article, load_articles
from bot.composition import open_bot
from bot.config import BotConfig, Config, ConsoleConfig, RateLimitConfig
from bot.neutral import Reply, ReplyKind
from bot.runtime import Assistant
from bot.samples import SAMPLE_DOCUMENT, SAMPLE_QUESTION
from raptor_engine import Source, SourceKind

log = logging.getLogger(__name__)

CHANNELS = ("soak-a", "soak-b", "soak-c", "soak-d")
MAX_LIVE_PINS = 2  # notes kept pinned per channel; older ones are unpinned, so material stays level
ACTIONS = ("pin", "forget", "status", "unpin", "duplicate", "pin", "reupload", "sources", "unpin", "tree")
"""The churn, in turn; each tick does the next action on the next channel."""

RSS_GROWTH = 0.10  # final RSS at most baseline x 1.10
DATA_GROWTH = 1.5  # final data directory at most baseline x 1.5
FD_SLACK = 4  # descriptors, threads, children: final at most baseline + slack
THREAD_SLACK = 4
CHILD_SLACK = 0
MIB = 1024 * 1024


# -- measuring the process -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the process, ``t_s`` seconds into the soak; ``cycles`` rebuild cycles ended by then."""

    t_s: float
    cycles: int
    rss_mib: float
    fds: int
    threads: int
    children: int
    children_rss_mib: float
    data_mib: float
    data_files: int
    heap_used_mib: float | None = None  # glibc's heap, where readable: allocated and in use...
    heap_free_mib: float | None = None  # ...and free but kept (fragmentation shows here, not as a leak)


def status_fields(pid: int | str) -> dict[str, str]:
    """The ``/proc/PID/status`` fields (empty when the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {name: value.strip() for name, _, value in (line.partition(":") for line in text.splitlines())}


def status_mib(value: str) -> float:
    """A ``"123 kB"`` status value in MiB; 0 when absent (a zombie has no VmRSS)."""
    return int(value.split()[0]) / 1024.0 if value else 0.0


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children, their children...), read from ``/proc``.

    The clustering worker and multiprocessing's resource tracker are children;
    anything they start would be grandchildren, and counts too.
    """
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        ppid = status_fields(entry.name).get("PPid", "")
        if ppid.isdigit():
            parents.setdefault(int(ppid), []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def directory_size(path: Path) -> tuple[int, int]:
    """The apparent size in bytes of every file under ``path``, and their number. Files
    that vanish while being counted (Chroma replaces them) are skipped."""
    total = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name), follow_symlinks=False).st_size
            except OSError:
                continue
            files += 1
    return total, files


_HEXISH = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{27}|\d+")


def open_files() -> Counter[str]:
    """What the process's descriptors point to, with UUIDs and numbers folded (``chroma/<id>/link_lists.bin``,
    ``socket:[<n>]``), counted: the difference between two of these names what leaks."""
    found: Counter[str] = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        name = "/".join(target.split("/")[-2:]) if target.startswith("/") else target
        found[_HEXISH.sub("<n>", name)] += 1
    return found


def thread_names() -> Counter[str]:
    """The process's threads by name (``/proc/self/task/*/comm``, numbers folded), counted."""
    found: Counter[str] = Counter()
    for task in os.listdir("/proc/self/task"):
        try:
            found[_HEXISH.sub("<n>", Path(f"/proc/self/task/{task}/comm").read_text().strip())] += 1
        except OSError:
            continue
    return found


def data_files(path: Path) -> Counter[str]:
    """The data directory's bytes by file, UUIDs and numbers folded (``<n>/data_level<n>.bin``)."""
    found: Counter[str] = Counter()
    for root, _, names in os.walk(path):
        for name in names:
            full = Path(root, name)
            try:
                found[_HEXISH.sub("<n>", str(full.relative_to(path)))] += full.stat().st_size
            except OSError:  # replaced while being counted
                continue
    return found


def grown(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    """The entries of ``after`` that are more numerous than in ``before``, by how many."""
    return {name: after[name] - before[name] for name in sorted(after) if after[name] > before[name]}


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc 2.33 and newer)."""

    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_mib() -> tuple[float | None, float | None]:
    """(in use, free but kept) MiB of glibc's malloc heap, over every arena and mmapped block;
    (None, None) where glibc or ``mallinfo2`` is missing. RSS growth with the free part growing
    and the used part flat is fragmentation, not a leak."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return None, None
    return (info.uordblks + info.hblkhd) / MIB, info.fordblks / MIB


def sample(started: float, cycles: int, data_dir: Path) -> Sample:
    """The process as it is now (Linux ``/proc``)."""
    me = os.getpid()
    children = descendants(me)
    data_bytes, data_files = directory_size(data_dir)
    heap_used, heap_free = heap_mib()
    return Sample(
        t_s=round(time.monotonic() - started, 1),
        cycles=cycles,
        rss_mib=status_mib(status_fields(me).get("VmRSS", "")),
        fds=len(os.listdir("/proc/self/fd")),
        threads=len(os.listdir("/proc/self/task")),
        children=len(children),
        children_rss_mib=sum(status_mib(status_fields(pid).get("VmRSS", "")) for pid in children),
        data_mib=data_bytes / MIB,
        data_files=data_files,
        heap_used_mib=heap_used,
        heap_free_mib=heap_free,
    )


# -- what the bot says ---------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """Every reply by kind, and every error: ERROR replies and ERROR log records."""

    replies: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    questions: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    rebuilds: int = 0


class ErrorLog(logging.Handler):
    """Counts every log record at ERROR or above into the tally (the handler logs unexpected
    failures with ``log.exception`` and answers with a reference only)."""

    def __init__(self, tally: Tally) -> None:
        super().__init__(level=logging.ERROR)
        self._tally = tally

    def emit(self, record: logging.LogRecord) -> None:
        self._tally.errors.append(f"log {record.name}: {record.getMessage()[:200]}")


class SoakChannel(ConsoleChannel):
    """A console channel whose replies are also counted; the text written is kept briefly."""

    def __init__(self, bot: Assistant, channel: str, tally: Tally) -> None:
        self.lines: deque[str] = deque(maxlen=20)
        super().__init__(bot, self.lines.append, channel)
        self._tally = tally

    async def send(self, reply: Reply) -> None:
        self._tally.replies[reply.kind.value] += 1
        if reply.kind is ReplyKind.ERROR:
            self._tally.errors.append(f"#{self.key.channel}: {reply.text[:200]}")
        await super().send(reply)


# -- the workload --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SoakSettings:
    """How long and how hard: see the module docstring and ``--help``."""

    minutes: float = 15.0
    sample_s: float = 30.0
    churn_s: float = 10.0
    question_pause_s: float = 1.0
    articles_per_channel: int = 2
    chars: int = 0  # 0: whole articles
    warm_cycles: int = 1
    min_cycles: int = 1  # rebuild cycles after the baseline, run even when the time is up


@dataclass(slots=True)
class ChannelPlan:
    """One channel: its files, its questions, what is forgotten now, the notes pinned now."""

    channel: SoakChannel
    uploads: list[Path]
    questions: list[str]
    forgotten: list[Path] = field(default_factory=list)
    pins: list[str] = field(default_factory=list)  # external ids, oldest first
    turn: int = 0  # which upload the next forget or duplicate picks


def soak_config(data_dir: Path, pictures_dir: Path) -> Config:
    """The defaults, minus the sample, the rate limits (the soak asks fast) and tree
    pictures in the data directory (they would count as storage growth)."""
    limits = RateLimitConfig(questions_per_user_per_minute=0, rebuilds_per_channel_per_hour=0,
                             uploads_per_user_per_hour=0, upload_mb_per_channel_per_day=0)
    return Config(data_dir=data_dir, console=ConsoleConfig(sample=False, pictures_dir=pictures_dir),
                  bot=BotConfig(rate_limits=limits))


def write_uploads(articles: Sequence[Article], folder: Path, settings: SoakSettings) -> list[list[Path]]:
    """Per channel, the files it gets: its articles (cut to ``settings.chars``) and the handbook.
    ``articles`` must hold ``articles_per_channel`` articles for each channel (checked by :func:`main`)."""
    folder.mkdir(parents=True, exist_ok=True)
    per = settings.articles_per_channel
    plans: list[list[Path]] = []
    for number, name in enumerate(CHANNELS):
        paths = []
        for article in articles[number * per : (number + 1) * per]:
            text = article.text[: settings.chars] if settings.chars else article.text
            path = folder / f"{name}-article-{article.index:02d}.md"
            path.write_text(text, encoding="utf-8")
            paths.append(path)
        handbook = folder / f"{name}-{SAMPLE_DOCUMENT.name}"
        handbook.write_bytes(SAMPLE_DOCUMENT.read_bytes())
        plans.append([*paths, handbook])
    return plans


class Soak:
    """The workload of the module docstring on one started bot."""

    def __init__(self, bot: Assistant, plans: list[ChannelPlan], settings: SoakSettings, tally: Tally) -> None:
        self.bot = bot
        self.plans = plans
        self.settings = settings
        self.tally = tally
        self.samples: list[Sample] = []
        self.baseline: Sample | None = None
        self.final: Sample | None = None
        # Descriptors, threads and data files at the baseline and the end, to name what grew.
        self.inventory: dict[str, tuple[Counter[str], Counter[str], Counter[str]]] = {}
        self.cycles = 0
        self._started = time.monotonic()
        self._stop = asyncio.Event()
        self._pins_made = 0

    def _sample(self) -> Sample:
        taken = sample(self._started, self.cycles, self.bot.config.data_dir)
        self.samples.append(taken)
        return taken

    async def run(self) -> None:
        """Uploads every channel's files and builds its first tree, runs the four loops until the
        time is up (and enough cycles ended), takes the final sample, and uploads again whatever
        is forgotten."""
        for plan in self.plans:
            for path in plan.uploads:
                await plan.channel.handle_line(f"/upload {path}")
            # Each channel's first tree, built at set-up: a rebuild cycle rewrites trees that exist.
            await plan.channel.handle_line("/rebuild")
            await self.bot.scheduler.wait_idle(plan.channel.key)
        self._started = time.monotonic()
        self._sample()
        loops = [asyncio.create_task(self._guarded(loop)) for loop in (self._questions, self._churn, self._sampler)]
        try:
            await self._guarded(self._rebuilds)
        finally:
            self._stop.set()
            await asyncio.gather(*loops)
        await self.bot.scheduler.wait_idle()
        # Taken where the baseline was, just after a rebuild cycle; the re-uploads below would
        # add the transient memory of embedding a file to the figure.
        self.final = self._sample()
        self.inventory["final"] = (open_files(), thread_names(), data_files(self.bot.config.data_dir))
        await self._restore()

    async def _guarded(self, loop: Callable[[], Awaitable[None]]) -> None:
        """Runs one of the loops; a failure of the soak's own code counts as an error and stops the soak."""
        try:
            await loop()
        except Exception as exc:
            log.warning("the soak's %s loop failed", loop.__name__, exc_info=True)
            self.tally.errors.append(f"soak {loop.__name__}: {exc!r}")
            self._stop.set()

    def _time_left(self) -> bool:
        return time.monotonic() - self._started < self.settings.minutes * 60 and not self._stop.is_set()

    async def _rebuilds(self) -> None:
        """``/rebuild`` in each channel in turn, waiting for each result; stops after the rebuild
        running when the time is up, but only once ``warm_cycles`` + ``min_cycles`` cycles ended."""
        while self._time_left() or not self._enough_cycles():
            for plan in self.plans:
                # force: a channel the other loops left unchanged would otherwise rebuild nothing
                await plan.channel.handle_line("/rebuild force")
                await self.bot.scheduler.wait_idle(plan.channel.key)
                self.tally.rebuilds += 1
                if not self._time_left() and self._enough_cycles():
                    return
            self.cycles += 1
            if self.cycles == self.settings.warm_cycles:
                self.baseline = self._sample()
                self.inventory["baseline"] = (open_files(), thread_names(), data_files(self.bot.config.data_dir))

    def _enough_cycles(self) -> bool:
        return self.cycles >= self.settings.warm_cycles + self.settings.min_cycles

    async def _questions(self) -> None:
        turn = 0
        while not self._stop.is_set():
            plan = self.plans[turn % len(self.plans)]
            question = plan.questions[(turn // len(self.plans)) % len(plan.questions)]
            await plan.channel.handle_line(question)
            self.tally.questions += 1
            turn += 1
            await self._pause(self.settings.question_pause_s)

    async def _sampler(self) -> None:
        while not self._stop.is_set():
            await self._pause(self.settings.sample_s)
            self._sample()

    async def _pause(self, seconds: float) -> None:
        """Sleeps ``seconds`` or until the soak stops."""
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass

    async def _churn(self) -> None:
        tick = 0
        while not self._stop.is_set():
            await self._pause(self.settings.churn_s)
            if self._stop.is_set():
                return
            plan = self.plans[tick % len(self.plans)]
            action = ACTIONS[(tick // len(self.plans)) % len(ACTIONS)]
            await self._act(plan, action)
            self.tally.actions[action] += 1
            tick += 1

    async def _act(self, plan: ChannelPlan, action: str) -> None:
        channel = plan.channel
        if action == "pin":
            await self._pin(plan)
        elif action == "unpin" and len(plan.pins) > MAX_LIVE_PINS:
            await channel.handle_line(f"/unpin {plan.pins.pop(0)}")
        elif action == "forget" and not plan.forgotten:
            path = plan.uploads[plan.turn % len(plan.uploads)]
            plan.turn += 1
            source = await self._source_of(plan, path)
            await channel.handle_line(f"/forget {source.id}")
            plan.forgotten.append(path)
        elif action == "reupload" and plan.forgotten:
            await channel.handle_line(f"/upload {plan.forgotten.pop(0)}")
        elif action == "duplicate":
            present = [p for p in plan.uploads if p not in plan.forgotten]
            await channel.handle_line(f"/upload {present[plan.turn % len(present)]}")
        elif action in ("status", "sources", "tree"):
            await channel.handle_line(f"/{action}")

    async def _pin(self, plan: ChannelPlan) -> None:
        """Pins a new note and records its id, read back from the store (the console numbers pins)."""
        self._pins_made += 1
        number = self._pins_made
        note = (f"Soak note {number} for #{plan.channel.key.channel}: the weekly review moves to room "
                f"{number % 7 + 1}, and minutes go to the shared folder by Friday.")
        before = set(plan.pins)
        await plan.channel.handle_line(f"/pin {note}")
        pinned = [s.external_id for s in await self._stored_sources(plan)
                  if s.external_id.startswith(PIN_PREFIX) and s.external_id not in before]
        plan.pins += sorted(pinned, key=pin_number_of)

    async def _stored_sources(self, plan: ChannelPlan) -> list[Source]:
        """The channel's sources as the store holds them, with links and kinds: the soak checks
        what was kept, which the adapters' view of a source does not show."""
        return await asyncio.to_thread(self.bot.engine.sources, plan.channel.key)

    async def _source_of(self, plan: ChannelPlan, path: Path) -> Source:
        link = path.resolve().as_uri()
        for source in await self._stored_sources(plan):
            if source.link == link:
                return source
        raise LookupError(f"{path.name} is not a source of #{plan.channel.key.channel}")

    async def _restore(self) -> None:
        """Uploads again every file still forgotten, so the end holds what the start held."""
        for plan in self.plans:
            while plan.forgotten:
                await plan.channel.handle_line(f"/upload {plan.forgotten.pop(0)}")

    async def missing_sources(self) -> list[str]:
        """What should be a source at the end and is not: every file, every note still pinned."""
        missing: list[str] = []
        for plan in self.plans:
            sources = await self._stored_sources(plan)
            links = {s.link for s in sources if s.kind is SourceKind.FILE}
            pins = {s.external_id for s in sources}
            name = f"#{plan.channel.key.channel}"
            missing += [f"{name} {path.name}" for path in plan.uploads if path.resolve().as_uri() not in links]
            missing += [f"{name} {pin}" for pin in plan.pins if pin not in pins]
        return missing


# -- targets -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
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


# -- running it ----------------------------------------------------------------


async def soak(articles: Sequence[Article], settings: SoakSettings, root: Path) -> dict[str, Any]:
    """Runs the whole soak under ``root`` and returns its figures (see :func:`main`)."""
    tally = Tally()
    errors = ErrorLog(tally)
    logging.getLogger().addHandler(errors)
    try:
        bot = await open_bot(soak_config(root / "data", root / "pictures"))
        await bot.start()  # warms UMAP in the background, as the bot does
        try:
            files = write_uploads(articles, root / "uploads", settings)
            plans = []
            for name, paths, number in zip(CHANNELS, files, range(len(CHANNELS)), strict=True):
                per = settings.articles_per_channel
                questions = [q.text for a in articles[number * per : (number + 1) * per] for q in a.questions]
                plans.append(ChannelPlan(SoakChannel(bot, name, tally), paths, [*questions, SAMPLE_QUESTION]))
            run = Soak(bot, plans, settings, tally)
            await run.run()
            missing = await run.missing_sources()
        finally:
            await bot.stop()
    finally:
        logging.getLogger().removeHandler(errors)
    assert run.final is not None
    after = run.samples[run.samples.index(run.baseline) + 1:] if run.baseline in run.samples else []
    targets = judge(run.baseline, run.final, len(tally.errors), missing, max((s.data_mib for s in after), default=0.0),
                    half_time(run.samples))
    return {
        "settings": asdict(settings),
        "cycles": run.cycles,
        "rebuilds": tally.rebuilds,
        "questions": tally.questions,
        "replies": dict(tally.replies),
        "actions": dict(tally.actions),
        "errors": tally.errors,
        "missing": missing,
        "grown": grown_since_baseline(run.inventory),
        "baseline": asdict(run.baseline) if run.baseline else None,
        "final": asdict(run.final),
        "samples": [asdict(s) for s in run.samples],
        "targets": [asdict(t) for t in targets],
    }


def grown_since_baseline(
    inventory: dict[str, tuple[Counter[str], Counter[str], Counter[str]]],
) -> dict[str, dict[str, int]]:
    """The descriptors and threads more numerous at the end than at the baseline, and the
    data directory's files larger (in bytes, the five that grew most), by kind."""
    if "baseline" not in inventory or "final" not in inventory:
        return {}
    before, after = inventory["baseline"], inventory["final"]
    data = sorted(grown(before[2], after[2]).items(), key=lambda item: -item[1])[:5]
    return {"descriptors": grown(before[0], after[0]), "threads": grown(before[1], after[1]),
            "data bytes": dict(data)}


def parser() -> argparse.ArgumentParser:
    defaults = SoakSettings()
    parse = base_parser("bench.soak", __doc__.splitlines()[0])
    parse.add_argument("--minutes", type=float, default=defaults.minutes, help="how long (default 15)")
    parse.add_argument("--sample-s", type=float, default=defaults.sample_s, help="seconds between samples (default 30)")
    parse.add_argument("--churn-s", type=float, default=defaults.churn_s,
                       help="seconds between pins, unpins, forgets, uploads... (default 10)")
    parse.add_argument("--question-pause-s", type=float, default=defaults.question_pause_s,
                       help="seconds between questions (default 1)")
    parse.add_argument("--articles-per-channel", type=int, default=defaults.articles_per_channel,
                       help="dev articles uploaded to each channel (default 2), besides the sample handbook")
    parse.add_argument("--chars", type=int, default=defaults.chars, help="cut each article to N characters (default: whole)")
    parse.add_argument("--warm-cycles", type=int, default=defaults.warm_cycles,
                       help="rebuild cycles before the baseline sample (default 1)")
    parse.add_argument("--min-cycles", type=int, default=defaults.min_cycles,
                       help="rebuild cycles after the baseline, run even past --minutes (default 1)")
    parse.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                       help="work under this (empty) directory instead of a temporary one")
    return parse


def report(figures: dict[str, Any]) -> None:
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


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    settings = SoakSettings(args.minutes, args.sample_s, args.churn_s, args.question_pause_s,
                            args.articles_per_channel, args.chars, args.warm_cycles, args.min_cycles)
    articles = load_articles(args.data)
    if len(articles) < settings.articles_per_channel * len(CHANNELS):
        parser().error(f"{args.data} holds {len(articles)} articles; "
                       f"{settings.articles_per_channel * len(CHANNELS)} are needed")
    start_info = start_run()
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        figures = asyncio.run(soak(articles, settings, args.data_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="bench-soak-") as root:
            figures = asyncio.run(soak(articles, settings, Path(root)))
    report(figures)
    print("\n" + machine_line("machine at end"))
    write_json(args.json, {"benchmark": "soak", "machine_start": start_info, "machine_end": machine_info(), **figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())
