"""What Slack accepts in a message or a modal, and how it keeps a message's blocks.

The stand-in's Web API (:mod:`testkit.slack_web_api`, :mod:`testkit.slack_streaming`) refuses
what Slack would refuse with these checks, so a test sees the error the real Slack returns:
over 50 blocks, a section or context text over 3,000 characters, markdown blocks over 12,000
characters together, a duplicate block id, oversized buttons, a malformed ``context_actions``
block → ``invalid_blocks``; a ``text`` over 40,000 characters → ``msg_too_long``.
Pure functions over the parameters as sent; no state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Slack's limits, as Slack applies them (independent of the adapter's constants on purpose).
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_MARKDOWN_TEXT = 12_000  # over all the markdown blocks of one message
MAX_TEXT = 40_000
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_BLOCK_ID = 255
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTION_ELEMENTS = 25
MAX_STREAM_TEXT = 12_000  # characters of markdown_text per streaming call


def as_slack_keeps(blocks: Any) -> list[Any]:
    """A message's blocks as Slack stores them: a markdown block's ``block_id`` dropped
    (Slack's reference: it "is ignored … and will not be retained")."""
    kept = []
    for block in blocks or []:
        if isinstance(block, dict) and block.get("type") == "markdown":
            block = {key: value for key, value in block.items() if key != "block_id"}
        kept.append(block)
    return kept


def view_problem(view: Mapping[str, Any]) -> str:
    """Why Slack would refuse a modal (its basic shape only), or empty when it looks right."""
    title, blocks = view.get("title"), view.get("blocks")
    if view.get("type") != "modal":
        return "not a modal"
    if not (isinstance(title, dict) and title.get("type") == "plain_text" and 0 < len(str(title.get("text", ""))) <= 24):
        return "a modal's title is plain_text of 1-24 characters"
    if not isinstance(blocks, list) or not 0 < len(blocks) <= 100:
        return "a modal holds 1-100 blocks"
    if len(str(view.get("private_metadata", ""))) > 3000 or len(str(view.get("callback_id", ""))) > 255:
        return "private_metadata over 3,000 or callback_id over 255 characters"
    inputs = [b for b in blocks if isinstance(b, dict) and b.get("type") == "input"]
    for block in inputs:
        label, element = block.get("label"), block.get("element")
        if not (isinstance(label, dict) and label.get("type") == "plain_text"
                and 0 < len(str(label.get("text", ""))) <= 2000):
            return "an input's label is plain_text of 1-2,000 characters"
        if not (isinstance(element, dict) and element.get("action_id")
                and element.get("type") == "plain_text_input"):
            return "an input needs an element with an action_id"
    if inputs and not isinstance(view.get("submit"), dict):
        return "a modal with inputs needs a submit button"
    return ""


def message_problem(params: Mapping[str, Any]) -> str:
    """Slack's error for a message over its limits, or empty when it is acceptable."""
    text = params.get("text") or ""
    blocks = params.get("blocks")
    if isinstance(blocks, str):
        try:
            blocks = json.loads(blocks)
        except ValueError:
            return "invalid_blocks_format"
    if not text and not blocks:
        return "no_text"
    if len(str(text)) > MAX_TEXT:
        return "msg_too_long"
    if blocks is None:
        return ""
    if not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS:
        return "invalid_blocks"
    ids: set[str] = set()
    for block in blocks:
        if not isinstance(block, dict) or not _block_ok(block):
            return "invalid_blocks"
        block_id = block.get("block_id")
        if block_id is not None:
            if block_id in ids or not (0 < len(str(block_id)) <= MAX_BLOCK_ID):
                return "invalid_blocks"
            ids.add(block_id)
    markdown = sum(len(block["text"]) for block in blocks if block.get("type") == "markdown")
    if markdown > MAX_MARKDOWN_TEXT:
        return "invalid_blocks"
    return ""


def _text_ok(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("text"), str) and 0 < len(obj["text"]) <= MAX_SECTION_TEXT


def _button_ok(element: Any) -> bool:
    if not isinstance(element, dict) or element.get("type") != "button":
        return False
    label = element.get("text") or {}
    return (isinstance(label.get("text"), str) and 0 < len(label["text"]) <= MAX_BUTTON_TEXT
            and len(str(element.get("value", ""))) <= MAX_BUTTON_VALUE and bool(element.get("action_id")))


def _block_ok(block: dict[str, Any]) -> bool:
    kind = block.get("type")
    if kind == "section":
        accessory = block.get("accessory")
        return _text_ok(block.get("text")) and (accessory is None or _button_ok(accessory))
    if kind == "context":
        elements = block.get("elements")
        return (isinstance(elements, list) and 0 < len(elements) <= MAX_CONTEXT_ELEMENTS
                and all(_text_ok(e) for e in elements))
    if kind == "actions":
        elements = block.get("elements")
        action_ids = [e.get("action_id") for e in elements or () if isinstance(e, dict)]
        return (isinstance(elements, list) and 0 < len(elements) <= MAX_ACTION_ELEMENTS
                and all(_button_ok(e) for e in elements) and len(set(action_ids)) == len(action_ids))
    if kind == "markdown":  # standard Markdown as a plain string; the limit is per message
        return isinstance(block.get("text"), str) and bool(block["text"])
    if kind == "context_actions":
        return context_actions_ok(block)
    return kind in ("divider", "header", "image")


# -- native feedback (issue 30, point 3): the context_actions block and its feedback_buttons --
# Shapes from Slack's reference (docs.slack.dev/reference/block-kit/blocks/context-actions-block and
# .../block-elements/feedback-buttons-element) and slack_sdk's models and tests
# (slack_sdk/models/blocks: ContextActionsBlock, FeedbackButtonsElement, FeedbackButtonObject;
# tests/slack_sdk_async/web/test_async_chat_stream.py stops a stream with such a block).

MAX_CONTEXT_ACTIONS = 5  # elements of a context_actions block
MAX_ACTION_ID = 255


def context_actions_ok(block: Mapping[str, Any]) -> bool:
    """Whether Slack accepts a ``context_actions`` block: 1-5 elements, each a valid
    ``feedback_buttons`` (an ``icon_button`` needs its icon and text)."""
    elements = block.get("elements")
    if not isinstance(elements, list) or not 0 < len(elements) <= MAX_CONTEXT_ACTIONS:
        return False
    return all(_feedback_buttons_ok(e) or _icon_button_ok(e) for e in elements)


def _feedback_buttons_ok(element: Any) -> bool:
    if not isinstance(element, dict) or element.get("type") != "feedback_buttons":
        return False
    if len(str(element.get("action_id", ""))) > MAX_ACTION_ID:
        return False
    return all(_feedback_button_ok(element.get(side)) for side in ("positive_button", "negative_button"))


def _feedback_button_ok(button: Any) -> bool:
    """A feedback button: plain_text of 1-75 characters, a value of 1-2,000."""
    if not isinstance(button, dict):
        return False
    text, value = button.get("text"), button.get("value")
    return (isinstance(text, dict) and text.get("type") == "plain_text"
            and 0 < len(str(text.get("text", ""))) <= MAX_BUTTON_TEXT
            and isinstance(value, str) and 0 < len(value) <= MAX_BUTTON_VALUE)


def _icon_button_ok(element: Any) -> bool:
    return isinstance(element, dict) and element.get("type") == "icon_button" and bool(element.get("icon")) \
        and _text_ok(element.get("text"))


def stop_blocks_problem(params: Mapping[str, Any]) -> str:
    """Slack's error for the ``blocks`` of ``chat.stopStream`` (checked as a message's), or empty."""
    blocks = params.get("blocks")
    return message_problem({"blocks": blocks}) if blocks else ""


def feedback_element(message: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``context_actions`` block of ``message`` and its ``feedback_buttons`` element; LookupError if none."""
    for block in message.get("blocks") or ():
        if isinstance(block, dict) and block.get("type") == "context_actions":
            for element in block.get("elements") or ():
                if isinstance(element, dict) and element.get("type") == "feedback_buttons":
                    return block, element
    raise LookupError(f"message {message.get('ts')} has no feedback_buttons element")
