"""The tree's state, one node, and builds (progress, reports, failures).

Chat and command line say the same here: :func:`stats_text` is :func:`status_text`
without the schedule (the command line has none) and with the top nodes; :func:`report_text`
is :func:`report_sentence` with a second line of timings.
"""

from __future__ import annotations

from bot.rebuilds.service import ScheduleStatus
from bot.texts.words import count, node_kind, seconds, when
from raptor_engine import BuildProgress, BuildReport, GateCheck, Node, NodeView, TreeStats, quote

REBUILD_STARTED = (
    "Rebuild started. Questions are still answered from the current tree meanwhile; I'll say when it is done."
)
REBUILD_QUEUED_BEHIND = "A rebuild is running; yours is queued and starts when it ends."
REBUILD_INTERRUPTED = (
    "The bot is stopping: the rebuild was interrupted and resumes when the bot is back. "
    "The current tree keeps answering."
)
REBUILD_ENQUEUED = (
    "Rebuild queued: a worker starts it shortly. Questions are still answered from the current tree "
    "meanwhile; I'll say when it is done."
)
REBUILDS_WAIT = (
    "Rebuilds wait: the coordination server (Redis) cannot be reached right now. Your request is kept "
    "and runs once it is back; questions are still answered from the current tree."
)
FORCE_COMMAND = "rebuild force"  # in chat; the command line's is rebuild --force
NODE_LINE_CHARS = 100  # characters of a related node's text in node_text
TOP_LINE_CHARS = 160  # characters of a top node's text in stats_text


# -- the tree's state --------------------------------------------------------------


def status_text(stats: TreeStats, schedule: ScheduleStatus) -> str:
    """The channel's state in a few lines: sources, tree version and when it was built,
    nodes per layer, whether changes wait for a rebuild, and the rebuild schedule."""
    return "\n".join([*_state_lines(stats), _schedule_line(schedule)])


def stats_text(stats: TreeStats, top: list[Node]) -> str:
    """:func:`status_text` without the schedule, then the top nodes one line each."""
    lines = _state_lines(stats)
    if top:
        lines.append(f"Top of the tree ({count(len(top), 'node')}):")
        lines += [_node_line(node, TOP_LINE_CHARS) for node in top]
    return "\n".join(lines)


def _state_lines(stats: TreeStats) -> list[str]:
    sources = count(stats.sources, "source")
    if stats.version == 0:
        lines = [f"No tree built yet; {sources} in this channel."]
        if stats.sources:
            lines.append("Their excerpts can be asked about already; a rebuild adds the summaries.")
        return lines
    lines = [
        f"{sources} in this channel; tree v{stats.version} built {when(stats.built_at)}.",
        "Nodes: " + layers_text(stats.nodes_per_layer) + ".",
    ]
    if stats.pending_sources:
        lines.append(
            f"{count(stats.pending_sources, 'source')} changed since it was built{_change_kinds(stats)}; "
            "the next rebuild brings the summaries up to date."
        )
    else:
        lines.append("Up to date with its sources.")
    if stats.outdated_summaries:
        lines.append(f"{count(stats.outdated_summaries, 'summary', 'summaries')} may be outdated (built before a "
                     "source under them changed, or a source was added beside them; cited with a mark) "
                     "until the next rebuild.")
    if stats.approved_total:
        lines.append(f"Check: {approved_text(stats.approved_found, stats.approved_total)}.")
    if stats.held_back:
        lines.append(f"The last rebuild was held back: {stats.held_back}.")
    return lines


def _change_kinds(stats: TreeStats) -> str:
    """`` (edited or replaced)``, `` (added or removed)`` or `` (2 edited or replaced, 1 added or removed)``."""
    edited, others = stats.changed_sources, stats.pending_sources - stats.changed_sources
    if edited and others:
        return f" ({edited} edited or replaced, {others} added or removed)"
    return " (edited or replaced)" if edited else " (added or removed)"


def layers_text(nodes_per_layer: dict[int, int]) -> str:
    """``15 excerpts (layer 0), 3 summaries (layer 1), 1 summary (layer 2)``, or ``none``."""
    parts = []
    for layer, number in sorted(nodes_per_layer.items()):
        noun = count(number, "excerpt") if layer == 0 else count(number, "summary", "summaries")
        parts.append(f"{noun} (layer {layer})")
    return ", ".join(parts) or "none"


def _schedule_line(schedule: ScheduleStatus) -> str:
    if schedule.running:
        return "A rebuild is running now" + (", and another is queued." if schedule.queued else ".")
    if schedule.queued:
        return "A rebuild is queued."
    if schedule.next_run is None:
        return "No rebuild is scheduled."
    return f"Next scheduled rebuild (if anything changed): {when(schedule.next_run)}."


# -- one node ----------------------------------------------------------------------


def node_text(view: NodeView, open_with: str = "node ID") -> str:
    """A node's full text, where it comes from, then its parents and children one line
    each, so a cited summary can be opened down to its excerpts; the last line says how
    (``open_with``: the chat command by default, the command line passes its own)."""
    node = view.node
    lines = [f"{node_kind(node.layer)} {node.id} · {count(node.tokens, 'token')} · from “{node.title}”"]
    if node.link:
        lines.append(f"Link: {node.link}")
    lines += ["", node.text]
    for label, nodes in (("Summarised in", view.parents), ("Summarises", view.children)):
        if nodes:
            lines += ["", f"{label} ({len(nodes)}):"]
            lines += [_node_line(n, NODE_LINE_CHARS) for n in nodes]
    if view.children or view.parents:
        lines += ["", f"Open any of them with: {open_with}"]
    return "\n".join(lines)


def _node_line(node: Node, chars: int) -> str:
    return f"  {node.id} · {node_kind(node.layer).lower()} · {quote(node.text, chars)}"


# -- builds ------------------------------------------------------------------------


def progress_text(event: BuildProgress) -> str:
    """One line saying where a build is, e.g. ``Rebuilding: 40 of 120 summaries (layer 1)…``."""
    if event.stage == "embed":
        return f"Rebuilding: embedded {event.done:,} of {count(event.total, 'excerpt')}…"
    if event.stage == "subtrees":
        built = f"Rebuilding: {event.done:,} of {count(event.total, 'source tree')} built"
        if event.summaries:
            return f"{built}, {count(event.summaries, 'summary', 'summaries')} written…"
        return f"{built}…"
    if event.stage == "cluster":
        return f"Rebuilding: clustering layer {event.layer}…"
    if event.stage == "summarise":
        return f"Rebuilding: {event.done:,} of {count(event.total, 'summary', 'summaries')} (layer {event.layer})…"
    return f"Rebuilding: {event.stage}…"


def report_sentence(report: BuildReport) -> str:
    """The build report in one sentence, e.g. "Rebuilt: tree v3 from 15 sources, 1,152 nodes in
    6 layers (977 excerpts); 12 summaries written, 160 reused; 4 language-model calls, 3,100 tokens;
    18.9 s." The model part is left out when no model was called."""
    nodes = count(sum(report.nodes_per_layer.values()), "node")
    layers = count(len(report.nodes_per_layer), "layer")
    tree = f"Rebuilt: tree v{report.version} from {count(report.sources, 'source')}, {nodes} in {layers}"
    summaries = count(report.summaries_made, "summary", "summaries")
    parts = [
        f"{tree} ({count(report.leaves, 'excerpt')})",
        f"{summaries} written, {report.summaries_reused:,} reused",
    ]
    if report.model_calls:
        tokens = report.prompt_tokens + report.completion_tokens
        parts.append(f"{count(report.model_calls, 'language-model call')}, {count(tokens, 'token')}")
    if report.approved_total:
        parts.append(approved_text(report.approved_found, report.approved_total))
    parts.append(f"{seconds(report.wall_seconds)}.")
    sentence = "; ".join(parts)
    if report.forced_over:
        sentence += f" Served although the check would have held it back: {report.forced_over}."
    return sentence


def approved_text(found: int, total: int) -> str:
    """``4 of 30 approved questions find their sources`` (see the regression gate)."""
    verb = "finds its" if total == 1 else "find their"
    return f"{found:,} of {count(total, 'approved question')} {verb} sources"


def unchanged_text(version: int, force: str = FORCE_COMMAND) -> str:
    """A rebuild asked for with nothing to do: the served tree is what it would build (``force``:
    the command that rebuilds anyway where this is read)."""
    return (f"Nothing changed since tree v{version}: no source was added, changed or removed, and the "
            f"settings are the same. Nothing was rebuilt; `{force}` rebuilds anyway.")


def held_back_text(reason: str, force: str = FORCE_COMMAND, check: str = "check") -> str:
    """A rebuild the regression gate held back: why, and how to serve it anyway (``force``, the
    command that does it where this is read; ``check``, the one listing the questions)."""
    return (f"Rebuild held back: {reason}. The tree served now keeps answering; "
            f"`{force}` serves the new one anyway, and `{check}` lists the questions.")


def check_text(check: GateCheck) -> str:
    """The channel's approved questions asked of its served tree: the tally, then one line per question."""
    if not check.total:
        return ("No approved questions yet: a 👍 on an answer, or an admin's correction, adds its question, "
                "and every rebuild must still find their sources before it is served.")
    lines = [f"Tree v{check.version}: {approved_text(check.found, check.total)} (among the first 5 hits)."]
    for result in check.results:
        mark = "✓" if result.found else "✗"
        found_instead = "" if result.found or not result.first_hit else f" (finds “{result.first_hit}” first)"
        lines.append(f"{mark} {result.question}{found_instead}")
    return "\n".join(lines)


def report_text(report: BuildReport) -> str:
    """:func:`report_sentence`, then where the time went: excerpts embedded and reused,
    each stage's time (stages overlap), and the model's tokens and time when it was called."""
    stages = ", ".join(f"{stage} {seconds(spent)}" for stage, spent in report.stage_seconds.items())
    detail = (
        f"Embedded {count(report.leaves_embedded, 'excerpt')}, {report.leaves_reused:,} reused; "
        f"stages (they overlap): {stages or 'none'}."
    )
    if report.model_calls:
        detail += (
            f" Language model: {report.prompt_tokens:,} prompt + {report.completion_tokens:,} "
            f"completion tokens in {seconds(report.model_seconds)}."
        )
    return f"{report_sentence(report)}\n{detail}"


def rebuild_failed_text(reference: str) -> str:
    """A rebuild failed for a reason nobody could foresee (a bug): the log holds ``reference``."""
    return f"The rebuild failed unexpectedly; the previous tree still answers (reference {reference})."
