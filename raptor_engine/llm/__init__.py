"""Summaries, answers and embeddings from any OpenAI-compatible endpoint.

OpenAI itself, vLLM, the llama.cpp server and Ollama all speak the same
``/v1/chat/completions`` and ``/v1/embeddings``; :class:`LLMClient` reaches
any of them through the ``openai`` package with a configurable ``base_url``.
On top of it:

* :class:`LLMSummarizer` (:mod:`.summarizer`) writes RAPTOR's summary nodes
  with the paper's prompt, its member texts delimited as data the model must
  not take instructions from;
* :class:`LLMAnswerer` (:mod:`.answerer`) answers from numbered sources and
  checks the ``[n]`` citations it gets back;
* :class:`OpenAIEmbedder` (:mod:`.embedder`) embeds through ``/v1/embeddings``;
* :class:`ModelJudge` (:mod:`.judge`) asks whether cited passages support an answer's sentences.

The requests and their metering live in :mod:`.client`, with its settings in
:mod:`.settings`; retries and the errors of failed calls in :mod:`.retries`, the
wording of failures in :mod:`.failures`; reading responses in :mod:`.responses`;
the client's own event loop thread in :mod:`.event_loop`. Contract of this module: it re-exports the
names code outside the package imports, and nothing else; everything else is
imported from its submodule.
"""

from raptor_engine.llm.answerer import NO_CITATION_WARNING, LLMAnswerer
from raptor_engine.llm.client import LLMClient
from raptor_engine.llm.embedder import OpenAIEmbedder
from raptor_engine.llm.judge import ModelJudge
from raptor_engine.llm.settings import LLMSettings
from raptor_engine.llm.summarizer import SUMMARY_SYSTEM, LLMSummarizer

__all__ = [
    "NO_CITATION_WARNING",
    "SUMMARY_SYSTEM",
    "LLMAnswerer",
    "LLMClient",
    "LLMSettings",
    "LLMSummarizer",
    "ModelJudge",
    "OpenAIEmbedder",
]
