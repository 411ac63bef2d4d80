"""The feedback form a 👎 on an answer opens: the modal, and its submission as a neutral event.

Pure: nothing here performs input/output. Contract:

* :func:`feedback_view` is the modal (``views.open``) for one answer: two optional
  multiline inputs (what was wrong, the right answer), callback id :data:`CALLBACK_FEEDBACK`,
  and ``private_metadata`` holding, as JSON, everything the submission needs (the answer id,
  the channel and the thread to answer in): Slack sends the modal's state back
  without the message it was opened from. None when that does not fit Slack's limit;
* :func:`submission` reads a ``view_submission`` payload of that modal into a
  :class:`Submission`; anything else (another callback id, missing or garbled metadata,
  no person) gives None and never raises, so a malformed submission is dropped with a
  log line by the caller;
* :func:`feedback` makes the :class:`~bot.neutral.Feedback` event of a submission. Both
  fields may be empty: the 👎 is still recorded, with an empty reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from adapters.slack.payload import Origin, Payload, as_mapping, as_text
from bot.neutral import ChannelKey, Feedback, Person

CALLBACK_FEEDBACK = "raptor_feedback"  # the modal's callback id (the app listens to the raptor_ prefix)
BLOCK_REASON = "raptor_feedback_reason"
BLOCK_CORRECTION = "raptor_feedback_correction"
# The inputs' action ids do not start with "raptor_": input elements send no block_actions
# unless dispatch_action is set, but keeping them apart from our buttons' ids makes sure
# the click listener could never take them for a button.
ACTION_REASON = "reason"
ACTION_CORRECTION = "correction"

TITLE = "What was wrong?"  # Slack allows 24 characters in a modal's title
REASON_LABEL = "What was wrong?"
CORRECTION_LABEL = "The right answer (optional; a channel admin's becomes a source of this channel)"
MAX_METADATA = 3000  # Slack's limit on a view's private_metadata, in characters
MAX_INPUT = 3000  # the most a plain_text_input takes (Slack's own limit)


@dataclass(frozen=True, slots=True)
class Submission:
    """A submitted feedback form: where the answer was (``origin``: team, channel, the person
    who submitted, the thread to reply in as ``thread_ts``), which answer, and the two fields
    (stripped; empty when left blank)."""

    origin: Origin
    answer_id: str
    reason: str
    correction: str


def metadata(origin: Origin, answer_id: str) -> str:
    """The modal's ``private_metadata``: the answer id, the channel and the thread (the clicked
    message's thread, else the message itself, which is where answers are). No team: the
    installing workspace's is known, and a submitter's own may be another organisation's."""
    return json.dumps({"answer": answer_id, "channel": origin.channel,
                       "thread": origin.thread_ts or origin.ts}, separators=(",", ":"))


def feedback_view(origin: Origin, answer_id: str) -> dict[str, Any] | None:
    """The modal a 👎 on the answer ``answer_id`` clicked at ``origin`` opens; None when its
    metadata would not fit Slack's 3,000 characters (the click then stays a plain 👎)."""
    private = metadata(origin, answer_id)
    if len(private) > MAX_METADATA:
        return None
    return {
        "type": "modal",
        "callback_id": CALLBACK_FEEDBACK,
        "title": {"type": "plain_text", "text": TITLE},
        "submit": {"type": "plain_text", "text": "Send"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "private_metadata": private,
        "blocks": [
            _input(BLOCK_REASON, ACTION_REASON, REASON_LABEL),
            _input(BLOCK_CORRECTION, ACTION_CORRECTION, CORRECTION_LABEL),
        ],
    }


def _input(block_id: str, action_id: str, label: str) -> dict[str, Any]:
    return {
        "type": "input",
        "block_id": block_id,
        "optional": True,
        "label": {"type": "plain_text", "text": label},
        "element": {"type": "plain_text_input", "action_id": action_id, "multiline": True, "max_length": MAX_INPUT},
    }


def submission(body: Payload, team: str) -> Submission | None:
    """The feedback form submitted in ``body`` (a ``view_submission`` payload), about an answer in
    the installing workspace ``team`` (neither the metadata nor the submitter's workspace picks the
    channel's tree); None when it is not our form's or cannot be read (missing or garbled
    metadata, no person, no answer id)."""
    view = as_mapping(body.get("view"))
    if body.get("type") != "view_submission" or view.get("callback_id") != CALLBACK_FEEDBACK:
        return None
    try:
        meta = json.loads(as_text(view.get("private_metadata")))
    except ValueError:
        return None
    meta = as_mapping(meta)
    user = as_mapping(body.get("user"))
    answer_id, channel = as_text(meta.get("answer")).strip(), as_text(meta.get("channel"))
    origin = Origin(team=team, channel=channel, user=as_text(user.get("id")), thread_ts=as_text(meta.get("thread")))
    if not (answer_id and team and channel and origin.user):
        return None
    values = as_mapping(as_mapping(view.get("state")).get("values"))
    return Submission(origin, answer_id, _value(values, BLOCK_REASON, ACTION_REASON),
                      _value(values, BLOCK_CORRECTION, ACTION_CORRECTION))


def _value(values: Payload, block_id: str, action_id: str) -> str:
    """An input's text as Slack sends it (``values[block][action]["value"]``; None when blank)."""
    return as_text(as_mapping(as_mapping(values.get(block_id)).get(action_id)).get("value")).strip()


def feedback(form: Submission, person: Person, key: ChannelKey | None = None) -> Feedback:
    """The neutral event of a submitted form, by ``person`` (who submitted it), about the material
    of ``key`` (by default the channel of the answer it is about)."""
    return Feedback(key or form.origin.key, person, form.answer_id, form.reason, form.correction)
