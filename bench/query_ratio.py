"""A question through ``retrieve`` against a brute-force search, side by side (issue 31's ratio).

The brute force is what any retrieval costs at least: the question embedded with the same
model, then one numpy cosine over the channel's leaf vectors (read once beforehand) and the
best ``top_k`` of them. Two ways to compare, both in one run:

- **in process** (:func:`time_side_by_side`): each question through ``Engine.retrieve`` (as
  ``python -m bot retrieve`` calls it) and through the brute force, interleaved, the order
  swapped every question, so a load that comes and goes hits both alike;
- **whole commands** (:func:`command_seconds`): ``python -m bot retrieve --channel …`` with
  the questions on stdin, against ``python -m bench.query_ratio --channel …`` (the brute
  force as a command: the command line's embedder, questions on stdin). Both print one line a
  question as it is answered; the time from the first line to the last over the questions
  between is the cost per question, without the start-up.

Run the brute force alone: ``python -m bench.query_ratio --data-dir DIR --channel KEY < questions``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import Stopwatch
from raptor_engine import ChannelKey, ChromaStore, Embedder, Engine, RetrievalSettings
from raptor_engine.store import ChannelStore
from raptor_engine.unit_vectors import unit, unit_rows

TARGET_RATIO = 1.3  # retrieve's time a question at most this many times the brute force's


@dataclass(frozen=True, slots=True)
class BruteForce:
    """A channel's served leaves as unit vectors: the flat search every retrieval must beat."""

    ids: tuple[str, ...]
    vectors: np.ndarray

    @classmethod
    def read(cls, store: ChannelStore) -> BruteForce:
        """The leaves of the channel's served tree and their stored vectors."""
        state = store.live_state()
        if state is None:
            raise RuntimeError(f"{store.key} has no tree: build it first")
        leaves = store.list_layer(state.version, 0, 10**9)
        stored = store.get_tree_embeddings(state.version, [leaf.id for leaf in leaves])
        return cls(tuple(leaf.id for leaf in leaves), unit_rows(np.vstack([stored[leaf.id] for leaf in leaves])))

    def search(self, embedder: Embedder, question: str, top_k: int) -> list[str]:
        """The ids of the ``top_k`` leaves nearest to the question, best first."""
        scores = self.vectors @ unit(embedder.embed([question])[0])
        return [self.ids[i] for i in np.argsort(-scores)[:top_k]]


@dataclass(frozen=True, slots=True)
class SideBySide:
    """Seconds per question of ``retrieve`` and of the brute force, question for question."""

    retrieve: list[float]
    brute: list[float]

    @property
    def ratio(self) -> float:
        """Mean retrieve time over mean brute-force time."""
        return float(np.mean(self.retrieve) / np.mean(self.brute))


def time_side_by_side(engine: Engine, embedder: Embedder, asked: Sequence[tuple[ChannelKey, str]],
                      settings: RetrievalSettings) -> SideBySide:
    """Each question through ``engine.retrieve`` and through the brute force, interleaved
    (the first of the two alternates), after reading each channel's leaf vectors once."""
    brute = {key: BruteForce.read(engine.store.channel(key)) for key in dict.fromkeys(key for key, _ in asked)}
    retrieve_seconds: list[float] = []
    brute_seconds: list[float] = []
    for position, (key, text) in enumerate(asked):
        steps = [(retrieve_seconds, lambda: engine.retrieve(key, text, settings)),
                 (brute_seconds, lambda: brute[key].search(embedder, text, settings.top_k))]
        for seconds, step in steps if position % 2 == 0 else reversed(steps):
            with Stopwatch() as watch:
                step()
            seconds.append(watch.seconds)
    return SideBySide(retrieve_seconds, brute_seconds)


def per_question_seconds(command: Sequence[str], questions: Sequence[str]) -> tuple[float, float]:
    """The whole command's seconds with ``questions`` on stdin (one a line), and its cost per
    question without the start-up: from its first output line to its last, over the questions
    between (the command prints one line a question, as it answers it)."""
    started = time.perf_counter()
    process = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    feeding = threading.Thread(target=_feed, args=(process, questions))
    feeding.start()
    assert process.stdout is not None
    moments = [time.perf_counter() for _ in process.stdout]
    feeding.join()
    if process.wait() != 0 or len(moments) != len(questions):
        raise RuntimeError(f"{command[2:4]} failed, or answered {len(moments)} of {len(questions)} questions")
    return time.perf_counter() - started, (moments[-1] - moments[0]) / max(1, len(moments) - 1)


def _feed(process: subprocess.Popen[str], questions: Sequence[str]) -> None:
    assert process.stdin is not None
    process.stdin.write("".join(f"{q}\n" for q in questions))
    process.stdin.close()


def cli_commands(data_dir: Path, key: ChannelKey) -> dict[str, list[str]]:
    """The two commands compared for channel ``key``: ``bot retrieve`` and this module's brute force."""
    channel = f"{key.platform}/{key.workspace}/{key.channel}"
    return {"python -m bot retrieve": [sys.executable, "-m", "bot", "--data-dir", str(data_dir), "retrieve",
                                       "--json", "--channel", channel],
            "brute force command": [sys.executable, "-m", "bench.query_ratio", "--data-dir", str(data_dir),
                                    "--channel", channel]}


def main(argv: Sequence[str] | None = None) -> int:
    """The brute force as a command: one line of leaf ids per question read from stdin."""
    parser = argparse.ArgumentParser("bench.query_ratio", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--channel", required=True, help="platform/workspace/channel")
    parser.add_argument("--top-k", type=int, default=RetrievalSettings().top_k)
    args = parser.parse_args(argv)
    from bot.paths import user_cache  # the command line's embedder: its ONNX export, where made
    from raptor_engine import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(cache_dir=user_cache() / "model-cache")
    platform, workspace, channel = args.channel.split("/", 2)
    brute = BruteForce.read(ChromaStore.embedded(args.data_dir / "chroma").channel(ChannelKey(platform, workspace, channel)))
    for line in sys.stdin:
        print(" ".join(brute.search(embedder, line.strip(), args.top_k)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
