"""Tests of raptor_engine.chunking with the real packaged tokenizer (offline)."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence

import pytest

from raptor_engine.chunking import chunk_text, split_sentences
from raptor_engine.tokens import (
    MAX_CHARS_PER_TOKEN,
    UNKNOWN_CHARS_PER_TOKEN,
    HuggingFaceTokenCounter,
    default_model_path,
)
from raptor_engine.types import Chunk
from tests.conftest import quality_articles

_WHITESPACE = re.compile(r"\s+")


DEV_ARTICLES = 15  # in ../shared/data/quality-dev.jsonl


@pytest.fixture(scope="module")
def counter() -> HuggingFaceTokenCounter:
    return HuggingFaceTokenCounter.from_model_dir(default_model_path())


class RecordingCounter:
    """Wraps a counter and records how it is called."""

    def __init__(self, inner: HuggingFaceTokenCounter) -> None:
        self.inner = inner
        self.count_calls = 0
        self.count_many_calls = 0

    def count(self, text: str) -> int:
        self.count_calls += 1
        return self.inner.count(text)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        self.count_many_calls += 1
        return self.inner.count_many(texts)


class LengthCounter:
    """Counts characters: not additive across whitespace, unlike WordPiece."""

    def __init__(self, per_char: int = 1) -> None:
        self.per_char = per_char

    def count(self, text: str) -> int:
        return len(text) * self.per_char

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(text) for text in texts]


def visible(text: str) -> str:
    return _WHITESPACE.sub("", text)


def assert_invariants(text: str, chunks: list[Chunk], counter, max_tokens: int, source_id: str = "src") -> None:
    """The contract of chunk_text, except the greedy packing."""
    assert [chunk.ordinal for chunk in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert chunk.source_id == source_id
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.text and chunk.text == chunk.text.strip()
    for before, after in zip(chunks, chunks[1:]):
        assert before.end <= after.start
        assert not text[before.end : after.start].strip()  # nothing visible dropped between chunks
    if chunks:
        assert not text[: chunks[0].start].strip() and not text[chunks[-1].end :].strip()
    assert visible("".join(chunk.text for chunk in chunks)) == visible(text)
    assert [chunk.tokens for chunk in chunks] == counter.count_many([chunk.text for chunk in chunks])
    assert all(chunk.tokens <= max_tokens for chunk in chunks)


def chunk(text: str, counter, max_tokens: int = 100) -> list[Chunk]:
    chunks = chunk_text(text, "src", counter, max_tokens)
    assert_invariants(text, chunks, counter, max_tokens)
    return chunks


def sentences(text: str) -> list[str]:
    return [text[start:end] for start, end in split_sentences(text)]


# --- split_sentences -------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", " \n\t \n "])
def test_no_sentences_in_blank_text(text: str) -> None:
    assert split_sentences(text) == []


def test_terminal_punctuation() -> None:
    assert sentences("One. Two! Three? Four… Five") == ["One.", "Two!", "Three?", "Four…", "Five"]


def test_abbreviations_and_initials_do_not_end_sentences() -> None:
    text = (
        "Mr. Smith met Dr. Jones and Mrs. Lee at St. Mary's, i.e. the old church, vs. the school etc. "
        "near the U.S. embassy, e.g. on foot. Larry M. Harris wrote it."
    )
    assert sentences(text) == [
        "Mr. Smith met Dr. Jones and Mrs. Lee at St. Mary's, i.e. the old church, vs. the school etc. "
        "near the U.S. embassy, e.g. on foot.",
        "Larry M. Harris wrote it.",
    ]


def test_decimals_do_not_end_sentences() -> None:
    assert sentences("Pi is 3.14 and e is 2.718. It costs $1.50 now.") == [
        "Pi is 3.14 and e is 2.718.",
        "It costs $1.50 now.",
    ]


def test_closing_quotes_and_brackets_stay_with_their_sentence() -> None:
    text = 'He said "Go home." Then he left. (It was late.) She asked \'why?\' Nobody knew.'
    assert sentences(text) == ['He said "Go home."', "Then he left.", "(It was late.)", "She asked 'why?'", "Nobody knew."]


def test_lower_case_after_exclamation_or_ellipsis_continues() -> None:
    assert sentences('"Stop!" he cried. A word ... and more. Done.') == [
        '"Stop!" he cried.',
        "A word ... and more.",
        "Done.",
    ]


def test_single_newline_is_a_soft_wrap() -> None:
    text = "This line is hard\n wrapped at seventy\n characters. Next one."
    assert sentences(text) == ["This line is hard\n wrapped at seventy\n characters.", "Next one."]


def test_blank_lines_end_paragraphs() -> None:
    assert sentences("A title\n\nBody text\n   \n  Another body") == ["A title", "Body text", "Another body"]


def test_list_items_and_headings_are_sentences() -> None:
    text = "# Setup\nInstall it\n- step one\n* step two\n1. first\n2) second\nwrapped\n## Next\nEnd"
    assert sentences(text) == [
        "# Setup",
        "Install it",
        "- step one",
        "* step two",
        "1. first",
        "2) second\nwrapped",
        "## Next",
        "End",
    ]


def test_year_at_line_start_still_ends_sentence() -> None:
    assert sentences("It happened in\n 1950. Then it stopped.") == ["It happened in\n 1950.", "Then it stopped."]


def test_cjk_terminals() -> None:
    assert sentences("日本語です。二番目の文！三番目？終わり") == ["日本語です。", "二番目の文！", "三番目？", "終わり"]


def test_sentence_spans_are_trimmed_and_cover_the_text() -> None:
    text = "  One.   Two \n\n three.\n"
    spans = split_sentences(text)
    assert [text[start:end] for start, end in spans] == ["One.", "Two", "three."]
    assert all(end > start for start, end in spans)
    assert all(before[1] <= after[0] for before, after in zip(spans, spans[1:]))


# --- chunk_text: small cases -----------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t  \n"])
def test_blank_text_gives_no_chunks(text: str, counter: HuggingFaceTokenCounter) -> None:
    assert chunk_text(text, "src", counter) == []


def test_invalid_max_tokens(counter: HuggingFaceTokenCounter) -> None:
    with pytest.raises(ValueError):
        chunk_text("Some text.", "src", counter, max_tokens=0)


def test_one_short_sentence(counter: HuggingFaceTokenCounter) -> None:
    text = "  The cat sat on the mat.  \n"
    (only,) = chunk(text, counter)
    assert (only.text, only.start, only.end, only.tokens, only.source_id) == ("The cat sat on the mat.", 2, 25, 7, "src")


def test_one_word(counter: HuggingFaceTokenCounter) -> None:
    (only,) = chunk("hello", counter)
    assert (only.text, only.tokens) == ("hello", 1)


def test_text_of_exactly_max_tokens_is_one_chunk(counter: HuggingFaceTokenCounter) -> None:
    text = "This is a sentence. " * 20  # 5 tokens each
    assert counter.count(text) == 100
    (only,) = chunk(text, counter, 100)
    assert only.tokens == 100


def test_one_token_more_makes_two_chunks(counter: HuggingFaceTokenCounter) -> None:
    chunks = chunk("This is a sentence. " * 20 + "Extra.", counter, 100)
    assert [c.tokens for c in chunks] == [100, 2]


def test_sentences_are_packed_greedily_and_kept_whole(counter: HuggingFaceTokenCounter) -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(40))  # 6 tokens each
    chunks = chunk(text, counter, 20)
    assert [c.tokens for c in chunks] == [18] * 13 + [6]
    assert all(c.text.endswith("here.") for c in chunks)


def test_huge_single_word_is_cut_at_characters(counter: HuggingFaceTokenCounter) -> None:
    url = "https://example.com/" + "".join(f"segment{i}/part?x={i}&" for i in range(40))
    assert counter.count(url) > 300
    chunks = chunk(f"See {url} now.", counter, 100)
    assert chunks[0].text == "See" and chunks[-1].text == "now."  # the word's neighbours stay apart
    pieces = chunks[1:-1]
    assert len(pieces) >= 4
    assert "".join(c.text for c in pieces) == url  # adjacent pieces, nothing inserted


def test_long_word_the_tokenizer_sees_as_one_token_is_cut(counter: HuggingFaceTokenCounter) -> None:
    word = "x" * 500  # WordPiece alone maps words over 100 characters to a single [UNK]
    chunks = chunk(word, counter, 10)
    assert len(chunks) >= 500 // (10 * UNKNOWN_CHARS_PER_TOKEN)
    assert "".join(c.text for c in chunks) == word
    assert all(len(c.text) <= 10 * UNKNOWN_CHARS_PER_TOKEN for c in chunks)


def test_hex_blob_is_cut_into_chunks_bounded_in_characters(counter: HuggingFaceTokenCounter) -> None:
    blob = random.Random(1).randbytes(100_000).hex()  # 200,000 characters without a space
    text = f"The dump follows. {blob} That was the dump."
    chunks = chunk(text, counter, 100)
    assert chunks[0].text == "The dump follows." and chunks[-1].text == "That was the dump."
    pieces = chunks[1:-1]
    assert "".join(c.text for c in pieces) == blob
    assert max(len(c.text) for c in pieces) <= 100 * UNKNOWN_CHARS_PER_TOKEN
    assert len(pieces) >= len(blob) // (100 * UNKNOWN_CHARS_PER_TOKEN)


@pytest.mark.parametrize("filler", [" ", "\u0301", "\u200b", "\x00"], ids=["spaces", "combining", "zero-width", "nul"])
def test_characters_the_tokenizer_drops_still_bound_a_chunk(filler: str, counter: HuggingFaceTokenCounter) -> None:
    # WordPiece drops these (0 tokens): 100,000 of them must not fit in one 100-token chunk.
    text = "alpha" + filler * 100_000 + "beta."
    chunks = chunk(text, counter, 100)
    assert all(len(c.text) <= 100 * MAX_CHARS_PER_TOKEN for c in chunks)


def test_long_sentence_is_cut_at_commas(counter: HuggingFaceTokenCounter) -> None:
    text = "Intro. " + ", ".join(f"clause number {i} goes here" for i in range(60)) + ". Outro."
    chunks = chunk(text, counter, 20)
    assert chunks[0].text == "Intro."  # pieces of the long sentence do not join its neighbours
    assert chunks[-1].text == "Outro."
    middle = chunks[1:-1]
    assert all(c.text.endswith(",") for c in middle[:-1])
    assert middle[-1].text.endswith("goes here.")
    # Greedy: the next clause would not have fitted.
    assert all(c.tokens + 6 > 20 for c in middle[:-1])


def test_long_sentence_is_cut_at_dashes_and_semicolons(counter: HuggingFaceTokenCounter) -> None:
    text = " — ".join(f"part {i}; with more words here" for i in range(30))
    chunks = chunk(text, counter, 15)
    assert len(chunks) > 1
    assert all(c.text.endswith(("—", ";")) for c in chunks[:-1])


def test_long_sentence_without_punctuation_is_cut_at_words(counter: HuggingFaceTokenCounter) -> None:
    chunks = chunk("word " * 250, counter, 100)
    assert [c.tokens for c in chunks] == [100, 100, 50]


def test_newlines_and_markdown_lists_are_kept(counter: HuggingFaceTokenCounter) -> None:
    text = (
        "# Setup\n\nInstall it:\n\n- step one;\n- step two.\n\n1. First\n2. Second\n\n"
        "Some text\nwrapped here, with `code` and *emphasis*!"
    )
    (only,) = chunk(text, counter, 200)
    assert only.text == text
    chunks = chunk(text, counter, 8)
    assert "- step one;\n- step two." in [c.text for c in chunks]


def test_cjk_without_spaces_respects_the_limit(counter: HuggingFaceTokenCounter) -> None:
    text = "这是一个很长的中文句子没有任何标点符号" * 50
    chunks = chunk(text, counter, 100)
    assert len(chunks) >= 10
    assert "".join(c.text for c in chunks) == text


def test_japanese_sentences(counter: HuggingFaceTokenCounter) -> None:
    text = "日本語の文章を書きます。" * 60
    chunks = chunk(text, counter, 50)
    assert all(c.text.endswith("。") for c in chunks)


def test_arabic(counter: HuggingFaceTokenCounter) -> None:
    text = "مرحبا بالعالم. هذه جملة أخرى؟ " * 40 + "كلمة " * 200
    chunk(text, counter, 30)


def test_non_additive_counter_is_repaired() -> None:
    # Summed parts undercount the joined text (the space between), so packing
    # by sums overflows; the final exact count must catch and re-pack it.
    counter = LengthCounter()
    text = "abc de fg. " * 30
    chunks = chunk(text, counter, 20)
    assert [c.tokens for c in chunks] == [10] * 30


def test_single_character_over_the_limit_is_its_own_chunk() -> None:
    chunks = chunk_text("ab c", "src", LengthCounter(per_char=2), 1)
    assert [(c.text, c.tokens) for c in chunks] == [("a", 2), ("b", 2), ("c", 2)]


def test_random_texts_keep_the_invariants(counter: HuggingFaceTokenCounter) -> None:
    alphabet = [*"abcdefghij ABC. , ; : ! ? … — - \n\n \n- 1. # \"') 3.14 日本語。 ภาษาไทย مرحبا 😀 https://x.y/z?a=b&c "]
    alphabet += ["word"] * 5 + [" "] * 10 + ["x" * 120, "Mr.", "e.g.", "U.S."]
    rng = random.Random(0)
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        max_tokens = rng.choice([1, 2, 3, 5, 10, 30, 100])
        chunk(text, counter, max_tokens)


# --- chunk_text on the QuALITY articles ------------------------------------


@pytest.mark.parametrize("index", range(DEV_ARTICLES))
def test_quality_article_invariants(index: int, counter: HuggingFaceTokenCounter) -> None:
    text = quality_articles()[index]
    recorder = RecordingCounter(counter)
    chunks = chunk_text(text, "src", recorder, 100)
    assert_invariants(text, chunks, counter, 100)
    # Efficient: batched counts only, no count per growth step.
    assert recorder.count_calls == 0 and recorder.count_many_calls <= 3

    spans = split_sentences(text)
    assert visible("".join(text[start:end] for start, end in spans)) == visible(text)
    if max(counter.count_many([text[start:end] for start, end in spans])) > 100:
        return  # whole-sentence checks below hold only without over-long sentences
    starts = {start for start, _ in spans}
    ends = {end for _, end in spans}
    assert all(c.start in starts and c.end in ends for c in chunks)
    # Greedy: adding the next sentence would have exceeded the limit.
    next_sentence_end = {start: end for start, end in spans}
    grown = [text[before.start : next_sentence_end[after.start]] for before, after in zip(chunks, chunks[1:])]
    assert all(tokens > 100 for tokens in counter.count_many(grown))


def test_quality_speed(counter: HuggingFaceTokenCounter) -> None:
    articles = quality_articles()
    chunk_text(articles[0], "src", counter)  # warm up
    began = time.perf_counter()
    for text in articles:
        chunk_text(text, "src", counter)
    elapsed = time.perf_counter() - began
    assert elapsed < 3.0, f"chunking the QuALITY articles took {elapsed:.2f} s"  # measured about 0.3 s
