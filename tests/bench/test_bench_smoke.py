"""Smoke tests of the benchmarks, and exact tests of the quality measure they share.

The smoke tests run each benchmark's ``main`` on a tiny slice of the data
(the first document of each set, cut to a few thousand characters, with a
question or two, written to a temporary directory) and check that the tables
and the JSON hold what they should, not the figures themselves (timings depend
on the machine, recall on the summariser). They are skipped when the data is
not there. The measure's tests need no data.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import answers, build, query, retrieval
from bench.data import DATA_ROOT, DEFAULT_DATA, FIT, HELD, SET_FILES, load_set, read_question
from bench.measure import content_words, distinguishing_words, mean_interval, paired_difference, word_recall
from bench.retrieval_flat import Sentence, oracle_recall, rrf_scores
from bench.retrieval_report import TARGETS
from bench.retrieval_scoring import CHANCE, FLAT, METHODS, WHOLE

TINY_CHARS = 4000  # ~900 tokens: under every budget at 2,000, over 500
TINY_QUESTIONS = 2


@pytest.fixture
def dev_data() -> None:
    """Fails the test, loudly, when the dev data it runs on is missing (never a silent skip)."""
    missing = [str(p) for p in (DEFAULT_DATA, *(DATA_ROOT / f for f in SET_FILES.values())) if not p.is_file()]
    assert not missing, f"dev data missing (../shared/data beside the repository): {missing}"


def needs_data(test: Callable[..., None]) -> Callable[..., None]:
    """Marks a test slow and needing the three sets under ``DATA_ROOT`` (it fails without them)."""
    return pytest.mark.slow(pytest.mark.usefixtures("dev_data")(test))


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Chroma data directory for the query, retrieval and answer runs, so each tree is built once."""
    return tmp_path_factory.mktemp("bench-data")


@pytest.fixture(scope="module")
def tiny_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first document of each set, cut short, with its first questions, as the sets' JSONL files."""
    directory = tmp_path_factory.mktemp("bench-sources")
    for name in SET_FILES.values():
        with (DATA_ROOT / name).open(encoding="utf-8") as lines:
            record = json.loads(next(lines))
        record["input"] = record["input"][:TINY_CHARS]
        record["instructions"] = record["instructions"][:TINY_QUESTIONS]
        record["outputs"] = record["outputs"][:TINY_QUESTIONS]
        (directory / name).write_text(json.dumps(record) + "\n", encoding="utf-8")
    return directory


# -- the benchmarks ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("dev_data")
def test_build_reports_stages_memory_and_targets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "build.json"
    assert build.main(["--sizes", "1", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    for expected in ("One-time costs", "clustering.warm_up()", "Build per size", "rb:cluster",
                     "total/embed-only", "fixed/embed-only", "peak RSS MiB", "== Targets ==", "2.5 GiB"):
        assert expected in out
    figures = json.loads(report.read_text())
    size = figures["sizes"][0]
    assert size["articles"] == 1 and size["leaves"] > 11 and size["tokens"] > 0
    # The fixed part leaves out clustering and summarising: more than the leaves' embedding, less than the build.
    assert size["summaries_embed_only_s"] > 0
    assert size["ingest_embed_s"] < size["fixed_s"] < size["total_s"]
    assert size["rebuild_cpu_s"] > 0 and "the rebuild's work:" in out
    assert figures["targets"]["judged_on_articles"] == 1


@pytest.mark.slow
@pytest.mark.usefixtures("dev_data")
def test_query_reports_latency_percentiles(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert query.main(["--articles", "1", "--data-dir", str(shared_dir)]) == 0
    out = capsys.readouterr().out
    for expected in ("Latency per question", "retrieve (collapsed", "answer (retrieve", "p50 ms", "p95 ms",
                     "p95 retrieve", "target < 50 ms"):
        assert expected in out
    assert "PASS" in out or "FAIL" in out


@needs_data
def test_retrieval_scores_every_method_at_every_budget(
    tiny_sources: Path, shared_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, baseline = tmp_path / "retrieval.json", tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"collapsed": {"quality@2000": 1.0}}), encoding="utf-8")  # unreachable: flagged
    assert retrieval.main(["--sources", str(tiny_sources), "--data-dir", str(shared_dir), "--json", str(report),
                           "--baseline", str(baseline)]) == 0
    out = capsys.readouterr().out
    for expected in ("one tree per document", "quality @ 2000 tokens", "patents @ 500 tokens", "reviews @ 2000 tokens",
                     "financial @ 500 tokens", "wikipedia @ 2000 tokens", "best flat baseline", "oracle extract",
                     "whole document", "chance", "== Targets (issue 27), plain recall ==", "distinguishing-word recall",
                     "fit half", "other half", "LOST more than 1 point on quality@2000"):
        assert expected in out
    figures = json.loads(report.read_text())
    budgets = {name: sorted(figures["sets"][name]["budgets"]) for name in SET_FILES}
    assert budgets == {name: ["2000", "500"] for name in SET_FILES}
    assert figures["lost_against_baseline"] == ["quality@2000"]
    for name in SET_FILES:
        for budget, at in figures["sets"][name]["budgets"].items():
            methods = at["methods"]
            assert list(methods) == list(METHODS) and at["best_flat"] in FLAT
            whole = methods[WHOLE]["per_question_recall"]
            for method, f in methods.items():
                # Every method's context is a part of the document (summaries are extractive offline).
                assert all(0.0 <= r <= w + 1e-9 for r, w in zip(f["per_question_recall"], whole, strict=True)), method
                assert 0.0 <= f["summary_share"] <= 1.0
                assert set(f["halves"]) == {FIT, HELD}
            if budget == "2000":  # the whole tiny document fits: a flat baseline takes every leaf of the engine's
                for method in (*FLAT, CHANCE):
                    assert methods[method]["per_question_recall"] == whole
            assert all(methods[m]["summary_share"] == 0.0 for m in (*FLAT, WHOLE))
    targets = figures["targets"]
    assert [(t["set"], t["budget"]) for t in targets] == [(t.set_name, t.budget) for t in TARGETS]
    assert all(isinstance(t["pass"], bool) for t in targets)


@needs_data
def test_answers_report_recall_summary_citations_and_refusals(
    tiny_sources: Path, shared_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "answers.json"
    assert answers.main(["--sources", str(tiny_sources), "--data-dir", str(shared_dir), "--json", str(report)]) == 0
    out = capsys.readouterr().out
    for expected in ("Answers to each set's questions", "cite a summary", "retrieve p95 ms", "ask p95 ms",
                     "Off-topic questions", "== Targets (issue 12) ==", "patent answers citing a summary",
                     "answerable questions refused", "off-topic questions refused"):
        assert expected in out
    figures = json.loads(report.read_text())
    assert list(figures["answerable"]) == ["quality", "patents", "reviews"]
    assert [figures["answerable"][n]["questions"] for n in ("quality", "patents", "reviews")] == [2, 1, 2]
    assert list(figures["off_topic"]) == ["quality", "reviews"]  # the patent question is generic: never off topic
    assert [figures["off_topic"][n]["questions"] for n in ("quality", "reviews")] == [2, 2]
    for tally in figures["answerable"].values():
        assert all(0.0 <= r <= 1.0 for r in tally["per_question_recall"])
        assert tally["retrieve"]["p95_ms"] > 0 and tally["ask"]["p95_ms"] > 0
    assert [t["name"] for t in figures["targets"]] == [
        "patent answers citing a summary", "answerable questions refused", "off-topic questions refused"]
    assert all(isinstance(t["pass"], bool) for t in figures["targets"])
    # The unfound-words note: before and after the meaning check, per half, on answerable and mixed questions.
    assert "The unfound-words note" in out and "module constants: closeness" in out
    mixed = figures["mixed"]
    assert [mixed[answers.OTHER_SET][n]["questions"] for n in ("quality", "patents", "reviews")] == [2, 1, 2]
    assert mixed[answers.SAME_SET] == {}  # one document per set: no other document to mix with
    note = figures["note"]
    assert set(note["shares"]) == {FIT, HELD} and set(note["shares"][FIT]) == {"before", "after"}
    assert len(note["fitted"]) == 2 and note["constants"] == [answers.UNFOUND_CLOSENESS, answers.UNFOUND_GAIN]
    assert all(q["half"] == FIT for q in note["questions"])  # one document per set: the fit half only


# -- the data ------------------------------------------------------------------


def test_question_parsing_handles_every_option_layout() -> None:
    from bench.data import parse_question

    for instruction in ("Why?\n\n (A) one \n (B) two\n (C) three\n (D) four",
                        "Why?\n\n(A) one\n(B) two\n(C) three\n(D) four",
                        "Why?\n(A) one\n(B) two\n(C) three\n(D) four"):
        question = parse_question(instruction, "(C) three")
        assert question.text == "Why?" and question.options == ("one", "two", "three", "four")
        assert question.answer == 2 and question.letter == "C"
        assert question.gold == "three"  # the right option's text, without its label


def test_free_questions_keep_their_output_as_gold() -> None:
    question = read_question("You are a patent examiner. Please write a summary of this patent.", " A paw cleaner. ")
    assert question.text.startswith("You are a patent examiner") and question.gold == "A paw cleaner."
    assert question.options == () and question.letter == ""


def test_repeated_lines_are_dropped_once_and_listed(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    records = [{"input": f"Text {n}.", "instructions": ["Q?"], "outputs": [f"A {n}"]} for n in (0, 1, 0, 2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    data = load_set("toy", path)
    assert [a.index for a in data.articles] == [0, 1, 3] and data.duplicates == (2,)
    assert [a.dataset for a in data.articles] == ["set"] * 3
    assert [a.index for a in load_set("toy", path, limit=2).articles] == [0, 1]


# -- the measure ---------------------------------------------------------------


def test_content_words_fold_case_and_drop_stop_words_and_single_characters() -> None:
    assert content_words("The Cat sat on a MAT, and 7 x 42 dogs!") == {"cat", "sat", "mat", "42", "dogs"}
    assert content_words("Hyphen-ated e-mail's") == {"hyphen", "ated", "mail"}  # [a-z0-9]+ splits at - and '


def test_word_recall_counts_unique_gold_content_words() -> None:
    assert word_recall("The cat sat.", "the CAT, as it SAT, was happy") == 1.0  # fully contained
    assert word_recall("cat cat dog", "a cat") == 0.5  # a set: the repeated "cat" counts once
    assert word_recall("the red fox", "the and a of red") == 0.5  # stop words neither needed nor enough
    assert word_recall("a b c fox", "fox") == 1.0  # one-letter tokens are not content words
    assert word_recall("Fox", "") == 0.0
    assert math.isnan(word_recall("It is not the one", "anything"))  # no content word: cannot be scored
    assert word_recall(content_words("red fox"), content_words("red")) == 0.5  # precomputed sets


def test_oracle_recall_covers_gold_greedily_within_the_budget() -> None:
    gold = content_words("alpha beta gamma delta")
    pool = [Sentence(10, content_words("alpha beta")), Sentence(10, content_words("gamma")),
            Sentence(30, content_words("alpha beta gamma delta")), Sentence(5, content_words("nothing here"))]
    assert oracle_recall(gold, pool, 20) == (0.75, 20)  # the two short sentences
    assert oracle_recall(gold, pool, 30) == (1.0, 30)  # the long one alone beats greedy's 3 words
    assert oracle_recall(gold, pool, 5) == (0.0, 0)
    assert math.isnan(oracle_recall(frozenset(), pool, 50)[0])


def test_rrf_fuses_ranks_not_scores() -> None:
    import numpy as np

    fused = rrf_scores(np.array([9.0, 5.0, 1.0]), np.array([0.1, 0.3, 0.2]))
    assert fused[0] == pytest.approx(1 / 61 + 1 / 63) and fused[1] == pytest.approx(1 / 62 + 1 / 61)
    assert fused.argmax() == 1


def test_intervals_bracket_the_mean_and_pair_questions() -> None:
    constant = mean_interval([0.4] * 10)
    assert (constant.mean, constant.low, constant.high, constant.n) == pytest.approx((0.4, 0.4, 0.4, 10))
    spread = mean_interval([0.0, 1.0] * 20)
    assert spread.low < 0.5 < spread.high
    paired = paired_difference([0.5, 0.6, 0.7], [0.4, 0.6, 0.8])
    assert paired.difference.mean == pytest.approx(0.0) and (paired.a_ahead, paired.b_ahead) == (1, 1)
    assert math.isnan(mean_interval([]).mean)


def test_distinguishing_words_are_those_no_wrong_option_uses() -> None:
    right = "He sold the red ship to Korvin"
    options = (right, "He bought a red car", "Korvin sank the ship")
    assert distinguishing_words(right, options) == {"sold"}
    assert distinguishing_words("Paris in 1900", ()) == content_words("Paris in 1900")
