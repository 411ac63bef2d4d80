"""Tests of raptor_engine.tokens with the real packaged tokenizer (offline)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from raptor_engine.errors import ProviderError
from raptor_engine.protocols import TokenCounter
from raptor_engine.tokens import TOKENIZER_FILENAME, HuggingFaceTokenCounter, default_model_path


@pytest.fixture(scope="module")
def counter() -> HuggingFaceTokenCounter:
    return HuggingFaceTokenCounter.from_model_dir(default_model_path())


def test_default_model_path_is_a_model_directory() -> None:
    path = default_model_path()
    assert isinstance(path, Path)
    assert (path / TOKENIZER_FILENAME).is_file()


def test_implements_the_protocol(counter: HuggingFaceTokenCounter) -> None:
    assert isinstance(counter, TokenCounter)


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
