"""The command line: ``python -m bot [COMMAND --channel C ...]`` on the configured engine.

``serve`` (alias ``chat``), the default when no command is given, serves the bot
until stopped: on Slack and Discord when their tokens are configured, else on the
console, where the terminal becomes a channel that answers with citations and runs
the chat commands (rebuild, status, sources, ...). The other commands do one
thing and exit: ``ingest``, ``rebuild``, ``ask``, ``retrieve``, ``inspect``,
``sources``, ``forget`` and ``demo`` (ingest the bundled sample and answer a
question about it). Errors a person can fix are one line on stderr and exit 1;
usage errors exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

# Only light modules here: a rebuild starts the clustering worker before the engine's
# imports (scikit-learn, Chroma, the model: seconds), so that the two overlap.
from bot.config import Config, load_config
from bot.errors import BotError, NothingToAsk, explain
from raptor_engine import (
    AnswerRecord,
    BuildHeldBack,
    BuildReport,
    ChannelKey,
    Hit,
    NoMaterial,
    RaptorError,
    RetrievalMode,
)

if TYPE_CHECKING:
    from bot.data_lock import DataLock
    from raptor_engine import Engine, RetrievalSettings

log = logging.getLogger(__name__)

CLI_PLATFORM = "cli"
CLI_WORKSPACE = "local"
SERVE = "serve"
WORKER = "worker"
CLI_FORCE, CLI_CHECK = "rebuild --force", "check"  # how the command line serves a held-back tree, lists the questions
COMMAND_ENV_VAR = "RAPTOR_COMMAND"  # how the program is run where it is installed, when not LOCAL_COMMAND
LOCAL_COMMAND = ".venv/bin/python -m bot"
CLUSTERING = ("rebuild", "demo")  # the commands that cluster: their worker starts first thing


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bot", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config",
        type=Path,
        default=Path(os.environ["RAPTOR_CONFIG"]) if os.environ.get("RAPTOR_CONFIG") else None,
        help="YAML configuration (default: $RAPTOR_CONFIG, else built-in defaults)",
    )
    parser.add_argument("--data-dir", type=Path, help="where the embedded Chroma lives (default ./data)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens")
    # Not required: with no command, the console chat opens (see main).
    commands = parser.add_subparsers(dest="command", required=False, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(command=name)
        if name not in ("demo", SERVE, WORKER):
            sub.add_argument("--channel", required=True,
                             help="the channel's name, or a chat channel's key: platform/workspace/channel "
                                  "(e.g. slack/T0123/C0456, as `status` and the logs name it)")
        return sub

    serve = command(SERVE, "serve the bot until stopped: on Slack and Discord when configured, "
                           "else chat in this terminal (the default command)")
    serve.add_argument("--channel", help="the console channel's name (default: console.channel of the configuration)")

    command(WORKER, "take rebuild jobs from the coordination server's queue until stopped "
                    "(several processes: needs coordination.redis_url and chroma.host)")
    command("ingest", "add files to a channel").add_argument("files", nargs="+", type=Path)
    command("rebuild", "build the channel's tree from its sources").add_argument(
        "--force", action="store_true", help="rebuild even when nothing changed, and serve the new tree even if the regression gate "
                                      "would hold it back")
    command("check", "ask the channel's approved questions (👍 answers, corrections) of its tree: "
                     "which still find their sources among the first 5 hits")
    command("ask", "answer a question with citations").add_argument("question")
    retrieve = command("retrieve", "print the nodes retrieved for questions")
    retrieve.add_argument("--mode", choices=[m.value for m in RetrievalMode])
    retrieve.add_argument("--budget", type=int, help="token budget (default 2000)")
    retrieve.add_argument("--top-k", type=int, help="at most this many nodes")
    retrieve.add_argument("--dense-only", action="store_true", help="collapsed mode without the BM25 fusion")
    retrieve.add_argument("--json", action="store_true", help="print JSON: one object per question, one line per input line")
    retrieve.add_argument("question", nargs="?", help="the question; without it, one per line from stdin")
    command("inspect", "tree statistics, or one node").add_argument("--node", help="a node id")
    command("sources", "list the channel's sources")
    command("forget", "remove a source and all built from it").add_argument("source", help="source id (or prefix)")
    command("questions", "print the channel's 👍 answers as a question set: one JSON object per line "
                         "(question, answer, its sources), for checking a rebuild before it is served")
    command("demo", "ingest the bundled sample and answer a question about it")
    return parser


def main(argv: Sequence[str] | None = None, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> int:
    """Runs one command; returns the process exit code."""
    args = build_parser().parse_args(argv)
    if args.command is None:
        args.command, args.channel = SERVE, None
    configure_logging("WARNING", args.verbose)  # until the configuration is read
    try:
        config = load_config(args.config)
        configure_logging(config.log_level, args.verbose, config.observability.log_format, args.command)
        if args.data_dir is not None:
            config = config.model_copy(update={"data_dir": args.data_dir})
        return _run(args, config, stdin, stdout)
    except (RaptorError, BotError) as exc:
        print(f"error: {explain(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


# Libraries whose DEBUG output is a flood that also slows them down (numba logs every
# step of every compile): they stay at INFO when the bot logs at DEBUG.
_CHATTY_LIBRARIES = ("numba", "urllib3", "httpcore", "PIL", "matplotlib", "filelock", "fsspec")


# Loggers whose INFO lines are routine, per request or per scheduled run (the sweep runs every
# few seconds): shown from WARNING, whatever the level.
_ROUTINE_LOGGERS = ("httpx", "apscheduler.executors.default", "apscheduler.scheduler")


def configure_logging(level: str, verbose: bool, log_format: str = "text", command: str = "") -> None:
    """Logs at ``level`` (the configuration's ``log_level``), or at INFO where ``-v`` asks for
    more; as text lines, or as one JSON object per line (``observability.log_format: json``)
    naming the process's role (the ``command``), the channel and the error reference. Python
    warnings go through logging too, so that they follow the same level and format."""
    threshold = logging.getLevelName(level)
    if verbose:
        threshold = min(threshold, logging.INFO)
    if log_format == "json":
        from bot.observability.log_format import json_handler, set_process_role

        set_process_role(command)
        logging.basicConfig(handlers=[json_handler()], force=True)
    else:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(threshold)
    for name in _CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(max(threshold, logging.INFO))
    for name in _ROUTINE_LOGGERS:
        logging.getLogger(name).setLevel(max(threshold, logging.WARNING))
    logging.captureWarnings(True)


def _run(args: argparse.Namespace, config: Config, stdin: TextIO, stdout: TextIO) -> int:
    if args.command == SERVE:
        return _serve(config, args.channel, stdin, stdout)
    if args.command == WORKER:
        from bot.composition import run_worker

        return run_worker(config)
    held = _start_clustering(config) if args.command in CLUSTERING else None  # noqa: F841  # the lock, until the store holds it
    from bot import replies
    from bot.composition import build_engine  # heavy: only once arguments are valid

    engine = build_engine(config, clusters_soon=args.command in CLUSTERING)
    channel = channel_key(getattr(args, "channel", "demo"))
    if args.command == "ingest":
        return _ingest(engine, channel, args.files, stdout)
    if args.command == "rebuild":
        version = 0 if args.force else engine.unchanged_since(channel)
        if version:  # nothing to build: said, and nothing written
            print(replies.unchanged_text(version, CLI_FORCE), file=stdout)
            return 0
        try:
            print(replies.report_text(_rebuild(engine, channel, args.force)), file=stdout)
        except BuildHeldBack as held:
            print(replies.held_back_text(held.reason, CLI_FORCE, CLI_CHECK), file=sys.stderr)
            return 1
    elif args.command == "check":
        print(replies.check_text(engine.check_questions(channel)), file=stdout)
    elif args.command == "ask":
        with _asking(engine, channel):
            answer = asyncio.run(engine.answer(channel, args.question))
        print(replies.answer_text(answer), file=stdout)
    elif args.command == "retrieve":
        with _asking(engine, channel):
            _retrieve(engine, channel, args, stdin, stdout)
    elif args.command == "inspect":
        print(_inspect(engine, channel, args.node), file=stdout)
    elif args.command == "sources":
        print(replies.sources_text(engine.sources(channel)), file=stdout)
    elif args.command == "forget":
        print(replies.forgot_text(engine.forget(channel, args.source)), file=stdout)
    elif args.command == "questions":
        for line in question_set(engine.answers(channel)):
            print(line, file=stdout)
    elif args.command == "demo":
        _demo(engine, channel, stdout)
    return 0


def channel_key(text: str) -> ChannelKey:
    """A command line's ``--channel``: a chat channel's full key (``platform/workspace/channel``),
    or a plain name, which is a channel of the command line's own."""
    try:
        return ChannelKey.parse(text)
    except ValueError:
        return ChannelKey(CLI_PLATFORM, CLI_WORKSPACE, text)


def channel_name(key: ChannelKey) -> str:
    """How ``--channel`` names ``key`` (the inverse of :func:`channel_key`): a command-line
    channel by its plain name, any other by its full key."""
    if (key.platform, key.workspace) == (CLI_PLATFORM, CLI_WORKSPACE):
        return key.channel
    return str(key)


@contextmanager
def _asking(engine: Engine, channel: ChannelKey) -> Iterator[None]:
    """Around the questions a command asks of ``channel``: raises ``NothingToAsk`` (one line on
    stderr, exit 1, as every error a person can fix) when there is nothing to search, saying
    which case it is. A channel the store does not know (never used, or dropped when its last
    source was forgotten) is refused before anything is asked (asking would register it, and
    the next run would call it known); a known channel with no source is the engine's
    ``NoMaterial``, raised by the first question."""
    from bot import replies

    known = engine.channels()
    if channel not in known:
        raise NothingToAsk(replies.unknown_channel_text(channel_name(channel), [channel_name(k) for k in known]))
    try:
        yield
    except NoMaterial as exc:
        raise NothingToAsk(replies.empty_channel_text(channel_name(channel), channel.platform != CLI_PLATFORM)) from exc


def question_set(answers: Iterable[AnswerRecord]) -> list[str]:
    """The kept answers people found right (more 👍 than 👎, and found in the material) as
    JSON lines, oldest first: the question, the answer, the sources it cited, its votes, and
    whether it cites material that changed after it was given (``changed``: its text may no
    longer be the right answer, so an evaluation may want to leave it out)."""
    return [
        json.dumps({"question": a.question, "answer": a.text, "source_ids": list(a.source_ids),
                    "answer_id": a.answer_id, "answered_at": a.answered_at, "ups": a.ups, "downs": a.downs,
                    "changed": a.changed},
                   ensure_ascii=False)
        for a in answers if a.found and a.ups > a.downs
    ]


def _inspect(engine: Engine, channel: ChannelKey, node_id: str | None) -> str:
    """The tree's statistics and top nodes, or one node with how to open its neighbours here."""
    from bot import replies

    if node_id is None:
        return replies.stats_text(engine.stats(channel), engine.top_nodes(channel))
    open_with = f"inspect --channel {channel.channel} --node ID"
    return replies.node_text(engine.node(channel, node_id), open_with=open_with)


def _serve(config: Config, channel: str | None, stdin: TextIO, stdout: TextIO) -> int:
    """Slack and/or Discord when their tokens are configured, else the console chat; until
    SIGINT or SIGTERM (or, on the console, end of input or ``/quit``)."""
    from bot.composition import chosen_adapters, serve  # heavy: only once arguments are valid
    from bot.runtime import run_until_signalled

    def write(text: str) -> None:
        print(text, file=stdout, flush=True)

    def write_partial(text: str) -> None:  # a streamed answer's next words, on the same line
        stdout.write(text)
        stdout.flush()

    adapters = chosen_adapters(config, stdin, write, channel, write_partial)
    asyncio.run(run_until_signalled(serve(config, adapters, write)))
    return 0


def _start_clustering(config: Config) -> DataLock | None:
    """Starts the clustering worker and its warm-up now, before the engine's imports: the
    worker's own start (a fresh interpreter importing UMAP and numba's cached kernels) takes
    seconds. Under the data directory's lock, as the engine's store will be (numba's cache is
    written below it); returns that lock, or raises ``DataDirInUse`` as opening the store would."""
    from bot.data_lock import lock_data_dir
    from bot.paths import machine_home
    from raptor_engine import prestart_clustering, use_numba_cache_dir

    lock = None if config.chroma.host else lock_data_dir(config.data_dir)
    use_numba_cache_dir(machine_home(config))
    prestart_clustering()
    return lock


def _rebuild(engine: Engine, channel: ChannelKey, force: bool = False) -> BuildReport:
    """Rebuilds with a progress display on stderr (``force``: past the regression gate)."""
    from bot.progress import TerminalProgress

    progress = TerminalProgress()
    try:
        return asyncio.run(engine.rebuild(channel, progress, force))
    finally:
        progress.close()


def _ingest(engine: Engine, channel: ChannelKey, files: Iterable[Path], stdout: TextIO) -> int:
    """Ingests each file; a refused file is reported and the others still go in."""
    from bot.progress import TerminalProgress
    from bot.replies import ingested_text

    failures = 0
    for path in files:
        progress = TerminalProgress(plain_lines=False)  # scripts ingesting many files want a quiet stderr
        try:
            result = engine.ingest_file(channel, path, progress=progress)
        except RaptorError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failures += 1
            continue
        finally:
            progress.close()
        print(ingested_text(path, result), file=stdout)
    return 1 if failures else 0


def _retrieve(engine: Engine, channel: ChannelKey, args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> None:
    from bot.replies import hit_line

    base: RetrievalSettings = engine.settings.retrieval
    settings = replace(
        base,
        mode=RetrievalMode(args.mode) if args.mode else base.mode,
        budget=args.budget if args.budget is not None else base.budget,
        top_k=args.top_k if args.top_k is not None else base.top_k,
        hybrid=base.hybrid and not args.dense_only,
    )
    questions = [args.question] if args.question is not None else (line.strip() for line in stdin)
    for question in questions:
        # A blank line still gets its (empty) answer line: output line N answers input line N.
        hits = engine.retrieve(channel, question, settings) if question else []
        if args.json:
            print(json.dumps({"hits": [hit_json(hit) for hit in hits]}, ensure_ascii=False), file=stdout, flush=True)
        else:
            for hit in hits:
                print(hit_line(hit), file=stdout)
            print(file=stdout, flush=True)


def hit_json(hit: Hit) -> dict[str, object]:
    """A hit in the documented JSON shape of ``retrieve --json``."""
    node = hit.node
    return {
        "id": node.id,
        "layer": node.layer,
        "score": round(hit.score, 6),
        "text": node.text,
        "tokens": node.tokens,
        "source": {"title": node.title, "link": node.link},
    }


def _demo(engine: Engine, channel: ChannelKey, stdout: TextIO) -> None:
    from bot.replies import answer_text, ask_your_own_text, demo_question_text, report_text, sample_text
    from bot.samples import SAMPLE_DOCUMENT, SAMPLE_QUESTION

    result = engine.ingest_file(channel, SAMPLE_DOCUMENT)
    print(sample_text(result, channel.channel), file=stdout)
    print(report_text(_rebuild(engine, channel)), file=stdout)
    print(demo_question_text(SAMPLE_QUESTION), file=stdout)
    print(answer_text(asyncio.run(engine.answer(channel, SAMPLE_QUESTION))), file=stdout)
    print(ask_your_own_text(channel.channel, own_command()), file=stdout)


def own_command() -> str:
    """How a person runs this program where it runs, for the commands it suggests:
    ``$RAPTOR_COMMAND`` (the Docker image sets its ``docker run`` line), else the virtual
    environment of ``make install``."""
    return os.environ.get(COMMAND_ENV_VAR) or LOCAL_COMMAND
