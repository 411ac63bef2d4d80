"""The soak's workload (``bench.soak``): four console channels of one started bot, kept
busy with questions, rebuild cycles and churn until the time is up.

Everything goes through the console adapter's ``ConsoleChannel.handle_line``, i.e. the
neutral events the adapters produce and the real chat handler and scheduler, never engine
shortcuts:

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
build counted as a cycle, it held one). Every ``--sample-s`` seconds the process is
sampled (``bench.soak_probe``). The *baseline* is the sample taken when the first
``--warm-cycles`` rebuild cycles have ended; the *final* sample is taken at
the same point, just after the last rebuild. Then every forgotten file is
uploaded again, and every source is looked for.

Uploads are the dev articles of ``--data`` (default ``shared/data/quality-dev.jsonl``),
``--articles-per-channel`` of them per channel (cut to ``--chars`` characters
when given), written to files, plus the bundled sample handbook in every channel.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from adapters.console.app import ConsoleChannel
from adapters.console.translate import PIN_PREFIX, pin_number_of
from bench.data import Article
from bench.soak_probe import Inventory, Sample, inventory, sample
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
    ``articles`` must hold ``articles_per_channel`` articles for each channel (checked by :func:`bench.soak.main`)."""
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


def channel_plans(bot: Assistant, articles: Sequence[Article], folder: Path, settings: SoakSettings,
                  tally: Tally) -> list[ChannelPlan]:
    """The plan of every channel of :data:`CHANNELS`: its uploads, written under ``folder`` (see
    :func:`write_uploads`), and its articles' questions then the sample's, asked in turn."""
    files = write_uploads(articles, folder, settings)
    plans = []
    for name, paths, number in zip(CHANNELS, files, range(len(CHANNELS)), strict=True):
        per = settings.articles_per_channel
        questions = [q.text for a in articles[number * per : (number + 1) * per] for q in a.questions]
        plans.append(ChannelPlan(SoakChannel(bot, name, tally), paths, [*questions, SAMPLE_QUESTION]))
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
        self.inventories: dict[str, Inventory] = {}
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
        self.inventories["final"] = inventory(self.bot.config.data_dir)
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
                self.inventories["baseline"] = inventory(self.bot.config.data_dir)

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

