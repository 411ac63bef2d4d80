"""Many small channels on one Chroma server: the memory they take, and a question in a channel evicted from memory.

A ``chroma run`` server on 127.0.0.1, its open vector indexes bounded as
``deploy/chroma.yaml`` bounds them (``--open-indexes``; 0 leaves Chroma's default), then:

1. **templates**: ``--templates`` channels (default 3) of two QuALITY articles each, ingested
   and rebuilt through this process's engine (real chunks, embeddings and extractive
   summaries; about 150 nodes a channel, as the issue's channels);
2. **channels**: ``--channels`` channels (default 1,000), each a copy of a template written
   through the engine's store API (``ChannelStore``: the sources' texts, the leaf cache, a
   summary cache, the tree, then the switch that serves it), ``WRITERS`` channels at a time;
3. **questions**, in a fresh process holding the engine as a front-end does (``python -m
   bot serve`` less the chat): one question in every channel, in the order they were written
   (``Engine.retrieve``: the question embedded by the model, the tree searched through the
   server). Each channel asked is then the least recently used of all: its vector indexes
   were closed by the server's bound (when the bound holds fewer than all channels' indexes)
   and its in-memory indexes are not in this process. Then ``HOT_QUESTIONS`` more in the last
   channels asked, whose indexes are in memory, for comparison.

Reported: the server's resident memory (now and at peak) after writing and after the
questions, the question process's (the bot's) before and after them, and the latency
of the questions in evicted channels (p50, p95). Targets (issue 31): the server and the bot
together within ``TARGET_TOTAL_MIB``, and p95 in an evicted channel at most ``TARGET_P95_S``.
The load average is printed with each phase: other jobs may share the machine.

Run: ``python -m bench.many_channels [--channels 1000] [--open-indexes 500] [--json FILE]``;
``--channels 50`` is a quick check. Writing takes one to two and a half seconds a channel on the
2-core machine, with the load of other agents, not with the channels written (1,000 channels:
34 minutes at load 3-19, then 8 minutes of questions).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    base_parser,
    data_dir,
    heading,
    latency_summary,
    load_average,
    machine_info,
    machine_line,
    positive_number,
    start_run,
    stopped_by_sigterm,
    table,
    verdict,
    write_json,
)
from bench.data import Article, load_articles
from bench.procfs import status_fields, status_mib
from bot.composition import build_engine, engine_settings
from bot.config import ChromaConfig, Config
from raptor_engine import ChannelKey, Engine
from raptor_engine.store import ChannelStore, ChromaStore, TreeState
from raptor_engine.store.common import profile_digest
from raptor_engine.tree import summary_key
from raptor_engine.types import Chunk, Node, Source
from testkit.cluster import ChromaServer

DEFAULT_CHANNELS = 1000
DEFAULT_OPEN_INDEXES = 500  # as deploy/chroma.yaml
DEFAULT_TEMPLATES = 3
ARTICLES_PER_CHANNEL = 2
WRITERS = 6  # channels written at a time: the server works while this process waits on another
HOT_QUESTIONS = 20
TARGET_TOTAL_MIB = 4096.0
TARGET_P95_S = 1.0
WORKSPACE = "TMANY"
SUMMARY_PROFILE = "bench-many"  # the copies' summary cache: a collection of the real one's size


@dataclass(frozen=True)
class Template:
    """What one built channel holds, read back through the store API, to be written again."""

    sources: list[tuple[Source, str]]
    leaves: list[tuple[list[Chunk], np.ndarray]]
    leaf_profile: str
    nodes: list[Node]
    vectors: np.ndarray
    state: TreeState
    questions: list[str]


def memory_mib(pid: int | None) -> dict[str, float]:
    """Resident memory of ``pid`` now and at its peak, MiB (zeros when it is gone)."""
    fields = status_fields(pid) if pid is not None else {}
    return {"rss_mib": status_mib(fields.get("VmRSS", "")), "peak_mib": status_mib(fields.get("VmHWM", ""))}


# -- the templates and the copies ------------------------------------------------


def build_template(engine: Engine, config: Config, key: ChannelKey, articles: list[Article]) -> Template:
    """Ingests and rebuilds ``articles`` in channel ``key``, then reads the channel back."""
    for number, article in enumerate(articles):
        engine.ingest_bytes(key, article.text.encode(), f"{key.channel}-{number}.txt", "", "bench")
    asyncio.run(engine.rebuild(key))
    channel = engine.store.channel(key)
    state = channel.live_state()
    if state is None:
        raise RuntimeError(f"template {key} has no tree after its rebuild")
    sources = [(source, channel.source_text(source.id)) for source in channel.list_sources()]
    leaf_profile = profile_digest(state.embedder_id, f"chunk{engine_settings(config).chunk_tokens}")
    leaves = channel.cached_leaves(leaf_profile, [source.id for source, _ in sources])
    if len(leaves) != len(sources):
        raise RuntimeError(f"template {key}: the leaf cache profile {leaf_profile} is not the engine's")
    nodes = [node for layer in sorted(state.nodes_per_layer)
             for node in channel.list_layer(state.version, layer, 10**9)]
    vectors = channel.get_tree_embeddings(state.version, [node.id for node in nodes])
    questions = [question.text for article in articles for question in article.questions]
    return Template(sources, list(leaves.values()), leaf_profile, nodes, np.vstack([vectors[n.id] for n in nodes]),
                    state, questions or ["What happens in the story?"])


def write_copy(channel: ChannelStore, template: Template) -> None:
    """Writes ``template`` into an empty channel as a build would leave it, and serves its tree."""
    for source, text in template.sources:
        channel.put_source(source, text)
    for chunks, vectors in template.leaves:
        channel.put_leaves(template.leaf_profile, chunks, vectors)
    summaries = [row for row, node in enumerate(template.nodes) if node.layer > 0]
    entries = [(summary_key(SUMMARY_PROFILE, [template.nodes[row].id]), template.nodes[row].text,
                template.nodes[row].source_ids) for row in summaries]
    channel.put_summaries(SUMMARY_PROFILE, entries, template.vectors[summaries])
    version = channel.next_version()
    channel.write_tree(version, template.nodes, template.vectors)
    built_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if not channel.switch_to(replace(template.state, version=version, built_at=built_at, slot=-1, tag="")):
        raise RuntimeError(f"channel {channel.key}: its copied tree was not served")


def channel_keys(count: int) -> list[ChannelKey]:
    return [ChannelKey("slack", WORKSPACE, f"CM{index:05d}") for index in range(count)]


def opening_seconds(port: int) -> tuple[int, float]:
    """How many collections the server holds, and the median seconds opening a channel not yet
    registered takes (``ChromaStore.channel``, three new channels; they write nothing)."""
    import chromadb  # noqa: PLC0415 - the bench's own client, beside the engine's

    count = len(chromadb.HttpClient(host="127.0.0.1", port=port).list_collections())
    store = ChromaStore.remote("127.0.0.1", port)
    times = []
    for number in range(3):
        started = time.perf_counter()
        store.channel(ChannelKey("slack", WORKSPACE, f"CNEW{number}"))
        times.append(time.perf_counter() - started)
    return count, sorted(times)[1]


def write_channels(store: ChromaStore, templates: list[Template], keys: list[ChannelKey]) -> float:
    """Writes every channel (channel ``i`` a copy of template ``i % len(templates)``); seconds taken."""
    started = time.perf_counter()

    def write(index: int) -> None:
        write_copy(store.channel(keys[index]), templates[index % len(templates)])
        if (index + 1) % 100 == 0:
            print(f"  {index + 1} channels written ({time.perf_counter() - started:.0f} s, load {load_average()})", flush=True)

    pool = ThreadPoolExecutor(WRITERS)
    try:
        list(pool.map(write, range(len(keys))))
    finally:
        pool.shutdown(cancel_futures=True)  # an interrupted run waits for the channels being written only
    return time.perf_counter() - started


# -- the questions (in a process of their own) --------------------------------------


def ask_all(plan: dict[str, Any]) -> dict[str, Any]:
    """The question process: an engine on the server, one question per channel in order,
    then ``HOT_QUESTIONS`` in the last ones; its latencies and this process's memory."""
    config = Config(data_dir=Path(plan["data_dir"]), chroma=ChromaConfig(host="127.0.0.1", port=plan["port"]))
    engine = build_engine(config)
    channels = [(ChannelKey(*key), question) for key, question in plan["channels"]]
    warm_key, warm_question = ChannelKey(*plan["warm"][0]), plan["warm"][1]
    engine.retrieve(warm_key, warm_question)  # the model's first call, not counted
    ready = memory_mib(os.getpid())
    load_start = load_average()
    evicted = [_timed(engine, key, question) for key, question in channels]
    after = memory_mib(os.getpid())
    hot = [_timed(engine, key, question) for key, question in channels[-HOT_QUESTIONS:]]
    return {"ready": ready, "after": after, "evicted_s": evicted, "hot_s": hot, "load_start": load_start,
            "load_end": load_average()}


def _timed(engine: Engine, key: ChannelKey, question: str) -> float:
    started = time.perf_counter()
    if not engine.retrieve(key, question):
        raise RuntimeError(f"no hit for a question in {key}")
    return time.perf_counter() - started


def _fields(key: ChannelKey) -> list[str]:
    return [key.platform, key.workspace, key.channel]


def question_of(template: Template, index: int) -> str:
    """Channel ``index``'s question: one of its template's articles' questions, in turn."""
    return template.questions[(index // 7) % len(template.questions)]


def run_questions(root: Path, port: int, templates: list[Template], keys: list[ChannelKey],
                  server_pid: int | None) -> dict[str, Any]:
    """Runs :func:`ask_all` in a fresh process, sampling the server's memory at the end."""
    channels = [(_fields(key), question_of(templates[index % len(templates)], index)) for index, key in enumerate(keys)]
    plan = {"data_dir": str(root / "bot-data"), "port": port, "channels": channels,
            "warm": [_fields(keys[-1]), templates[0].questions[0]]}
    (root / "plan.json").write_text(json.dumps(plan))
    subprocess.run([sys.executable, "-m", "bench.many_channels", "--ask", str(root / "plan.json")], check=True)
    result: dict[str, Any] = json.loads((root / "asked.json").read_text())
    result["server"] = memory_mib(server_pid)
    return result


# -- the run ---------------------------------------------------------------------


def run(args: argparse.Namespace, root: Path, articles: list[Article]) -> dict[str, Any]:
    open_indexes = args.open_indexes or None
    server = ChromaServer(root / "chroma", open_indexes)
    server.start()
    try:
        config = Config(data_dir=root / "bench-data", chroma=ChromaConfig(host="127.0.0.1", port=server.port))
        engine = build_engine(config)
        started = time.perf_counter()
        templates = [build_template(engine, config, ChannelKey("slack", WORKSPACE, f"CTPL{t}"),
                                    [articles[(ARTICLES_PER_CHANNEL * t + n) % len(articles)]
                                     for n in range(ARTICLES_PER_CHANNEL)])
                     for t in range(args.templates)]
        templates_s = time.perf_counter() - started
        print(f"{len(templates)} templates built in {templates_s:.0f} s: "
              f"{[len(t.nodes) for t in templates]} nodes (load {load_average()})", flush=True)
        keys = channel_keys(args.channels)
        load_start = load_average()
        write_s = write_channels(engine.store, templates, keys)
        written = memory_mib(server.pid)
        opening = opening_seconds(server.port)
        print(f"{len(keys)} channels written in {write_s:.0f} s; server {written['rss_mib']:.0f} MiB "
              f"(load {load_start} -> {load_average()})", flush=True)
        asked = run_questions(root, server.port, templates, keys, server.pid)
    finally:
        server.stop()
    nodes = sum(len(templates[i % len(templates)].nodes) for i in range(len(keys)))
    return {"open_indexes": open_indexes, "templates_s": templates_s, "write_s": write_s, "nodes": nodes,
            "template_nodes": [len(t.nodes) for t in templates], "server_written": written,
            "load_write": [load_start, load_average()], "opening": opening, **asked}


def report(args: argparse.Namespace, figures: dict[str, Any]) -> dict[str, Any]:
    """Prints the figures and targets; returns the JSON payload's."""
    bound = figures["open_indexes"]
    print(heading(f"{args.channels} channels ({figures['nodes']:,} nodes) on one chroma run, "
                  f"open indexes {'bounded to ' + str(bound) if bound else 'unbounded (Chroma default)'}"))
    written, server, bot = figures["server_written"], figures["server"], figures["after"]
    print(f"written in {figures['write_s']:.0f} s ({figures['write_s'] / args.channels:.2f} s a channel, "
          f"{WRITERS} at a time; load {figures['load_write'][0][0]:.1f} -> {figures['load_write'][1][0]:.1f})")
    print(table(["process", "when", "RSS MiB", "peak MiB"], [
        ("chroma run", "after writing", f"{written['rss_mib']:.0f}", f"{written['peak_mib']:.0f}"),
        ("chroma run", "after the questions", f"{server['rss_mib']:.0f}", f"{server['peak_mib']:.0f}"),
        ("bot (questions)", "model loaded, one question", f"{figures['ready']['rss_mib']:.0f}",
         f"{figures['ready']['peak_mib']:.0f}"),
        ("bot (questions)", f"after one question in each of {args.channels}", f"{bot['rss_mib']:.0f}",
         f"{bot['peak_mib']:.0f}"),
    ]))
    collections, opening_s = figures["opening"]
    print(f"opening a channel not yet registered, at {collections:,} collections: {opening_s * 1000:.0f} ms")
    evicted, hot = latency_summary(figures["evicted_s"]), latency_summary(figures["hot_s"])
    print(table(["questions", "n", "p50 ms", "p95 ms", "max ms", "load 1m"], [
        ("in a channel evicted from memory", int(evicted["n"]), f"{evicted['p50_ms']:.0f}",
         f"{evicted['p95_ms']:.0f}", f"{evicted['max_ms']:.0f}",
         f"{figures['load_start'][0]:.1f}->{figures['load_end'][0]:.1f}"),
        ("in a channel in memory", int(hot["n"]), f"{hot['p50_ms']:.0f}", f"{hot['p95_ms']:.0f}",
         f"{hot['max_ms']:.0f}", ""),
    ]))
    total = server["peak_mib"] + bot["peak_mib"]
    targets = [
        {"name": f"server + bot peak RSS <= {TARGET_TOTAL_MIB:.0f} MiB", "value": total, "limit": TARGET_TOTAL_MIB,
         "pass": total <= TARGET_TOTAL_MIB},
        {"name": f"question p95 in an evicted channel <= {TARGET_P95_S:g} s", "value": evicted["p95_ms"] / 1000.0,
         "limit": TARGET_P95_S, "pass": evicted["p95_ms"] / 1000.0 <= TARGET_P95_S},
    ]
    print(heading("Targets"))
    print(table(["target", "measured", "verdict"],
                [(t["name"], f"{t['value']:.2f}", verdict(t["pass"])) for t in targets]))
    print("\n" + machine_line("machine at end"))
    return {"evicted": evicted, "hot": hot, "targets": targets, "total_peak_mib": total}


def build_parser() -> argparse.ArgumentParser:
    parser = base_parser("bench.many_channels", __doc__.split("\n\n")[0])
    parser.add_argument("--channels", type=positive_number, default=DEFAULT_CHANNELS, metavar="N",
                        help=f"channels written and asked (default {DEFAULT_CHANNELS})")
    parser.add_argument("--open-indexes", type=int, default=DEFAULT_OPEN_INDEXES, metavar="N",
                        help=f"the server's bound on open vector indexes (default {DEFAULT_OPEN_INDEXES}, as "
                             "deploy/chroma.yaml; 0: Chroma's default)")
    parser.add_argument("--templates", type=positive_number, default=DEFAULT_TEMPLATES, metavar="N",
                        help=f"channels built for real, copied into the others (default {DEFAULT_TEMPLATES})")
    parser.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                        help="keep the server's data and logs here (default: a temporary directory)")
    parser.add_argument("--ask", type=Path, default=None, help=argparse.SUPPRESS)  # the question process
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the many-channels benchmark (or, with ``--ask``, its question process)."""
    args = build_parser().parse_args(argv)
    if args.ask is not None:
        result = ask_all(json.loads(args.ask.read_text()))
        (args.ask.parent / "asked.json").write_text(json.dumps(result))
        return 0
    articles = load_articles(args.data)
    start_info = start_run()
    with stopped_by_sigterm(), data_dir(args.work_dir, "bench-many-") as root:  # a killed run stops its server too
        figures = run(args, root, articles)
    payload = report(args, figures)
    write_json(args.json, {"benchmark": "many_channels", "channels": args.channels, "machine_start": start_info,
                           "machine_end": machine_info(), **figures, **payload})
    return 0


if __name__ == "__main__":
    sys.exit(main())
