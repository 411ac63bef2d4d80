"""Tests of raptor_engine.tokens with the real packaged tokenizer (offline)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from raptor_engine.errors import ProviderError
from raptor_engine.tokens import (
    MAX_CHARS_PER_TOKEN,
    TOKENIZER_FILENAME,
    UNKNOWN_CHARS_PER_TOKEN,
    HuggingFaceTokenCounter,
    default_model_path,
    token_floor,
)


@pytest.fixture(scope="module")
def counter() -> HuggingFaceTokenCounter:
    return HuggingFaceTokenCounter.from_model_dir(default_model_path())


def test_default_model_path_is_a_model_directory() -> None:
    assert (default_model_path() / TOKENIZER_FILENAME).is_file()


def test_short_text_is_not_padded(counter: HuggingFaceTokenCounter) -> None:
    # Padded to 128 ids, as the packaged tokenizer.json asks, this would count 128.
    assert counter.count("three short words") == 3


def test_long_text_is_not_truncated(counter: HuggingFaceTokenCounter) -> None:
    assert counter.count("word " * 300) == 300


def test_special_tokens_are_not_counted(counter: HuggingFaceTokenCounter) -> None:
    assert counter.count("hello") == 1
    assert counter.count("") == 0


def test_count_many_agrees_with_count(counter: HuggingFaceTokenCounter) -> None:
    texts = ["", "hello", "Hello, world. 3.14!", "word " * 300, "日本語のテキスト", "مرحبا بالعالم"]
    assert counter.count_many(texts) == [counter.count(text) for text in texts]
    assert counter.count_many(()) == []


def test_caller_tokenizer_is_left_untouched() -> None:
    tokenizer = Tokenizer.from_file(str(default_model_path() / TOKENIZER_FILENAME))
    counter = HuggingFaceTokenCounter(tokenizer)
    assert counter.count("three short words") == 3
    assert tokenizer.padding is not None  # still the model's own configuration


def test_from_file(counter: HuggingFaceTokenCounter) -> None:
    from_file = HuggingFaceTokenCounter.from_file(default_model_path() / TOKENIZER_FILENAME)
    assert from_file.count("Hello, world.") == counter.count("Hello, world.")


def test_missing_file_raises_provider_error(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="not found"):
        HuggingFaceTokenCounter.from_file(tmp_path / "absent.json")


def test_invalid_file_raises_provider_error(tmp_path: Path) -> None:
    bad = tmp_path / TOKENIZER_FILENAME
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ProviderError, match="Could not load"):
        HuggingFaceTokenCounter.from_file(bad)
    with pytest.raises(ProviderError, match="Could not load"):
        HuggingFaceTokenCounter.from_model_dir(tmp_path)


def test_missing_model_dir_raises_provider_error(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="not found"):
        HuggingFaceTokenCounter.from_model_dir(tmp_path / "absent")


def test_model_dir_without_tokenizer_raises_provider_error(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match=TOKENIZER_FILENAME):
        HuggingFaceTokenCounter.from_model_dir(tmp_path)


# --- runs the tokenizer alone would count as (almost) nothing ----------------


def raw_count(text: str) -> int:
    """What the packaged tokenizer alone counts (no padding, no truncation, no floors)."""
    tokenizer = Tokenizer.from_file(str(default_model_path() / TOKENIZER_FILENAME))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_a_hex_blob_counts_by_its_length(counter: HuggingFaceTokenCounter) -> None:
    blob = random.Random(0).randbytes(100_000).hex()  # 200,000 characters, no space
    assert raw_count(blob) == 1  # WordPiece: one [UNK] for any word over 100 characters
    assert counter.count(blob) == len(blob) // UNKNOWN_CHARS_PER_TOKEN
    assert counter.count(f"See {blob} here.") == 3 + len(blob) // UNKNOWN_CHARS_PER_TOKEN


def test_words_with_unknown_characters_count_by_their_length(counter: HuggingFaceTokenCounter) -> None:
    thai = "ภาษาไทยเป็นภาษาที่สวยงาม"  # 24 characters, one [UNK] to WordPiece
    assert raw_count(thai) == 1
    assert counter.count(thai) == 24 // UNKNOWN_CHARS_PER_TOKEN
    assert counter.count("😀") == 1  # a short unknown word still counts one


@pytest.mark.parametrize("filler", [" ", "\n", "\u0301", "\u200b", "\x00"])
def test_what_the_tokenizer_drops_still_counts(filler: str, counter: HuggingFaceTokenCounter) -> None:
    text = "a" + filler * 10_000 + "b"
    assert raw_count(text) <= 2
    assert counter.count(text) == token_floor(text) == -(-len(text) // MAX_CHARS_PER_TOKEN)


def test_floors_leave_ordinary_text_alone(counter: HuggingFaceTokenCounter) -> None:
    texts = [
        "The cat sat on the mat.",
        "Telecommunications interdisciplinary responsibilities.",  # long vocabulary words
        "def f(x):\n        return x  # indented code",
        "naïve café, Ελληνικά, Русский язык, 日本語のテキスト, مرحبا بالعالم",
        "https://example.com/a/very/long/path?with=query&and=more#fragment",
        "word " * 300,
    ]
    assert counter.count_many(texts) == [raw_count(text) for text in texts]


def test_count_many_agrees_with_count_on_long_runs(counter: HuggingFaceTokenCounter) -> None:
    texts = ["x" * 101, "x" * 100, "ok " + "f" * 1000 + " ok", " " * 500, "ภาษาไทย", "😀" * 30]
    assert counter.count_many(texts) == [counter.count(text) for text in texts]


def test_a_count_bounds_the_characters(counter: HuggingFaceTokenCounter) -> None:
    rng = random.Random(3)
    alphabet = ["x" * 150, " " * 40, "\u0301" * 30, "ภาษาไทย", "word ", "0123456789abcdef" * 20, "\n"]
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        assert len(text) <= counter.count(text) * MAX_CHARS_PER_TOKEN


def test_token_floor() -> None:
    assert token_floor("") == 0
    assert token_floor("a") == 1
    assert token_floor("a" * MAX_CHARS_PER_TOKEN) == 1
    assert token_floor("a" * (MAX_CHARS_PER_TOKEN + 1)) == 2
