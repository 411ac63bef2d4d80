"""Whether a text quotes what a new version of a source no longer says.

Contract (pure; the engine asks it when a source is replaced by a new version, see
``Engine.replace_source``): :class:`RemovedText` holds the runs of :data:`QUOTE_WORDS` words
of the old version that the new version does not have. A text *quotes* the removed text
when it holds one of those runs. Words are compared lower-cased, punctuation aside, so an
answer quoting an excerpt word for word is caught whatever its formatting; an old version
shorter than a run counts whole. Wording that only changed its spacing, case or punctuation
removes nothing.
"""

from __future__ import annotations

import re
from functools import cached_property

QUOTE_WORDS = 6  # a run of this many words of the old version, found in a text, is a quote of it

_WORD = re.compile(r"\w+")


class RemovedText:
    """The text an old version of a source had and its new version has not; see the module docstring."""

    def __init__(self, old: str, new: str) -> None:
        self._old = words_of(old)
        self._new = words_of(new)

    @cached_property
    def _runs(self) -> frozenset[tuple[str, ...]]:
        """The old version's word runs that the new version lacks (computed once, when first asked)."""
        size = min(QUOTE_WORDS, len(self._old))
        if size == 0:
            return frozenset()
        return runs_of(self._old, size) - runs_of(self._new, size)

    @property
    def nothing(self) -> bool:
        """True when the new version keeps every word run of the old one (it only added text)."""
        return not self._runs

    def quoted_in(self, text: str) -> bool:
        """True when ``text`` holds a run of words the new version no longer has."""
        runs = self._runs
        if not runs:
            return False
        size = len(next(iter(runs)))
        return not runs.isdisjoint(runs_of(words_of(text), size))


def words_of(text: str) -> tuple[str, ...]:
    """The words of ``text``, lower-cased, without punctuation."""
    return tuple(word.lower() for word in _WORD.findall(text))


def runs_of(words: tuple[str, ...], size: int) -> frozenset[tuple[str, ...]]:
    """Every run of ``size`` consecutive words (the whole text when it is shorter)."""
    if len(words) <= size:
        return frozenset({words}) if words else frozenset()
    return frozenset(words[i:i + size] for i in range(len(words) - size + 1))
