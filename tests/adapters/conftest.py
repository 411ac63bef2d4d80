"""Fixtures shared by the adapters' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.openai_stub import OpenAIStub, running_stub
from tests.adapters.untrusted import MODEL_ANSWER


@pytest.fixture
def untrusted_model() -> Iterator[OpenAIStub]:
    """A model whose answer holds a masked link and every platform's mentions
    (:data:`tests.adapters.untrusted.MODEL_ANSWER`), written over about five seconds: a
    stream appends it several times, a draft is edited several times."""
    with running_stub(answer_text=MODEL_ANSWER, tokens_per_s=15.0) as server:
        yield server
