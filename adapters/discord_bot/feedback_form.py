"""The form a 👎 under an answer opens on Discord: building the modal and reading its submission.

Pure translation, no I/O: :func:`form_for` builds the :class:`discord.ui.Modal` the
button press is answered with, :func:`parse_submission` turns the ``data`` of the
MODAL_SUBMIT interaction that comes back into a :class:`Submission` (an
:class:`Unreadable` when it is not well formed, None when it is no form of the bot's),
and :func:`feedback_event` makes the neutral :class:`~bot.neutral.Feedback` of it.
:func:`~adapters.discord_bot.interaction_events.read_interaction` puts these together;
the client (:meth:`~adapters.discord_bot.interactions.InteractionHandling.on_interaction`)
does the sending and the handling.

Why the answer id travels in the modal's custom id (``raptor:feedback:<answer id>``),
and not on a Modal object waiting for its ``on_submit``: discord.py dispatches a submit
to a Modal object only in the process that sent that modal, while it runs. Discord
delivers the submit as a new interaction to whichever front-end's connection it picks
(with several front-ends, each may see it and the first to claim it in the delivery
ledger answers it), possibly after a restart (a person may take minutes to type). A
stateless custom id is read the same way by every front-end, now or after a restart,
as the buttons' ids are. So the Modal object is never kept (see :func:`form_for`).

Discord's limits: a custom id is at most 100 characters (the 👎 button's id is longer
than the form's, so an answer that has a 👎 always fits), a modal's title and a text
input's label at most 45, a text input's value at most 4,000.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import discord

from adapters.discord_bot.translate import CUSTOM_ID_LIMIT, CUSTOM_ID_PREFIX, Place
from bot.neutral import Feedback, Person

FORM_KIND = "feedback"
FORM_PREFIX = f"{CUSTOM_ID_PREFIX}:{FORM_KIND}:"
FORM_TITLE = "What was wrong with this answer?"
REASON_ID = "reason"
REASON_LABEL = "What was wrong?"
REASON_PLACEHOLDER = "e.g. it is out of date, or it answers another question"
CORRECTION_ID = "correction"
CORRECTION_LABEL = "The right answer (optional)"
CORRECTION_PLACEHOLDER = "A channel admin's right answer becomes a source of this channel"
REASON_MAX = 1000  # a reason is a remark for the channel's admins, not a document
CORRECTION_MAX = 4000  # Discord's limit on a text input's value
TITLE_LIMIT = 45  # Discord's limit on a modal's title and on a text input's label
PLACEHOLDER_LIMIT = 100  # Discord's limit on a text input's placeholder
ROW_TYPE = 1  # an action row
TEXT_INPUT_TYPE = 4
LABEL_TYPE = 18  # Discord's newer layout: a label wrapping one input (in ``component``)


@dataclass(frozen=True, slots=True)
class Submission:
    """A submitted form: the answer it is about, what was wrong and the right answer
    (either may be empty; both are stripped)."""

    answer_id: str
    reason: str
    correction: str


def form_custom_id(answer_id: str) -> str | None:
    """The custom id of the form about ``answer_id``; None when it would not fit Discord's limit."""
    custom_id = FORM_PREFIX + answer_id
    return custom_id if answer_id and len(custom_id) <= CUSTOM_ID_LIMIT else None


def is_form_custom_id(custom_id: str) -> bool:
    """True for the custom id of one of the bot's feedback forms (well formed or not)."""
    return custom_id.startswith(FORM_PREFIX)


def form_for(answer_id: str) -> discord.ui.Modal | None:
    """The modal a 👎 on ``answer_id`` opens; None when its id does not fit a custom id.

    The modal is stopped before it is returned, so that discord.py's ``send_modal`` does
    not keep it in the client's view store (an open modal per press, kept forever with no
    timeout): its submit is read statelessly from the custom id (see the module
    docstring). Must be called on the event loop (discord.py's views need one)."""
    custom_id = form_custom_id(answer_id)
    if custom_id is None:
        return None
    modal = discord.ui.Modal(title=FORM_TITLE, custom_id=custom_id)
    modal.add_item(discord.ui.TextInput(
        label=REASON_LABEL, custom_id=REASON_ID, style=discord.TextStyle.paragraph, required=False,
        max_length=REASON_MAX, placeholder=REASON_PLACEHOLDER))
    modal.add_item(discord.ui.TextInput(
        label=CORRECTION_LABEL, custom_id=CORRECTION_ID, style=discord.TextStyle.paragraph, required=False,
        max_length=CORRECTION_MAX, placeholder=CORRECTION_PLACEHOLDER))
    modal.stop()
    return modal


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A submission of the bot's form that is not well formed: ``problem`` says what is wrong
    with it (the client drops it with a log line saying so)."""

    problem: str


def parse_submission(data: Mapping[str, Any]) -> Submission | Unreadable | None:
    """The submission in a MODAL_SUBMIT interaction's ``data``; None when it is no submission
    of the bot's form (another custom id), :class:`Unreadable` when it is one but not well
    formed. Never raises.

    Well formed: the custom id is the form's with an answer id; ``components`` is a list
    of action rows (or labels) holding text inputs, each with a string ``custom_id`` and
    a string ``value``; the inputs this form does not have are ignored and missing ones
    count as empty (both inputs are optional)."""
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not is_form_custom_id(custom_id):
        return None
    answer_id = custom_id.removeprefix(FORM_PREFIX)
    if not answer_id or len(custom_id) > CUSTOM_ID_LIMIT:
        return Unreadable(f"a feedback form submission naming no answer (custom id {repr(custom_id)[:120]})")
    values = _input_values(data.get("components"))
    if values is None:
        components = repr(data.get("components"))[:200]
        return Unreadable(f"a garbled feedback form submission on answer {answer_id}: components {components}")
    return Submission(answer_id, values.get(REASON_ID, "").strip(), values.get(CORRECTION_ID, "").strip())


def feedback_event(submission: Submission, place: Place, person: Person) -> Feedback:
    """The neutral event of a submitted form."""
    return Feedback(place.key, person, submission.answer_id, submission.reason, submission.correction)


def _input_values(components: Any) -> dict[str, str] | None:
    """The text inputs' values by custom id; None when the layout is not one Discord sends."""
    if not isinstance(components, list):
        return None
    values: dict[str, str] = {}
    for holder in components:
        if not isinstance(holder, Mapping):
            return None
        if holder.get("type") == ROW_TYPE:
            inputs = holder.get("components")
        elif holder.get("type") == LABEL_TYPE:
            inputs = [holder.get("component")]
        else:
            return None
        if not isinstance(inputs, list):
            return None
        for item in inputs:
            if not isinstance(item, Mapping):
                return None
            if item.get("type") != TEXT_INPUT_TYPE:
                continue  # a component a newer form might hold; not one of ours
            input_id, value = item.get("custom_id"), item.get("value", "")
            if not isinstance(input_id, str) or not isinstance(value, str):
                return None
            values[input_id] = value
    return values
