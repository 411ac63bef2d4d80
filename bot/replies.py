"""What the bot says: every text a person reads, from one import.

The texts live by subject in :mod:`bot.texts` (see its docstring); this module
re-exports them so callers (handler, rebuilds, command line, adapters) import one
place. They are pure functions, engine results in, neutral replies and short texts
out; counts, moments, short ids, sizes and waits are always written by
:mod:`bot.texts.words` (:func:`count`, :func:`when`, :func:`short_id`, ...).
"""

from __future__ import annotations

from bot.texts.answers import (
    CHANGED_ANSWER,
    EMPTY_QUESTION,
    NO_MATERIAL,
    UNSUPPORTED_NOTE,
    answer_reply,
    answer_text,
    ask_your_own_text,
    broke_off_text,
    changed_answer_notice,
    changed_note,
    citation_line,
    citation_view,
    cited_text,
    demo_question_text,
    feedback_report_text,
    feedback_text,
    hit_line,
    vote_text,
)
from bot.texts.assistant import (
    DISTRIBUTED_CORRECTION,
    DISTRIBUTED_REFUSAL,
    GENERAL_PROMPTS,
    PROMPTS_TITLE,
    channel_prompts,
    not_a_member_text,
    stage_text,
)
from bot.texts.outline import outline_text
from bot.texts.requests import (
    SHARED_CHANNEL,
    empty_channel_text,
    error_text,
    help_text,
    model_budget_text,
    question_limit_text,
    rebuild_limit_text,
    refusal_text,
    source_cap_text,
    stored_cap_text,
    unexpected_text,
    unknown_channel_text,
    upload_budget_text,
    upload_limit_text,
    usage_text,
)
from bot.texts.session import SESSION_ENDED, SESSION_STARTING, serving_text
from bot.texts.sources import (
    FILE_TYPES,
    added_text,
    forgot_text,
    ingested_text,
    rejected_text,
    replaced_text,
    sample_text,
    source_choice_text,
    sources_text,
    too_large_text,
    unpin_kept_text,
    unpinned_text,
    updated_text,
)
from bot.texts.tree import (
    FORCE_COMMAND,
    REBUILD_ENQUEUED,
    REBUILD_INTERRUPTED,
    REBUILD_QUEUED_BEHIND,
    REBUILD_STARTED,
    REBUILDS_WAIT,
    approved_text,
    check_text,
    held_back_text,
    layers_text,
    node_text,
    progress_text,
    rebuild_failed_text,
    report_sentence,
    report_text,
    stats_text,
    status_text,
    unchanged_text,
)
from bot.texts.words import MEGABYTE, SHORT_ID, count, in_time, megabytes, short_id, when

__all__ = [
    "CHANGED_ANSWER", "changed_answer_notice", "changed_note", "replaced_text",
    "EMPTY_QUESTION", "FILE_TYPES", "FORCE_COMMAND", "unchanged_text", "UNSUPPORTED_NOTE", "approved_text", "check_text", "held_back_text", "MEGABYTE", "NO_MATERIAL", "REBUILD_ENQUEUED", "REBUILD_INTERRUPTED", "REBUILD_QUEUED_BEHIND", "REBUILD_STARTED", "REBUILDS_WAIT", "SESSION_ENDED", "SESSION_STARTING", "SHARED_CHANNEL",
    "SHORT_ID", "serving_text",
    "added_text", "answer_reply", "answer_text", "broke_off_text", "ask_your_own_text", "citation_line", "citation_view", "cited_text",
    "count", "demo_question_text",
    "empty_channel_text", "error_text", "feedback_report_text", "feedback_text", "forgot_text", "help_text", "hit_line", "in_time", "ingested_text",
    "layers_text", "megabytes", "model_budget_text", "node_text", "outline_text", "progress_text",
    "question_limit_text", "rebuild_failed_text", "rebuild_limit_text", "refusal_text",
    "rejected_text", "report_sentence", "report_text", "sample_text", "short_id",
    "source_cap_text", "source_choice_text", "sources_text", "stats_text", "status_text",
    "stored_cap_text",
    "too_large_text", "unexpected_text", "unknown_channel_text", "unpin_kept_text", "unpinned_text", "updated_text",
    "upload_budget_text", "upload_limit_text", "usage_text", "vote_text", "when",
    # the assistant container (bot.texts.assistant)
    "DISTRIBUTED_CORRECTION", "DISTRIBUTED_REFUSAL", "GENERAL_PROMPTS", "PROMPTS_TITLE", "channel_prompts", "not_a_member_text",
    "stage_text",
]
