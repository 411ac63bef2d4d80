"""The ``answers`` section of the configuration: how an answer's sentences are checked
against the passages they cite (``raptor_engine/answer_check.py``) and what a person sees
of the result. Separate from :mod:`bot.config`, which embeds it, to keep that file to the
sections every deployment sets."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from raptor_engine import defaults


class AnswersConfig(BaseModel):
    """``support_threshold``: the share of a sentence's content words that the nodes it cites
    must hold for it to count as supported (0 accepts every cited sentence, 1 only those
    whose every word is there). ``drop_unsupported``: leave unsupported sentences out of the
    reply, with a note saying how many, instead of marking each with ⚠."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    support_threshold: float = Field(default=defaults.SUPPORT_THRESHOLD, ge=0.0, le=1.0)
    drop_unsupported: bool = False
