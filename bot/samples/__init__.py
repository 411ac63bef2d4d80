"""The bundled sample: a short handbook a new channel can try the bot on, and a question
it answers (the console offers both; ``python -m bot demo`` runs them)."""

from __future__ import annotations

from pathlib import Path

SAMPLE_DOCUMENT = Path(__file__).parent / "aurora-handbook.md"
SAMPLE_QUESTION = "What happens when the on-call engineer cannot be reached?"
