"""Splitting a source's text into chunks of at most ``max_tokens`` tokens.

Chunks are spans of the source text (``chunk.text == text[start:end]``), so
punctuation, newlines and markdown survive exactly; the RAPTOR reference
implementation re-joins split pieces with spaces and loses them.

How a text is cut, coarsest first:

1. **Sentences** (:func:`split_sentences`), packed greedily: a chunk takes
   consecutive whole sentences until the next one would exceed the limit.
2. A sentence longer than the limit is cut at **clauses** (after ``, ; :``
   and at dashes) and its clauses are packed greedily.
3. A clause still too long is cut at **words** (whitespace).
4. A word still too long (a long URL, CJK or Thai text without spaces, a hex
   dump or base64 blob) is cut at **characters** into pieces within the
   limit. So, unlike a rule that keeps such a word whole, every chunk respects
   the limit; the only exception is a single character that alone counts more
   than ``max_tokens`` (not possible with a WordPiece tokenizer and
   ``max_tokens >= 1``).

Every limit here is in the counter's tokens, so a chunk is bounded in
characters as far as the counter is: WordPiece alone reads a word of over 100
characters as one token, and a 1 MB hex dump would be one "100-token" chunk.
:class:`~raptor_engine.tokens.HuggingFaceTokenCounter` charges such runs by
their length, so a chunk of ``max_tokens`` holds at most ``max_tokens *
MAX_CHARS_PER_TOKEN`` characters (``UNKNOWN_CHARS_PER_TOKEN`` per token for an
unbroken run), and the rules above cut the run like any other long word.

The pieces of a unit cut at a finer level are packed among themselves and
never share a chunk with the unit's neighbours: a chunk is either a run of
whole sentences or a run of pieces of one sentence (likewise for clauses).

Cost: one ``count_many`` over all sentences, one per unit too long for the
limit (rare), and one over the packed multi-piece chunks to get their exact
counts. The packing adds counts of parts; tokenizers that are not additive
across the cut (possible at character cuts) are caught by that final count and
the chunk is re-packed piece by piece.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from raptor_engine.protocols import TokenCounter
from raptor_engine.types import Chunk

#: ``(start, end)`` indices into the text, end exclusive.
Span = tuple[int, int]
#: A span and its token count.
_Piece = tuple[int, int, int]

# --- sentences -------------------------------------------------------------

_BOUNDARY = re.compile(
    r"""
    (?P<para>\n[^\S\n]*\n)                                   # blank line: paragraph break
  | (?P<item>\n(?=[^\S\n]*(?:[-*+•]|\d{1,3}[.)])[^\S\n]))    # newline before a list item
  | (?P<heading>^[^\S\n]*\#{1,6}[^\S\n][^\n]*)               # a markdown heading: a sentence of its own
  | (?P<term>[.!?…؟]+)(?P<close>["'”’)\]»]*)(?=\s)           # terminal punctuation, closers, then space
  | (?P<cjk>[。！？]+[」』）】”’"]*)                          # CJK terminals need no space after them
    """,
    re.VERBOSE | re.MULTILINE,
)

# Words that end in "." without ending the sentence. A short list: a missed
# abbreviation only moves a chunk boundary, it never loses text.
_ABBREVIATIONS = frozenset(
    "mr mrs ms mx dr prof st sr jr vs etc cf al approx fig capt col gen gov lt sgt sen rev ph.d".split()
)
# Initials ("Larry M. Harris") and dotted abbreviations ("e.g", "i.e", "U.S").
_INITIALS = re.compile(r"[A-Z]|(?:[A-Za-z]\.)+[A-Za-z]")
# The word that ends just before a terminal period, without opening punctuation.
_WORD_BEFORE = re.compile(r"[^\s\"'“‘(\[«]*\Z")
_NEXT_VISIBLE = re.compile(r"\s*(\S)")


def split_sentences(text: str) -> list[Span]:
    """Spans of the sentences of ``text``, in order.

    Contract: spans are non-empty, increasing and non-overlapping, have no
    leading or trailing whitespace, and together cover every non-whitespace
    character of ``text``. Empty or whitespace-only text gives ``[]``.

    A sentence ends after ``. ! ? …`` (optionally followed by closing quotes
    or brackets) followed by whitespace, after ``。！？``, at a blank line,
    before a line that starts a list item (``-``, ``*``, ``+``, ``•``, ``1.``,
    ``1)``), and around a markdown heading line. Any other single newline is a
    soft wrap inside the sentence. A period does not end a sentence after a
    common abbreviation (Mr., e.g., U.S., ...) or an initial; ``!``, ``?`` and
    ellipses do not end it when the next word starts in lower case (``"Stop!"
    he cried``, ``wait ... what``). Decimals (3.14) never match since no
    whitespace follows their point.
    """
    cuts: list[int] = []
    for match in _BOUNDARY.finditer(text):
        if match["term"] is not None:
            if _ends_sentence(text, match):
                cuts.append(match.end())
        elif match["heading"] is not None:
            cuts.extend((match.start(), match.end()))
        elif match["cjk"] is not None:
            cuts.append(match.end())
        else:  # a paragraph break or a list item: cut anywhere in the whitespace
            cuts.append(match.start())
    return _pieces_between(text, 0, len(text), cuts)


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (see :func:`split_sentences`), each with its runs of
    whitespace folded to one space: hard-wrapped lines read as one sentence."""
    return [" ".join(text[start:end].split()) for start, end in split_sentences(text)]


def _ends_sentence(text: str, match: re.Match[str]) -> bool:
    """Whether terminal punctuation ``match`` (group ``term``) really ends a sentence."""
    term = match.group("term")
    if term == ".":
        return not _is_abbreviation(text, match.start("term"))
    following = _NEXT_VISIBLE.match(text, match.end())
    # "!", "?" and "..." run on when the sentence goes on in lower case.
    return following is None or not following.group(1).islower()


def _is_abbreviation(text: str, period: int) -> bool:
    """Whether the word before the period at index ``period`` is an abbreviation or initial."""
    window = text[max(0, period - 24) : period]  # abbreviations are short; bound the regex work
    word = _WORD_BEFORE.search(window)
    token = word.group(0) if word else ""
    if token.isdigit() and len(token) <= 3 and _starts_line(text, period - len(token)):
        return True  # the "1." of a numbered list item, not the end of "... in 1950."
    return token.lower() in _ABBREVIATIONS or _INITIALS.fullmatch(token) is not None


def _starts_line(text: str, index: int) -> bool:
    """Whether only spaces (up to 16 of them) stand between the start of its line and ``index``."""
    # A bounded look-back keeps this O(1) on texts without newlines.
    before = text[max(0, index - 16) : index].rstrip(" \t")
    return before.endswith(("\n", "\r")) or (not before and index <= 16)


# --- finer cuts ------------------------------------------------------------

# Cut after a clause separator: ", ; :" followed by space (so 3,000 and 12:30
# stay whole), any em/en dash, a spaced hyphen or "--", and CJK separators.
_CLAUSE_CUT = re.compile(r"[,;:](?=\s)|[—–]|(?<=\s)-(?=\s)|--|[，、；：]")
_WORD = re.compile(r"\S+")


def _clauses(text: str, start: int, end: int) -> list[Span]:
    """Trimmed spans of the clauses of ``text[start:end]``."""
    cuts = [match.end() for match in _CLAUSE_CUT.finditer(text, start, end)]
    return _pieces_between(text, start, end, cuts)


def _words(text: str, start: int, end: int) -> list[Span]:
    """Spans of the whitespace-separated words of ``text[start:end]``."""
    return [match.span() for match in _WORD.finditer(text, start, end)]


def _character_parts(start: int, end: int, tokens: int, max_tokens: int) -> list[Span]:
    """At least two spans of about equal length covering ``[start, end)`` (``end - start >= 2``).

    The number of parts aims a little under the limit, assuming tokens spread
    evenly over characters; parts still too long are cut again by the caller.
    """
    length = end - start
    parts = min(length, max(2, math.ceil(tokens * 1.1 / max_tokens)))
    bounds = [start + (length * i) // parts for i in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _pieces_between(text: str, start: int, end: int, cuts: list[int]) -> list[Span]:
    """Split ``[start, end)`` at ``cuts`` (sorted), trim each piece, drop the blank ones."""
    spans: list[Span] = []
    previous = start
    for cut in [*cuts, end]:
        if cut <= previous:
            continue
        piece = text[previous:cut]
        stripped = piece.strip()
        if stripped:
            left = previous + (len(piece) - len(piece.lstrip()))
            spans.append((left, left + len(stripped)))
        previous = cut
    return spans


# Finer splitters tried in order on a unit over the limit; characters come last.
_SPLITTERS: tuple[Callable[[str, int, int], list[Span]], ...] = (_clauses, _words)
_CHARACTERS = len(_SPLITTERS) + 1  # level of character parts; sentences are level 0


# --- packing ---------------------------------------------------------------


def chunk_text(text: str, source_id: str, counter: TokenCounter, max_tokens: int = 100) -> list[Chunk]:
    """Cut ``text`` into chunks of at most ``max_tokens`` tokens, keeping sentences whole.

    Contract:

    - chunks are in text order with ordinals ``0..n-1``; spans increase and do
      not overlap; ``chunk.text == text[chunk.start:chunk.end]``, never empty,
      with no leading or trailing whitespace; every non-whitespace character
      of ``text`` lies in exactly one chunk;
    - ``chunk.tokens == counter.count(chunk.text) <= max_tokens`` (the only
      exception: a single character that alone counts more);
    - consecutive sentences are packed greedily; a sentence over the limit is
      cut at clauses, then words, then characters (see the module docstring).

    Empty or whitespace-only ``text`` gives ``[]``. Raises ``ValueError`` when
    ``max_tokens < 1``.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, not {max_tokens}")
    sentences = split_sentences(text)
    if not sentences:
        return []
    groups = _fit(text, sentences, 0, counter, max_tokens)
    pieces = _exact_chunks(text, groups, counter, max_tokens)
    return [
        Chunk(source_id=source_id, ordinal=i, text=text[start:end], start=start, end=end, tokens=tokens)
        for i, (start, end, tokens) in enumerate(pieces)
    ]


def _fit(text: str, units: list[Span], level: int, counter: TokenCounter, max_tokens: int) -> list[list[_Piece]]:
    """Pack sibling ``units`` (all of one ``level``) into groups that fit, refining those that do not.

    Returns the groups in order; each group becomes one chunk, and its
    pieces' counts add up to at most ``max_tokens`` (exact counts come later).
    """
    counts = counter.count_many([text[start:end] for start, end in units])
    groups: list[list[_Piece]] = []
    run: list[_Piece] = []
    run_tokens = 0
    for (start, end), tokens in zip(units, counts):
        if tokens > max_tokens and end - start > 1:
            # Too long: its pieces get chunks of their own, after what came before.
            if run:
                groups.append(run)
                run, run_tokens = [], 0
            groups.extend(_refine(text, start, end, tokens, level, counter, max_tokens))
            continue
        if run and run_tokens + tokens > max_tokens:
            groups.append(run)
            run, run_tokens = [], 0
        run.append((start, end, tokens))
        run_tokens += tokens
    if run:
        groups.append(run)
    return groups


def _refine(
    text: str, start: int, end: int, tokens: int, level: int, counter: TokenCounter, max_tokens: int
) -> list[list[_Piece]]:
    """Cut a unit over the limit at the first finer level that splits it, and pack its parts."""
    for finer in range(level + 1, _CHARACTERS):
        parts = _SPLITTERS[finer - 1](text, start, end)
        if len(parts) > 1:
            return _fit(text, parts, finer, counter, max_tokens)
    # Character parts that are still too long are cut again at this level.
    return _fit(text, _character_parts(start, end, tokens, max_tokens), _CHARACTERS, counter, max_tokens)


def _exact_chunks(
    text: str, groups: list[list[_Piece]], counter: TokenCounter, max_tokens: int
) -> list[_Piece]:
    """Turn groups into chunk spans with exact token counts, re-packing any that overflow.

    A one-piece group already has its exact count. Multi-piece groups are
    counted as whole spans in one batch: summed counts can differ from the
    count of the joined text when a tokenizer is not additive at a cut.
    """
    multi = [group for group in groups if len(group) > 1]
    counts = iter(counter.count_many([text[group[0][0] : group[-1][1]] for group in multi]))
    chunks: list[_Piece] = []
    for group in groups:
        if len(group) == 1:
            chunks.append(group[0])
            continue
        tokens = next(counts)
        if tokens <= max_tokens:
            chunks.append((group[0][0], group[-1][1], tokens))
        else:
            chunks.extend(_repack(text, group, counter, max_tokens))
    return chunks


def _repack(text: str, group: list[_Piece], counter: TokenCounter, max_tokens: int) -> list[_Piece]:
    """Pack ``group``'s pieces greedily, counting each candidate span (the rare slow path)."""
    chunks: list[_Piece] = []
    start, end, tokens = group[0]
    for piece_start, piece_end, piece_tokens in group[1:]:
        joined = counter.count(text[start:piece_end])
        if joined <= max_tokens:
            end, tokens = piece_end, joined
        else:
            chunks.append((start, end, tokens))
            start, end, tokens = piece_start, piece_end, piece_tokens
    chunks.append((start, end, tokens))
    return chunks
