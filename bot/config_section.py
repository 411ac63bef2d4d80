"""The base of every configuration section: unknown keys rejected, values frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A configuration section: a misspelt key is an error naming its path, never ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
