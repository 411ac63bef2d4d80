"""The development data the benchmarks read: five L-Eval files found next to the repository
under ``shared/data`` (see its README), as documents with their questions and gold answers.

``quality-dev.jsonl`` (15 QuALITY articles with multiple-choice questions, the default of
every benchmark), ``leval-patent-summ.jsonl`` (patents, one summary question each),
``leval-review-summ.jsonl`` (hotels' reviews, six theme questions each),
``leval-financial-qa.jsonl`` (earnings calls, detail questions on names and figures) and
``leval-natural-question.jsonl`` (Wikipedia articles, short factual questions).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

DATA_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"
QUALITY_STEM = "quality-dev"
DEFAULT_DATA = DATA_ROOT / f"{QUALITY_STEM}.jsonl"
# The five development sets by their short names (see shared/data/README.md).
SET_FILES = {
    "quality": f"{QUALITY_STEM}.jsonl",
    "patents": "leval-patent-summ.jsonl",
    "reviews": "leval-review-summ.jsonl",
    "financial": "leval-financial-qa.jsonl",
    "wikipedia": "leval-natural-question.jsonl",
}
# L-Eval's earnings-call questions open with a role sentence ("You are asked to act as a member of
# the Financial Results Conference Call and answer the question: ..."); a person would not type it.
_ROLE_PREFIX = re.compile(r"^\s*You are asked to act as .*?answer the question:\s*", re.IGNORECASE | re.DOTALL)
LETTERS = "ABCD"
# The options start at the first "(A)" that follows whitespace; the others follow in order.
_OPTION_START = re.compile(r"\s\(A\)\s")
_OPTION_SPLIT = re.compile(r"\(([ABCD])\)")
_ANSWER_LETTER = re.compile(r"^\s*\(([ABCD])\)")


@dataclass(frozen=True, slots=True)
class Question:
    """A question as sent (its text, without options) and its gold answer's text.

    Multiple-choice questions (QuALITY) also keep their four ``options`` and the
    right one's index ``answer``; the gold is that option's text (without its
    "(B)" label). Free questions (L-Eval's summaries) have no options and ``answer`` -1.
    """

    text: str
    gold: str
    options: tuple[str, ...] = ()
    answer: int = -1

    @property
    def letter(self) -> str:
        """The right option's letter, empty for a free question."""
        return LETTERS[self.answer] if self.answer >= 0 else ""


@dataclass(frozen=True, slots=True)
class Article:
    """One document of a data file: its line in the file, a title, its text and its questions.

    ``dataset`` is the file's stem (``quality-dev``, ``leval-patent-summ``...):
    with ``index`` it names the document's channel and link.
    """

    index: int
    title: str
    text: str
    questions: tuple[Question, ...]
    dataset: str = QUALITY_STEM


# Every constant is fitted on one half of each set's documents and checked on the other.
FIT, HELD = "fit half", "other half"


def half_of(position: int) -> str:
    """The half of its set a document at ``position`` (0-based, among the set's documents) is in:
    :data:`FIT` at even positions, where constants are fitted; :data:`HELD` at odd ones."""
    return FIT if position % 2 == 0 else HELD


@dataclass(frozen=True, slots=True)
class DataSet:
    """The distinct documents of one data file; ``duplicates`` are the lines dropped as
    exact repeats of an earlier line (same document, questions and answers)."""

    name: str
    path: Path
    articles: tuple[Article, ...]
    duplicates: tuple[int, ...] = ()

    @property
    def questions(self) -> int:
        return sum(len(article.questions) for article in self.articles)


def parse_question(instruction: str, output: str) -> Question:
    """Splits ``instruction`` into question text and options A-D; the right one is ``output``'s letter.

    The options begin at the first ``(A)`` after whitespace (the data has
    ``"\\n\\n (A)"``, ``"\\n\\n(A)"`` and ``"\\n(A)"``). Raises ``ValueError``
    when the instruction has not exactly the options A, B, C, D in order, or
    the output does not start with a letter in parentheses.
    """
    start = _OPTION_START.search(instruction)
    if start is None:
        raise ValueError(f"no options in {instruction[:80]!r}")
    parts = _OPTION_SPLIT.split(instruction[start.start() :])
    letters = parts[1::2]
    if letters != list(LETTERS):
        raise ValueError(f"options {letters} instead of A-D in {instruction[:80]!r}")
    options = tuple(part.strip() for part in parts[2::2])
    found = _ANSWER_LETTER.match(output)
    if found is None:
        raise ValueError(f"no answer letter in {output[:80]!r}")
    answer = LETTERS.index(found.group(1))
    return Question(instruction[: start.start()].strip(), options[answer], options, answer)


def read_question(instruction: str, output: str) -> Question:
    """A multiple-choice question when ``instruction`` carries options A-D and ``output`` names
    one (see :func:`parse_question`); otherwise a free question whose gold is ``output``, its
    role sentence ("You are asked to act as ... answer the question:") left out."""
    if _OPTION_START.search(instruction) and _ANSWER_LETTER.match(output):
        return parse_question(instruction, output)
    return Question(_ROLE_PREFIX.sub("", instruction).strip(), output.strip())


def article_title(text: str, index: int) -> str:
    """A short title: the first non-blank line of the article (HTML comments skipped), folded."""
    for line in text.splitlines():
        folded = " ".join(line.split())
        if folded and not folded.startswith("<!--"):
            return f"{index:02d} {folded[:60]}"
    return f"{index:02d} (untitled)"


def load_articles(path: Path, limit: int | None = None) -> list[Article]:
    """The documents of an L-Eval-style JSONL file (``quality-dev.jsonl`` and the others
    of ``shared/data``) with their questions, every line kept.

    ``limit`` keeps only the first documents. Raises ``FileNotFoundError`` when
    the file is missing.
    """
    articles: list[Article] = []
    with path.open(encoding="utf-8") as lines:
        for index, line in enumerate(lines):
            if limit is not None and index >= limit:
                break
            articles.append(_article(json.loads(line), index, path.stem))
    return articles


def _article(record: dict[str, Any], index: int, dataset: str) -> Article:
    pairs = zip(record["instructions"], record["outputs"], strict=True)
    questions = tuple(read_question(instruction, output) for instruction, output in pairs)
    text = record["input"]
    return Article(index, article_title(text, index), text, questions, dataset)


def load_set(name: str, path: Path, limit: int | None = None, questions: int | None = None) -> DataSet:
    """The distinct documents of a data file, the first ``limit`` of them, each with
    its first ``questions`` questions (all when None).

    L-Eval repeats some lines verbatim (one patent, four hotels): a repeat would
    only count the same questions twice, so it is dropped and its line listed in
    ``duplicates``. Documents keep their line number as ``index``.
    """
    kept: list[Article] = []
    duplicates: list[int] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as lines:
        for index, line in enumerate(lines):
            if limit is not None and len(kept) >= limit:
                break
            record = json.loads(line)
            fingerprint = json.dumps([record["input"], record["instructions"], record["outputs"]])
            if fingerprint in seen:
                duplicates.append(index)
                continue
            seen.add(fingerprint)
            article = _article(record, index, path.stem)
            kept.append(replace(article, questions=article.questions[:questions]))
    return DataSet(name, path, tuple(kept), tuple(duplicates))


def load_sets(
    names: Sequence[str], root: Path = DATA_ROOT, limit: int | None = None, questions: int | None = None
) -> list[DataSet]:
    """The sets named (keys of ``SET_FILES``) from the files under ``root``; see :func:`load_set`.

    Raises ``ValueError`` on an unknown name, ``FileNotFoundError`` on a missing file.
    """
    unknown = [name for name in names if name not in SET_FILES]
    if unknown:
        raise ValueError(f"unknown sets {unknown}: choose among {', '.join(SET_FILES)}")
    return [load_set(name, root / SET_FILES[name], limit, questions) for name in names]


def normalised(text: str) -> str:
    """The text as the engine stores it (NFC)."""
    return unicodedata.normalize("NFC", text)
