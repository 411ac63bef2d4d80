"""Checking an answer against what it cites: quotes verified, sentences supported.

Contract of :func:`check_answer`: given an :class:`~raptor_engine.types.Answer` and, for each
cited node, the texts a quote of it may come from (its :class:`Evidence`), it returns the
answer with

- each citation's quote chosen as the passage of the evidence that best supports the
  sentences citing it (most of their words in common), not the node's first words, and
  *verified*: a quote is kept only when it is, after folding whitespace, case and Unicode
  compatibility forms (NFKC), a verbatim substring of one of the node's quotable texts
  (a leaf's own text; for a summary, the excerpts beneath it). A quote that fails is
  emptied: the citation stays, shown as a link without quotation marks;
  ``unverified_quotes`` counts them;
- ``unsupported``: the answer's sentences that are claims (at least
  :data:`MIN_CLAIM_WORDS` content words) and either cite nothing while the answer cites
  something, or share less than ``threshold`` of their content words with the nodes they
  cite. Each is an exact substring of the answer's text (its citation markers included),
  so a caller can mark or drop it.

The measure is lexical and needs no model: a sentence's content words are the index's words
(``lexical.terms``, crudely stemmed), and a sentence is supported when at least ``threshold``
of them occur in the texts of the nodes it cites (the node's own text and, for a summary, the
excerpts beneath it). A paraphrase keeps most of its nouns and numbers; a statement from
nowhere keeps few. An answer that was not found, or cites nothing, is returned unchanged.

A :class:`~raptor_engine.protocols.SupportJudge` (the configured model, or a local NLI model)
may decide instead, for every claim that cites something, in one call per answer. When it
fails (``JudgeFailed``: a model that times out or returns junk), the lexical measure decides,
and the failure is logged: the answer is never held up by its check.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from raptor_engine import defaults
from raptor_engine.answering import QUOTE_CHARS, quote
from raptor_engine.chunking import split_sentences
from raptor_engine.errors import JudgeFailed
from raptor_engine.lexical import stem, terms
from raptor_engine.protocols import SupportJudge
from raptor_engine.types import Answer, Citation

log = logging.getLogger(__name__)

MIN_CLAIM_WORDS = 3  # shorter sentences ("In short:", "Yes.") state nothing to check
SUPPORT_THRESHOLD = defaults.SUPPORT_THRESHOLD  # the share of a sentence's words its cited nodes must hold
_MARKERS = re.compile(r"\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]")
_LEADING_MARKERS = re.compile(r"(?:\s*\[\s*\d+(?:\s*,\s*\d+)*\s*\])+")
_HEADING = re.compile(r"^#{1,6}\s")
_STRUCTURE = re.compile(r"#{1,6}\s|\||```")  # a heading, a table row, a fence
_FENCE = re.compile(r"^```", re.MULTILINE)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a cited node is checked against: ``own`` its text; ``beneath`` the texts of the
    excerpts under it (empty for a leaf, or when they could not be read). A leaf's quote may
    come from its own text; a summary's only from the excerpts beneath it."""

    own: str
    beneath: tuple[str, ...] = ()
    leaf: bool = True

    @property
    def quotable(self) -> tuple[str, ...]:
        return (self.own,) if self.leaf else self.beneath

    @property
    def support(self) -> tuple[str, ...]:
        return (self.own, *self.beneath)


@dataclass(frozen=True, slots=True)
class Claim:
    """One sentence of an answer: its exact text (markers included) and the numbers it cites;
    ``prose`` is False for a heading, a table row or a line of code, which state nothing alone."""

    text: str
    numbers: tuple[int, ...]
    prose: bool = True


def check_answer(
    answer: Answer, evidence: Mapping[str, Evidence], question: str = "", threshold: float = SUPPORT_THRESHOLD,
    judge: SupportJudge | None = None,
) -> Answer:
    """``answer`` with verified quotes and its unsupported sentences; see the module docstring.

    ``evidence`` maps a cited node's id to its :class:`Evidence` (a node missing from it
    quotes nothing and supports nothing). ``question`` stands in for the sentences of a
    citation no sentence names (the fallback citations of an answer that cited nothing).
    ``judge``, when given, decides whether the cited passages support each claim.
    """
    if not answer.found or not answer.citations:
        return answer
    claims = answer_claims(answer.text)
    by_number = {citation.number: citation for citation in answer.citations}
    quoted = [_quoted(citation, claims, evidence.get(citation.node_id), question) for citation in answer.citations]
    unverified = sum(1 for citation in quoted if not citation.quote)
    cites_any = any(claim.numbers for claim in claims)
    checked = [claim for claim in claims if is_claim(claim) and cites_any]
    cited = {claim.text: _cited_texts(claim, by_number, evidence) for claim in checked}
    verdicts = _judged(judge, checked, cited, threshold)
    unsupported = tuple(claim.text for claim, supported in zip(checked, verdicts) if not supported)
    return replace(answer, citations=tuple(quoted), unsupported=unsupported, unverified_quotes=unverified)


def _judged(judge: SupportJudge | None, claims: Sequence[Claim], cited: Mapping[str, Sequence[str]],
            threshold: float) -> list[bool]:
    """Whether each claim is supported by its ``cited`` texts: by ``judge`` when there is one
    and it decides, else by the lexical measure. A claim whose citations lead to no text is
    unsupported either way, and never sent to the judge."""
    def lexical() -> list[bool]:  # only when needed: stemming a summary's excerpts costs
        return [bool(cited[c.text]) and support(c.text, cited[c.text]) >= threshold for c in claims]

    asked = [(i, c) for i, c in enumerate(claims) if cited[c.text]]
    if judge is None or not asked:
        return lexical()
    try:
        verdicts = judge.supported([(_MARKERS.sub("", c.text).strip(), cited[c.text]) for _, c in asked])
    except JudgeFailed as error:
        log.warning("the support judge %s failed, the lexical measure decides: %s", judge.identity, error)
        return lexical()
    if len(verdicts) != len(asked):  # a judge breaking its contract is not trusted with any of them
        log.warning("the support judge %s gave %d verdicts for %d claims, the lexical measure decides",
                    judge.identity, len(verdicts), len(asked))
        return lexical()
    decided = [False] * len(claims)
    for (i, _), verdict in zip(asked, verdicts):
        decided[i] = verdict
    return decided


def answer_claims(text: str) -> list[Claim]:
    """The sentences of an answer's ``text``, each with the citation numbers it carries.

    Markers written after a sentence's full stop ("It rains. [1] Then...") belong to the
    sentence before them, as a reader takes them; a sentence citing nothing takes the
    numbers of the next sentence of its paragraph that cites (one marker ending a paragraph
    cites the paragraph, as the offline answerer's leading summary is cited).
    """
    spans: list[list[int]] = []
    for start, end in split_sentences(text):
        leading = _LEADING_MARKERS.match(text, start, end)
        if leading and spans:
            spans[-1][1] = leading.end()
            start = leading.end()
            while start < end and text[start].isspace():
                start += 1
        if start < end:
            spans.append([start, end])
    fences = _fenced(text)
    numbers = [_numbers(text[start:end]) for start, end in spans]
    for index in range(len(spans) - 2, -1, -1):
        same_paragraph = not _PARAGRAPH_BREAK.search(text, spans[index][1], spans[index + 1][0])
        if not numbers[index] and same_paragraph:
            numbers[index] = numbers[index + 1]
    return [Claim(text[start:end], cited, not (_STRUCTURE.match(text, start) or any(a <= start < b for a, b in fences)))
            for (start, end), cited in zip(spans, numbers)]


def _fenced(text: str) -> list[tuple[int, int]]:
    """The spans of ``text`` inside code fences (an unclosed fence runs to the end)."""
    marks = [match.start() for match in _FENCE.finditer(text)]
    marks += [len(text)] if len(marks) % 2 else []
    return list(zip(marks[::2], marks[1::2]))


def normalised(text: str) -> str:
    """``text`` as quotes are compared: NFKC, case-folded, every run of whitespace one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def is_verbatim(passage: str, texts: Sequence[str]) -> bool:
    """Whether ``passage`` (an ellipsis cut at its end ignored) is in one of ``texts``, compared
    :func:`normalised`. An empty passage is never verbatim."""
    wanted = normalised(passage.removesuffix(_ELLIPSIS))
    return bool(wanted) and any(wanted in normalised(text) for text in texts)


def support(sentence: str, texts: Sequence[str]) -> float:
    """The share of ``sentence``'s content words (stemmed) that ``texts`` use, in [0, 1];
    1 for a sentence without content words."""
    wanted = _stems(_MARKERS.sub(" ", sentence))
    if not wanted:
        return 1.0
    held: set[str] = set()
    for text in texts:
        held |= _stems(text)
    return len(wanted & held) / len(wanted)


def _quoted(citation: Citation, claims: Sequence[Claim], evidence: Evidence | None, question: str) -> Citation:
    """``citation`` quoting the passage of its evidence that supports its sentences, or
    quoting nothing when no such passage is verbatim in the evidence."""
    if evidence is None:
        return replace(citation, quote="")
    citing = [claim.text for claim in claims if citation.number in claim.numbers] or [question]
    passage = _passage(citing, evidence.quotable)
    shown = quote(passage) if passage else ""
    return replace(citation, quote=shown if is_verbatim(shown, evidence.quotable) else "")


def _passage(citing: Sequence[str], texts: Sequence[str]) -> str:
    """The passage supporting the sentences ``citing`` a node: for each, the node's sentence
    sharing most of its words; their whole span when they lie in one text within
    ``QUOTE_CHARS`` (an extractive answer's sentences, together), else the best one alone."""
    picks = [_best_sentence(_stems(sentence), texts) for sentence in citing]
    found = [pick for pick in picks if pick is not None]
    if not found:
        return ""
    best = max(found, key=lambda pick: pick[3])
    same_text = [pick for pick in found if pick[0] == best[0]]
    start, end = min(pick[1] for pick in same_text), max(pick[2] for pick in same_text)
    span = texts[best[0]][start:end]
    return span if len(" ".join(span.split())) <= QUOTE_CHARS else texts[best[0]][best[1]:best[2]]


def _best_sentence(wanted: frozenset[str], texts: Sequence[str]) -> tuple[int, int, int, int] | None:
    """(text index, start, end, words shared) of the sentence of ``texts`` sharing the most of
    ``wanted`` (the first on a tie; the first sentence when none shares any). Headings are
    never a passage."""
    best: tuple[int, int, int, int] | None = None
    for index, text in enumerate(texts):
        for start, end, stems in _sentences(text):
            shared = len(stems & wanted)
            if best is None or shared > best[3]:
                best = (index, start, end, shared)
    return best


def _cited_texts(claim: Claim, by_number: Mapping[int, Citation], evidence: Mapping[str, Evidence]) -> list[str]:
    """The texts of the nodes ``claim`` cites (a summary's own and the excerpts beneath it)."""
    return [text for number in claim.numbers if number in by_number
            for text in _support_texts(evidence.get(by_number[number].node_id))]


def _support_texts(evidence: Evidence | None) -> tuple[str, ...]:
    return evidence.support if evidence is not None else ()


def is_claim(claim: Claim) -> bool:
    """Whether ``claim`` states something to check: prose of at least :data:`MIN_CLAIM_WORDS`
    content words (markers aside)."""
    return claim.prose and len(_stems(_MARKERS.sub(" ", claim.text))) >= MIN_CLAIM_WORDS


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(part) for match in _MARKERS.finditer(text) for part in match.group(1).split(","))


# An answer citing a summary looks for each of its sentences among every excerpt beneath it,
# and for each claim in all the texts it cites: the same texts, split and stemmed once each.
# (Split and stemmed again every time, a theme's offline answer spent 2 s in its check.)
TEXT_CACHE = 2048  # texts whose stems and sentences are kept, least recently used let go


@lru_cache(maxsize=TEXT_CACHE)
def _stems(text: str) -> frozenset[str]:
    """The stems of ``text``'s content words."""
    return _stems_of(text)


@lru_cache(maxsize=TEXT_CACHE)
def _sentences(text: str) -> tuple[tuple[int, int, frozenset[str]], ...]:
    """``text``'s sentences as (start, end, stems), headings left out (never a passage)."""
    return tuple((start, end, _stems_of(text[start:end])) for start, end in split_sentences(text)
                 if not _HEADING.match(text, start))


def _stems_of(text: str) -> frozenset[str]:
    return frozenset(stem(word) for word in terms(text))
