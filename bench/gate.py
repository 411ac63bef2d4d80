"""How long the regression gate takes: 200 approved questions asked of one tree.

The channel is every QuALITY story in one tree (``--pooled`` in ``bench.retrieval``); its
approved questions are the set's questions, each expecting the story it was written about, as
if a person had given each answer a 👍. The gate's check (``regression_gate.check_tree``: the
questions embedded together, then each retrieved with the engine's retrieval settings and the
tree's own indexes) is timed three times on the served tree; the best and the worst are given,
with hit@5. A rebuild asks only the questions new since the served tree's last check (kept in
the channel's notes), so this is the most one rebuild spends on it.

Run: ``python -m bench.gate [--data-dir DIR] [--questions 200] [--json FILE]``.
Target (issue 29): at most 10 s for 200 questions on this machine, offline.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from bench.common import (
    add_data_dir_argument,
    base_parser,
    data_dir,
    ensure_article_channels,
    heading,
    load_embedder,
    machine_line,
    offline_engine,
    offline_identity,
    verdict,
    write_json,
)
from bench.data import load_sets
from raptor_engine.regression_gate import ApprovedQuestion, check_tree

TARGET_S = 10.0
RUNS = 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("bench.gate", __doc__.splitlines()[0])
    add_data_dir_argument(parser)
    parser.add_argument("--questions", type=int, default=200, help="approved questions to check (default 200)")
    args = parser.parse_args(argv)
    data = load_sets(["quality"])[0]
    embedder = load_embedder()
    counter = embedder.token_counter()
    with data_dir(args.data_dir, "bench-gate-") as directory:
        engine = offline_engine(directory, embedder, counter)
        keys = ensure_article_channels(engine, data.articles, offline_identity(engine, counter), pooled=True)
        key = next(iter(keys.values()))
        by_link = {source.link: source.id for source in engine.sources(key)}
        questions = [ApprovedQuestion(q.text, frozenset({by_link[f"{a.dataset}.jsonl#{a.index}"]}), "")
                     for a in data.articles for q in a.questions][: args.questions]
        channel = engine.store.channel(key)
        state = channel.live_state()
        assert state is not None
        seconds, found = [], 0
        for _ in range(RUNS):
            started = time.perf_counter()
            check = check_tree(channel, state, questions, embedder, engine.settings.retrieval)
            seconds.append(time.perf_counter() - started)
            found = check.found
    print(heading(f"The regression gate's check: {len(questions)} approved questions, one tree of "
                  f"{len(data.articles)} stories"))
    print(f"check: best {min(seconds):.2f} s, worst {max(seconds):.2f} s of {RUNS}; hit@5 {found} of {len(questions)}")
    passed = max(seconds) <= TARGET_S
    print(f"target: at most {TARGET_S:.0f} s for 200 questions: {verdict(passed)}")
    print(machine_line("machine at end"))
    write_json(args.json, {"benchmark": "gate", "questions": len(questions), "seconds": seconds, "found": found,
                           "target_s": TARGET_S, "passed": passed})
    return 0


if __name__ == "__main__":
    sys.exit(main())
