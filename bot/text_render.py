"""Plain-text renderings of engine results, for terminals and logs."""

from __future__ import annotations

from bot.ingestion import adder_name
from raptor_engine.answering import quote
from raptor_engine.types import Answer, BuildReport, Citation, Node, NodeView, Source, TreeStats


def citation_label(citation: Citation) -> str:
    """``excerpt`` or ``summary, layer N``."""
    return "excerpt" if citation.layer == 0 else f"summary, layer {citation.layer}"


def format_answer(answer: Answer) -> str:
    """The answer text followed by its numbered citations with their kind, source and quote."""
    lines = [answer.text]
    if answer.citations:
        lines += ["", "Sources:"]
        for citation in answer.citations:
            where = f" <{citation.link}>" if citation.link else ""
            lines.append(f"[{citation.number}] {citation_label(citation)} of \"{citation.title}\"{where} (node {citation.node_id})")
            lines.append(f"    “{citation.quote}”")
    return "\n".join(lines)


def format_report(report: BuildReport) -> str:
    """A build report in two lines: what was built, and where the time went."""
    layers = ", ".join(f"layer {layer}: {count}" for layer, count in sorted(report.nodes_per_layer.items()))
    stages = ", ".join(f"{stage} {seconds:.1f}s" for stage, seconds in report.stage_seconds.items())
    return (
        f"Built tree v{report.version} from {report.sources} source(s): {report.leaves} leaves; {layers}.\n"
        f"Embedded {report.leaves_embedded} leaves (reused {report.leaves_reused}); "
        f"made {report.summaries_made} summaries (reused {report.summaries_reused}). "
        f"Time {report.wall_seconds:.1f}s (stages overlap: {stages})."
        + model_usage(report)
    )


def model_usage(report: BuildReport) -> str:
    """`` Language model: N calls, P prompt + C completion tokens, S s.`` or nothing without calls."""
    if not report.model_calls:
        return ""
    return (
        f" Language model: {report.model_calls} calls, {report.prompt_tokens:,} prompt + "
        f"{report.completion_tokens:,} completion tokens, {report.model_seconds:.1f}s."
    )


def format_stats(stats: TreeStats, top: list[Node]) -> str:
    """The tree's version, size per layer, waiting changes and its top summaries."""
    if stats.version == 0:
        return f"Channel {stats.channel}: {stats.sources} source(s), no tree built yet (run rebuild)."
    layers = ", ".join(f"layer {layer}: {count}" for layer, count in sorted(stats.nodes_per_layer.items()))
    lines = [
        f"Channel {stats.channel}: tree v{stats.version} built {stats.built_at} from {stats.sources} source(s).",
        f"Nodes: {layers}.",
    ]
    if stats.pending_sources:
        lines.append(f"{stats.pending_sources} source(s) added or removed since; rebuild to update the summaries.")
    for node in top:
        lines.append(f"- {node.id} (layer {node.layer}, {len(node.children)} children): {quote(node.text, 160)}")
    return "\n".join(lines)


def format_node(view: NodeView) -> str:
    """A node's full text, then its parents and children one line each."""
    node = view.node
    kind = "excerpt (leaf)" if node.layer == 0 else f"summary, layer {node.layer}"
    lines = [f"Node {node.id}: {kind}, {node.tokens} tokens, from \"{node.title}\"", node.text]
    if node.link:
        lines.insert(1, f"Link: {node.link}")
    for label, nodes in (("Parents", view.parents), ("Children", view.children)):
        if nodes:
            lines.append(f"{label}:")
            lines += [f"  {n.id} (layer {n.layer}): {quote(n.text, 100)}" for n in nodes]
    return "\n".join(lines)


def format_sources(sources: list[Source]) -> str:
    """One line per source: short id, title, kind, who added it and when, size."""
    if not sources:
        return "No sources yet."
    return "\n".join(
        f"{s.id[:12]}  {s.title}  ({s.kind.value}, {s.chars:,} chars, added {s.added_at}"
        + (f" by {adder_name(s.added_by)}" if s.added_by else "")
        + ")"
        for s in sources
    )
