"""Discord's limits on what the bot sends, and the 400 answers Discord gives to a body that breaks
them: a message's content, embeds and components, a modal response, and a Components v2 message
(whose section also reads a v2 layout as a person does). Each check returns (status, error body),
or None when Discord would accept the body.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from testkit.discord_payloads import MODAL_SUBMIT

# Discord's limits on a message (https://discord.com/developers/docs/resources/message).
CONTENT_LIMIT = 2000
EMBEDS_PER_MESSAGE = 10
EMBED_TOTAL = 6000
EMBED_TITLE = 256
EMBED_DESCRIPTION = 4096
EMBED_FIELDS = 25
FIELD_NAME = 256
FIELD_VALUE = 1024
FOOTER_TEXT = 2048
AUTHOR_NAME = 256
ACTION_ROWS = 5
ROW_WIDTH = 5
CUSTOM_ID = 100
BUTTON_LABEL = 80
MODAL_TITLE = 45  # a modal's title, and a text input's label
MODAL_ROWS = 5
TEXT_INPUT_VALUE = 4000


# -- Components v2 (answers as one message) -------------------------------------------------
#
# From Discord's docs (docs.discord.com/developers/components, "Using Message Components" and
# the component reference; resources/message "Message Flags" and "Edit Message"): a message sent
# with the flag IS_COMPONENTS_V2 (1 << 15) has no ``content`` nor ``embeds``, up to 40 components
# in all (nested ones included), and at most 4,000 characters of text over all of them; an edit
# may set the flag (never unset it) when ``content`` is null and ``embeds`` empty. Component types
# as discord.py 2.7 sends them (``discord.enums.ComponentType``): 1 action row, 2 button, 10 text
# display, 14 separator, 17 container; discord.py sets the flag itself for a ``LayoutView``
# (``http.handle_message_parameters``).

IS_COMPONENTS_V2 = 1 << 15
V2_TEXT_LIMIT = 4000
V2_COMPONENTS_LIMIT = 40
TEXT_DISPLAY = 10


def is_components_v2(body: Mapping[str, Any]) -> bool:
    return bool(int(body.get("flags") or 0) & IS_COMPONENTS_V2)


def all_components(components: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Every component, nested ones included (a section's accessory too), depth first."""
    found: list[Mapping[str, Any]] = []
    for component in components:
        found.append(component)
        found += all_components(component.get("components") or [])
        if component.get("accessory"):
            found += all_components([component["accessory"]])
    return found


def layout_text(message: Mapping[str, Any]) -> str:
    """What a person reads in a Components v2 message: its text displays, in order."""
    return "\n".join(c.get("content") or "" for c in all_components(message.get("components") or [])
                     if c.get("type") == TEXT_DISPLAY)


def layout_custom_ids(message: Mapping[str, Any]) -> list[str]:
    """The custom ids of a Components v2 message's buttons, in order."""
    return [c["custom_id"] for c in all_components(message.get("components") or []) if c.get("custom_id")]


def _form_error(field: str, code: str, message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"code": 50035, "message": "Invalid Form Body",
                 "errors": {field: {"_errors": [{"code": code, "message": message}]}}}


def components_v2_errors(body: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """Discord's answer to a Components v2 message it refuses (legacy fields, over its limits),
    as (status, error body); None if valid."""
    if body.get("content") or body.get("embeds"):
        field = "content" if body.get("content") else "embeds"
        return _form_error(field, "MESSAGE_CANNOT_USE_LEGACY_FIELDS_WITH_COMPONENTS_V2",
                           f"The '{field}' field cannot be used when using MessageFlags.IS_COMPONENTS_V2")
    components = all_components(body.get("components") or [])
    if not components:
        return _form_error("components", "BASE_TYPE_REQUIRED", "This field is required")
    if len(components) > V2_COMPONENTS_LIMIT:
        return _form_error("components", "BASE_TYPE_MAX_LENGTH", f"Must be {V2_COMPONENTS_LIMIT} or fewer in length.")
    text = sum(len(c.get("content") or "") + len(c.get("label") or "") for c in components)
    if text > V2_TEXT_LIMIT:
        return _form_error("components", "COMPONENT_MAX_TOTAL_TEXT_LENGTH_EXCEEDED",
                           f"The total text length of all components must be {V2_TEXT_LIMIT} or fewer.")
    return None


def components_v2_refusal() -> tuple[int, dict[str, Any]]:
    """What an API without Components v2 answers to one: the 400 "Invalid Form Body" of a
    message flag it does not know (the shape of Discord's form errors; the code is ours)."""
    return _form_error("flags", "MESSAGE_FLAGS_INVALID", "Invalid message flags")


# -- limits --------------------------------------------------------------------------


def too_long(limit: int) -> dict[str, Any]:
    """The error of one field longer than ``limit``, as Discord nests it under the field's name
    in an "Invalid Form Body" answer (the REST routes use it for a thread's name too)."""
    return {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": f"Must be {limit} or fewer in length."}]}


def _required() -> dict[str, Any]:
    return {"_errors": [{"code": "BASE_TYPE_REQUIRED", "message": "This field is required"}]}


def _required_text_errors(item: Mapping[str, Any], limits: Iterable[tuple[str, int]]) -> dict[str, Any]:
    """The errors of ``item``'s required text fields, by key: blank, or longer than its limit."""
    errors: dict[str, Any] = {}
    for key, limit in limits:
        text = item.get(key) or ""
        if not text.strip():
            errors[key] = _required()
        elif len(text) > limit:
            errors[key] = too_long(limit)
    return errors


def embed_length(embed: Mapping[str, Any]) -> int:
    """The characters of an embed that count towards Discord's 6,000."""
    total = len(embed.get("title") or "") + len(embed.get("description") or "")
    total += len((embed.get("footer") or {}).get("text") or "") + len((embed.get("author") or {}).get("name") or "")
    for item in embed.get("fields") or []:
        total += len(item.get("name") or "") + len(item.get("value") or "")
    return total


def _embed_errors(embed: Mapping[str, Any]) -> dict[str, Any]:
    errors: dict[str, Any] = {}
    for key, limit in (("title", EMBED_TITLE), ("description", EMBED_DESCRIPTION)):
        if len(embed.get(key) or "") > limit:
            errors[key] = too_long(limit)
    if len((embed.get("footer") or {}).get("text") or "") > FOOTER_TEXT:
        errors["footer"] = {"text": too_long(FOOTER_TEXT)}
    if len((embed.get("author") or {}).get("name") or "") > AUTHOR_NAME:
        errors["author"] = {"name": too_long(AUTHOR_NAME)}
    fields = embed.get("fields") or []
    if len(fields) > EMBED_FIELDS:
        errors["fields"] = too_long(EMBED_FIELDS)
    for index, item in enumerate(fields):
        problems = _required_text_errors(item, (("name", FIELD_NAME), ("value", FIELD_VALUE)))
        if problems:
            errors.setdefault("fields", {})[str(index)] = problems
    return errors


def _component_errors(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    errors: dict[str, Any] = {}
    if len(rows) > ACTION_ROWS:
        errors["_errors"] = too_long(ACTION_ROWS)["_errors"]
    for index, row in enumerate(rows):
        items = row.get("components") or []
        problems: dict[str, Any] = {}
        if len(items) > ROW_WIDTH:
            problems["components"] = too_long(ROW_WIDTH)
        for position, item in enumerate(items):
            bad: dict[str, Any] = {}
            if len(item.get("custom_id") or "") > CUSTOM_ID:
                bad["custom_id"] = too_long(CUSTOM_ID)
            if len(item.get("label") or "") > BUTTON_LABEL:
                bad["label"] = too_long(BUTTON_LABEL)
            if bad:
                problems.setdefault("components", {})[str(position)] = bad
        if problems:
            errors[str(index)] = problems
    return errors


def modal_errors(data: Mapping[str, Any], interaction_kind: int) -> tuple[int, dict[str, Any]] | None:
    """Discord's answer to a modal response it refuses (to a modal submit, or over its
    limits), as (status, error body); None if valid."""
    if interaction_kind == MODAL_SUBMIT:  # a modal cannot answer a modal
        return 400, {"code": 50035, "message": "Invalid Form Body",
                     "errors": {"type": {"_errors": [{"code": "BASE_TYPE_CHOICES",
                                                      "message": "Value must be one of {4, 5, 6, 7, 10, 12}."}]}}}
    errors = _required_text_errors(data, (("title", MODAL_TITLE), ("custom_id", CUSTOM_ID)))
    rows = data.get("components") or []
    if not rows or len(rows) > MODAL_ROWS:
        errors["components"] = _required() if not rows else too_long(MODAL_ROWS)
    for index, row in enumerate(rows):
        for position, item in enumerate(row.get("components") or []):
            bad = {key: too_long(limit) for key, limit in (("label", MODAL_TITLE), ("custom_id", CUSTOM_ID))
                   if len(item.get(key) or "") > limit}
            if int(item.get("max_length") or 0) > TEXT_INPUT_VALUE:
                bad["max_length"] = too_long(TEXT_INPUT_VALUE)
            if bad:
                errors.setdefault("components", {}).setdefault(str(index), {"components": {}})["components"][
                    str(position)] = bad
    return (400, {"code": 50035, "errors": errors, "message": "Invalid Form Body"}) if errors else None


def message_errors(body: Mapping[str, Any], files: int = 0) -> tuple[int, dict[str, Any]] | None:
    """Discord's answer to a message body over its limits, as (status, error body); None if valid."""
    if is_components_v2(body):
        return components_v2_errors(body)
    errors: dict[str, Any] = {}
    content = body.get("content") or ""
    if len(content) > CONTENT_LIMIT:
        errors["content"] = too_long(CONTENT_LIMIT)
    embeds = body.get("embeds") or []
    if len(embeds) > EMBEDS_PER_MESSAGE:
        errors["embeds"] = too_long(EMBEDS_PER_MESSAGE)
    for index, embed in enumerate(embeds):
        problems = _embed_errors(embed)
        if problems:
            errors.setdefault("embeds", {})[str(index)] = problems
    if sum(embed_length(e) for e in embeds) > EMBED_TOTAL:
        errors.setdefault("embeds", {}).setdefault("_errors", []).append(
            {"code": "MAX_EMBED_SIZE_EXCEEDED", "message": f"Embed size exceeds maximum size of {EMBED_TOTAL}"}
        )
    component_problems = _component_errors(body.get("components") or [])
    if component_problems:
        errors["components"] = component_problems
    if errors:
        return 400, {"code": 50035, "errors": errors, "message": "Invalid Form Body"}
    if not content.strip() and not embeds and not files and not body.get("components") and not body.get("attachments"):
        return 400, {"code": 50006, "message": "Cannot send an empty message"}
    return None
