"""Filling a token budget with ranked hits: what each node costs, and which fit."""

from __future__ import annotations

from collections.abc import Sequence

from raptor_engine.chunking import sentences
from raptor_engine.tokens import token_floor
from raptor_engine.types import Hit, Node


def fill_budget(ranked: Sequence[Hit], budget: int, top_k: int, max_overlap: float | None = None) -> list[Hit]:
    """The first distinct hits of ``ranked`` whose tokens add up to at most ``budget``.

    Unlike the reference code, which stops at the first node that does not fit,
    a node that does not fit is skipped and smaller ones after it still count.
    With ``max_overlap`` set, a summary whose sentences are already, for more
    than that share of them, in the nodes chosen before it is skipped too: extractive summaries
    repeat their leaves' sentences, and a repeat spends the budget on nothing
    new. Leaves are never skipped for overlap: they are the evidence cited.
    A node costs its :func:`cost`, so the hits hold at most
    ``budget * MAX_CHARS_PER_TOKEN`` characters whatever counts are stored.
    """
    chosen: list[Hit] = []
    seen_ids: set[str] = set()
    seen_sentences: set[str] = set()
    used = 0
    for hit in ranked:
        tokens = cost(hit.node)
        if hit.node.id in seen_ids or used + tokens > budget:
            continue
        if max_overlap is not None:  # splitting sentences costs: only when overlap is checked
            sentences = _sentence_set(hit.node.text)
            if hit.node.layer > 0 and len(sentences & seen_sentences) > max_overlap * len(sentences):
                continue
            seen_sentences |= sentences
        chosen.append(hit)
        seen_ids.add(hit.node.id)
        used += tokens
        if len(chosen) >= top_k:
            break
    return chosen


def cost(node: Node) -> int:
    """The tokens ``node`` spends of a budget: its stored count, never under the token floor
    of its length. Nodes stored before the counter charged long unbroken runs by length
    carry counts like 1 for a megabyte of hex; this keeps them from filling a context."""
    return max(node.tokens, token_floor(node.text))


def _sentence_set(text: str) -> set[str]:
    """The node's sentences, whitespace-folded and lower-cased, for overlap tests."""
    return {sentence.lower() for sentence in sentences(text)}
