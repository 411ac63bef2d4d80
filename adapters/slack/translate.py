"""Pure translation for Slack: payloads in, neutral events (or what is still missing) out.

This module is the one place the rest of the adapter (and the tests) import the
translation from; each concern lives in a module of its own, and every name is
re-exported here unchanged:

* :mod:`adapters.slack.payload` — the shared vocabulary: who the bot is
  (:class:`BotIdentity`), where something arrived (:class:`Origin`), channel keys,
  pinned messages' external ids, Slack markup as plain text, people;
* :mod:`adapters.slack.events` — :func:`classify_event` (an Events API payload into
  :class:`Asked`, :class:`FollowUp`, :class:`FilesShared`, :class:`FileNotice`,
  :class:`Pinned`, :class:`Unpinned` or :class:`Ignored`) and the builders
  :func:`question`, :func:`pin`, :func:`unpin`;
* :mod:`adapters.slack.threads` — reading a thread: whether the bot answered there
  (:data:`ANSWER_BLOCK`), a follow-up's context, a pinned thread;
* :mod:`adapters.slack.interactions` — slash commands and button clicks
  (:func:`command`, :func:`read_click` into a :class:`Click`; :func:`vote_value` for the
  native feedback element's buttons);
* :mod:`adapters.slack.feedback_form` — the form a 👎 opens (:func:`feedback_view`) and its
  submission (:func:`submission`, :func:`feedback`);
* :mod:`adapters.slack.files` — :class:`SlackFile`, :func:`upload`, Slack's sign-in page;
* :mod:`adapters.slack.failures` — what people read when Slack itself fails.

Nothing here performs input/output, and classification never raises on odd payloads:
a missing or mistyped field gives :class:`Ignored` (or an empty string), so a
malformed event is dropped with a log line, not an exception.
"""

from __future__ import annotations

from adapters.slack.events import (
    Arrival,
    Asked,
    FileNotice,
    FilesShared,
    FollowUp,
    Ignored,
    Pinned,
    Unpinned,
    classify_event,
    pin,
    question,
    unpin,
)
from adapters.slack.failures import api_failure_text, download_failure_text, posting_failure_text
from adapters.slack.feedback_form import CALLBACK_FEEDBACK, Submission, feedback, feedback_view, submission
from adapters.slack.files import LOGIN_PAGE_PROBLEM, SlackFile, is_login_page, slack_file, upload
from adapters.slack.interactions import (
    ACTION_FEEDBACK,
    ACTION_NODE,
    ACTION_PREFIX,
    ACTION_VOTE_DOWN,
    ACTION_VOTE_UP,
    Click,
    action_origin,
    command,
    read_click,
    slash_origin,
    vote_value,
)
from adapters.slack.payload import (
    PLATFORM,
    WORKING_REACTION,
    BotIdentity,
    Origin,
    Payload,
    channel_key,
    mentions,
    message_external_id,
    person_from_user,
    plain_text,
)
from adapters.slack.threads import (
    ANSWER_BLOCK,
    MAX_CONTEXT_MESSAGES,
    QUESTION_BLOCK,
    bot_answered,
    context_text,
    is_bot_message,
    pinned_thread,
    thread_context,
)

__all__ = [
    "ACTION_FEEDBACK", "ACTION_NODE", "ACTION_PREFIX", "CALLBACK_FEEDBACK", "ACTION_VOTE_DOWN", "ACTION_VOTE_UP", "ANSWER_BLOCK", "LOGIN_PAGE_PROBLEM",
    "MAX_CONTEXT_MESSAGES", "PLATFORM", "QUESTION_BLOCK", "WORKING_REACTION",
    "Arrival", "Asked", "BotIdentity", "Click", "FileNotice", "FilesShared", "FollowUp", "Ignored", "Origin", "Payload",
    "Pinned", "SlackFile", "Submission", "Unpinned",
    "action_origin", "api_failure_text", "bot_answered", "channel_key", "classify_event", "command",
    "context_text", "download_failure_text", "feedback", "feedback_view", "is_bot_message", "is_login_page", "mentions", "message_external_id",
    "person_from_user", "pin", "pinned_thread", "plain_text", "posting_failure_text", "question", "read_click",
    "slack_file", "slash_origin", "submission", "thread_context", "unpin", "upload", "vote_value",
]
