"""Citation quality of answers, in the style of ALCE (Gao et al., EMNLP 2023), for ``bench.answers``.

ALCE judges each sentence of an answer against the passages it cites with an NLI model; here
the judge is the lexical support measure the bot itself uses to mark sentences
(``raptor_engine.answer_check.support`` at the configured threshold, 0.5 by default), so the
figures say how often a person sees a ⚠, not what an entailment model would conclude:

- **citation recall**: the share of an answer's sentences (claims: at least three content
  words, headings, table rows and code left out) whose cited passages together support them;
  a sentence citing nothing counts as unsupported;
- **citation precision**: the share of citations that are relevant: a citation is irrelevant
  when its passage alone does not support the sentence *and* the sentence's other citations
  support it without it (ALCE's definition);
- **quotes verified**: the share of citations whose quote was found word for word in the source
  (``Answer.unverified_quotes``).

Answers that found nothing are left out. The stand-in model (``testkit/openai_stub.py``)
answers from the sources it is sent: the first sentence of each of the first three, citing it
(``faithful``) or citing the next source (``miscite``), so the measure is seen to fall when a
model cites wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.common import percent
from raptor_engine.answer_check import SUPPORT_THRESHOLD, answer_claims, is_claim, support
from raptor_engine.types import Answer


@dataclass(slots=True)
class CitationTally:
    """Counts over the answers of one answerer."""

    answers: int = 0
    sentences: int = 0
    supported: int = 0
    citations: int = 0
    relevant: int = 0
    quotes: int = 0
    verified: int = 0

    def add(self, answer: Answer, threshold: float = SUPPORT_THRESHOLD) -> None:
        """Counts one answer (nothing when it found nothing)."""
        if not answer.found:
            return
        self.answers += 1
        self.quotes += len(answer.citations)
        self.verified += len(answer.citations) - answer.unverified_quotes
        texts = _cited_texts(answer)
        for claim in answer_claims(answer.text):
            if not is_claim(claim):
                continue
            cited = [texts[n] for n in dict.fromkeys(claim.numbers) if n in texts]
            self.sentences += 1
            self.supported += int(bool(cited) and support(claim.text, cited) >= threshold)
            for place, passage in enumerate(cited):
                others = cited[:place] + cited[place + 1:]
                alone = support(claim.text, [passage]) >= threshold
                redundant = bool(others) and support(claim.text, others) >= threshold
                self.citations += 1
                self.relevant += int(alone or not redundant)

    @property
    def recall(self) -> float:
        return self.supported / self.sentences if self.sentences else float("nan")

    @property
    def precision(self) -> float:
        return self.relevant / self.citations if self.citations else float("nan")

    @property
    def verified_share(self) -> float:
        return self.verified / self.quotes if self.quotes else float("nan")

    def as_dict(self) -> dict[str, float]:
        return {"answers": self.answers, "sentences": self.sentences, "citation_recall": self.recall,
                "citations": self.citations, "citation_precision": self.precision,
                "quotes_verified": self.verified_share}


def _cited_texts(answer: Answer) -> dict[int, str]:
    """Each citation number's passage: the cited node's text, as the reader is shown it."""
    nodes = {hit.node.id: hit.node.text for hit in answer.hits}
    return {c.number: nodes[c.node_id] for c in answer.citations if c.node_id in nodes}


def citation_table(tallies: dict[str, CitationTally]) -> str:
    """One line per answerer: answers, sentences, citation recall and precision, quotes verified."""
    lines = ["| answerer | answers | sentences | citation recall | citation precision | quotes verified |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, tally in tallies.items():
        lines.append(f"| {name} | {tally.answers} | {tally.sentences} | {percent(tally.recall)} | "
                     f"{percent(tally.precision)} | {percent(tally.verified_share)} |")
    return "\n".join(lines)


def tallies_payload(tallies: dict[str, CitationTally]) -> dict[str, dict[str, float]]:
    return {name: tally.as_dict() for name, tally in tallies.items()}

