"""A local NLI model as a support judge: is a statement entailed by the passages it cites?

Contract: :class:`NliJudge` is a :class:`~raptor_engine.protocols.SupportJudge` over a
cross-encoder NLI model that the operator provides as a local directory (a Hugging Face
model whose ``id2label`` names an entailment label, such as the ``cross-encoder/nli-*``
models); it is loaded with ``local_files_only``, so nothing is ever downloaded. A statement is
supported when any one of its passages entails it with a probability of at least
``threshold``: a passage is the premise, the statement the hypothesis. Loading a directory
that is no such model raises ``ProviderError`` naming it; a failure while judging raises
``JudgeFailed`` (the answer check then falls back to its lexical measure).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raptor_engine.errors import JudgeFailed, ProviderError

ENTAILMENT_AT = 0.5  # the entailment probability from which a passage supports a statement
BATCH = 16


class NliJudge:
    """Judges support with a local cross-encoder NLI model (see the module docstring)."""

    def __init__(self, path: Path, threshold: float = ENTAILMENT_AT) -> None:
        from sentence_transformers import CrossEncoder  # loaded only where an NLI judge is configured

        try:
            self._model: Any = CrossEncoder(str(path), local_files_only=True, device="cpu")
        except (OSError, ValueError) as error:
            raise ProviderError(f"cannot load the NLI model in {path}: {error}") from error
        labels = {int(k): str(v).lower() for k, v in (self._model.config.id2label or {}).items()}
        entailment = [index for index, label in labels.items() if label.startswith("entail")]
        if len(entailment) != 1:
            raise ProviderError(f"{path} is no NLI model: its labels {sorted(labels.values())} name no entailment")
        self._entailment = entailment[0]
        self._threshold = threshold
        self._name = path.name

    @property
    def identity(self) -> str:
        return f"nli:{self._name}"

    def supported(self, claims: Sequence[tuple[str, Sequence[str]]]) -> list[bool]:
        pairs = [(passage, statement) for statement, passages in claims for passage in passages]
        if not pairs:
            return [False] * len(claims)
        try:
            probabilities = self._model.predict(pairs, apply_softmax=True, batch_size=BATCH, show_progress_bar=False)
        except (RuntimeError, ValueError) as error:
            raise JudgeFailed(f"the NLI model failed: {error}") from error
        entailed = [float(row[self._entailment]) >= self._threshold for row in probabilities]
        verdicts: list[bool] = []
        at = 0
        for _, passages in claims:
            verdicts.append(any(entailed[at:at + len(passages)]))
            at += len(passages)
        return verdicts
