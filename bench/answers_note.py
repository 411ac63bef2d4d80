"""The unfound-words note in ``bench.answers``: how it went on each answered question, its
shares, the thresholds fitted to it, and its table.

The note ("I found nothing about …", see ``raptor_engine/unfound.py``) should be rare on
answerable questions and name a word of the second question of a mixed one (see
``bench.answers_questions``). Each share is given *before* the meaning check (every word
the scope lists is named, the old behaviour) and *after* it, on the fit half of each set
(documents at even positions, where the check's thresholds are fitted) and on the other
half (odd positions). The thresholds that would be best on this run's fit half (the most
mixed answers naming a word of the second question with the note on at most
:data:`NOTE_RARE` of the answerable answers; see :func:`fit_note`) are printed with their
figures on both halves, beside the module's constants.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.answers_questions import OTHER_SET, SAME_SET, Asked
from bench.common import percent, table
from bench.data import FIT, HELD
from raptor_engine.lexical import terms
from raptor_engine.unfound import UNFOUND_CLOSENESS, UNFOUND_GAIN, Judged

NOTE = "I found nothing about"
# The thresholds tried when fitting the note's check (closeness, gain); inf: that test never names.
CLOSENESS_GRID = tuple(round(0.10 + 0.01 * i, 2) for i in range(51))  # 0.10 … 0.60
GAIN_GRID = (*(round(0.02 * i, 2) for i in range(21)), math.inf)  # 0.00 … 0.40, never
NOTE_RARE = 0.05  # the fit keeps the note on at most this share of answerable answers (it should be rare)


@dataclass(frozen=True, slots=True)
class Noted:
    """How the unfound-words note went on one answered question.

    ``mix`` is how the question was mixed (empty for an answerable question);
    ``judged`` the judgement of every word the scope listed as missing (empty: no
    note, before or after the meaning check); ``appended`` marks, word for word, those
    that come from a mixed question's second question only; ``shown`` whether the
    answer carries the note.
    """

    set_name: str
    half: str
    mix: str
    text: str
    judged: tuple[Judged, ...]
    appended: tuple[bool, ...]
    shown: bool

    def named_at(self, closeness: float, gain: float) -> list[bool]:
        """Per judged word, whether it would be named at these thresholds (see ``unfound.judge``)."""
        return [item.closeness is None or item.closeness < closeness
                or (item.without is not None and item.without - item.closeness > gain) for item in self.judged]


class UnfoundLog:
    """The answerer's ``on_unfound`` observer: keeps the judgement of the last answer."""

    def __init__(self) -> None:
        self.last: tuple[Judged, ...] = ()

    def __call__(self, question: str, judged: tuple[Judged, ...]) -> None:
        self.last = judged


def noted(asked: Asked, judged: tuple[Judged, ...], shown: bool) -> Noted:
    """The note's record of one answered question; a judged word comes from the appended
    question when that question uses it and the first part does not."""
    first = set(terms(asked.text[: len(asked.text) - len(asked.appended)])) if asked.appended else set()
    second = set(terms(asked.appended))
    flags = tuple(item.word in second and item.word not in first for item in judged)
    return Noted(asked.set_name, asked.half, asked.mix, asked.text, judged, flags, shown)


@dataclass(frozen=True, slots=True)
class NoteShares:
    """The note on a group of answered questions under one rule: the share of answerable
    answers carrying it and of mixed answers naming a word of their second question."""

    answerable: int
    answerable_noted: float
    mixed: int
    mixed_named: float

    @property
    def margin(self) -> float:
        """Mixed answers naming what is missing, less false notes."""
        return self.mixed_named - self.answerable_noted


def note_shares(notes: Sequence[Noted], named: str | tuple[float, float]) -> NoteShares:
    """The note's shares on ``notes`` when words are named ``named``: "before" (every word
    the scope listed), "after" (as this run's answerer named them) or at the thresholds
    (closeness, gain)."""

    def words(note: Noted) -> list[bool]:
        if named == "before":
            return [True] * len(note.judged)
        if named == "after":
            return [item.named for item in note.judged]
        assert isinstance(named, tuple)
        return note.named_at(*named)

    plain = [note for note in notes if not note.mix]
    mixes = [note for note in notes if note.mix]
    noted = sum(1 for note in plain if any(words(note)))
    hit = sum(1 for note in mixes if any(w and a for w, a in zip(words(note), note.appended)))
    return NoteShares(len(plain), noted / len(plain) if plain else math.nan,
                      len(mixes), hit / len(mixes) if mixes else math.nan)


def fit_note(notes: Sequence[Noted]) -> tuple[tuple[float, float], list[tuple[float, float]]]:
    """The thresholds (closeness, gain) of :data:`CLOSENESS_GRID` x :data:`GAIN_GRID` fitted on
    the fit half, and every pair that ties with them.

    The most mixed answers naming a word of their second question, among the pairs that
    leave the note on at most :data:`NOTE_RARE` of the answerable answers (the best
    :attr:`NoteShares.margin` when none does). Ties go to the fewest notes on answerable
    questions, then to the lowest gain and the lowest closeness: where the fit half cannot
    tell, the gain test names a neighbouring topic rather than stay silent.
    """
    fit = [note for note in notes if note.half == FIT]
    scored = [(note_shares(fit, (c, g)), (c, g)) for c in CLOSENESS_GRID for g in GAIN_GRID]
    usable = [(shares, pair) for shares, pair in scored if not math.isnan(shares.margin)]
    if not usable:
        return (UNFOUND_CLOSENESS, UNFOUND_GAIN), []
    rare = [(shares, pair) for shares, pair in usable if shares.answerable_noted <= NOTE_RARE]
    if rare:
        top = max(shares.mixed_named for shares, _ in rare)
        tied = [(shares, pair) for shares, pair in rare if shares.mixed_named >= top - 1e-12]
    else:
        top = max(shares.margin for shares, _ in usable)
        tied = [(shares, pair) for shares, pair in usable if shares.margin >= top - 1e-12]
    chosen, pair = min(tied, key=lambda item: (item[0].answerable_noted, item[1][1], item[1][0]))
    return pair, [other for shares, other in tied if shares.answerable_noted == chosen.answerable_noted]


def note_table(notes: Sequence[Noted]) -> str:
    """Per set and half (and all sets per half): the share of answerable answers with the note,
    and of each kind of mixed answers naming a word of their second question; before and
    after the meaning check (each as "before -> after")."""
    rows = []
    groups = [*dict.fromkeys(note.set_name for note in notes), "all"]
    for name in groups:
        for half in (FIT, HELD):
            group = [n for n in notes if n.half == half and name in ("all", n.set_name)]
            row: list[object] = [name, half]
            for mix in (OTHER_SET, SAME_SET):
                kind = [n for n in group if n.mix in ("", mix)]
                before, after = note_shares(kind, "before"), note_shares(kind, "after")
                if mix == OTHER_SET:
                    row += [before.answerable,
                            f"{percent(before.answerable_noted)} -> {percent(after.answerable_noted)}"]
                row += [before.mixed, f"{percent(before.mixed_named)} -> {percent(after.mixed_named)}"]
            rows.append(row)
    headers = ["set", "half", "answerable answered", "with a note", f"mixed ({OTHER_SET}) answered",
               "naming the 2nd question", f"mixed ({SAME_SET}) answered", "naming the 2nd question"]
    return table(headers, rows)


def fit_lines(notes: Sequence[Noted]) -> list[str]:
    """The fitted thresholds and the module's, each with its figures on both halves."""
    best, tied = fit_note(notes)
    lines = []
    for label, pair in (("module constants", (UNFOUND_CLOSENESS, UNFOUND_GAIN)), ("best on this fit half", best)):
        figures = "; ".join(
            f"{half}: answerable with note {percent(s.answerable_noted)} of {s.answerable}, mixed naming the 2nd "
            f"question {percent(s.mixed_named)} of {s.mixed}"
            for half in (FIT, HELD) for s in [note_shares([n for n in notes if n.half == half], pair)])
        lines.append(f"{label}: closeness {pair[0]}, gain {pair[1]} -> {figures}")
    if tied:
        closeness = sorted({c for c, _ in tied})
        gains = sorted({g for _, g in tied})
        lines.append(f"{len(tied)} pairs tie on the fit half: closeness {closeness[0]}-{closeness[-1]}, "
                     f"gain {gains[0]}-{gains[-1]}")
    return lines


def note_payload(note: Noted) -> dict[str, object]:
    """One answered question's note as JSON: the question, whether the note was shown, and
    every judged word with its figures and whether it comes from the appended question."""
    return {"set": note.set_name, "half": note.half, "mix": note.mix, "question": note.text, "shown": note.shown,
            "words": [{"word": item.word, "clause": item.clause, "closeness": item.closeness,
                       "without": item.without, "named": item.named, "appended": flag}
                      for item, flag in zip(note.judged, note.appended)]}
