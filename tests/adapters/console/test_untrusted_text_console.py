"""A model's answer never reaches the terminal as escape sequences, printed whole or as it is written.

A terminal has no mention, and a masked Markdown link prints its address as written; what
could speak for the bot there is an escape sequence: a hidden OSC 8 link, a cursor move, a
carriage return over what was printed. The model (``testkit/openai_stub.py``, through the
real ``openai`` client) writes them into its answer; the console prints none of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.llm import LLMClient, LLMSettings
from testkit.openai_stub import OpenAIStub, running_stub
from tests.adapters.console.test_console_streaming import Terminal, ask, llm_engine
from tests.adapters.untrusted import MASKED

HIDDEN_LINK = "\x1b]8;;https://evil.example/reset\x1b\\the reset page\x1b]8;;\x1b\\"
ANSWER = f"To reset your password, open {HIDDEN_LINK} [1] or {MASKED} [1].\rThe on-call engineer\x1b[2J rules [1]."


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with running_stub(answer_text=ANSWER, tokens_per_s=200.0) as server:
        yield server


def controls(text: str) -> list[str]:
    return [char for char in text if (ord(char) < 32 and char not in "\n\t") or 0x7F <= ord(char) <= 0x9F]


@pytest.mark.parametrize("as_written", [True, False])
def test_no_escape_sequence_of_a_model_reaches_the_terminal(stub: OpenAIStub, embedder: SentenceTransformerEmbedder,
                                                            tmp_path: Path, as_written: bool) -> None:
    terminal = Terminal()
    with LLMClient(LLMSettings(base_url=stub.base_url, model="m", timeout_s=5.0)) as client:
        expected = ask(llm_engine(embedder, tmp_path, client), tmp_path, terminal, streamed=as_written)
    printed = terminal.streamed() + "".join(terminal.messages)
    assert (len(terminal.pieces) > 10) is as_written  # printed as it was written, or whole
    assert not controls(printed), controls(printed)
    assert "https://evil.example/reset" in printed and MASKED in printed  # every address in sight
    assert printed.rstrip("\n") == expected
