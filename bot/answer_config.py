"""The ``answers`` section of the configuration: how an answer's sentences are checked
against the passages they cite (``raptor_engine/answer_check.py``) and what a person sees
of the result. Separate from :mod:`bot.config`, which embeds it, to keep that file to the
sections every deployment sets."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from raptor_engine import defaults


class AnswersConfig(BaseModel):
    """``support_threshold``: the share of a sentence's content words that the nodes it cites
    must hold for it to count as supported (0 accepts every cited sentence, 1 only those
    whose every word is there). ``drop_unsupported``: leave unsupported sentences out of the
    reply, with a note saying how many, instead of marking each with ⚠.

    ``judge`` says who decides whether a sentence is supported: ``words`` (the default, no
    model: ``support_threshold`` above), ``model`` (the ``llm`` endpoint, one request per
    answer; it needs ``llm.base_url``) or ``nli`` (a local cross-encoder NLI model in the
    directory ``nli_model``, never downloaded). When the judge fails (a timeout, junk), the
    words decide, and the failure is logged."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    support_threshold: float = Field(default=defaults.SUPPORT_THRESHOLD, ge=0.0, le=1.0)
    drop_unsupported: bool = False
    judge: Literal["words", "model", "nli"] = "words"
    nli_model: str = ""

    @model_validator(mode="after")
    def _nli_has_a_model(self) -> AnswersConfig:
        if self.judge == "nli" and not self.nli_model.strip():
            raise ValueError("answers.judge 'nli' needs answers.nli_model: the directory of a local NLI model")
        if self.nli_model.strip() and self.judge != "nli":
            raise ValueError("answers.nli_model is used only with answers.judge: nli")
        return self
