"""What people read when Slack itself fails: short notes naming what could not be done,
a hint at the fix, and the reference of the log line. Pure text, no input/output."""

from __future__ import annotations

_API_HINTS = {
    "not_in_channel": "I am not a member of this channel: invite me (/invite) and try again.",
    "channel_not_found": "Slack does not let me see this conversation: invite me to it and try again.",
    "is_archived": "This channel is archived, so I cannot post in it.",
    "missing_scope": "The Slack app lacks a permission it needs; its admin should reinstall it from the manifest.",
    "ratelimited": "Slack is limiting how fast I may post; please try again in a minute.",
    "invalid_auth": "My Slack token was refused; tell the bot's operator.",
    "token_revoked": "My Slack token was revoked; tell the bot's operator.",
    "account_inactive": "My Slack token was revoked; tell the bot's operator.",
}


def api_failure_text(error: str, reference: str, action: str = "finish that") -> str:
    """The short note sent when Slack refused a call of the bot (``error`` is Slack's error
    code, or the name of a network failure): what could not be done, a hint, the reference
    of the log line."""
    hint = _API_HINTS.get(error, "Please try again; if it keeps happening, tell the bot's operator.")
    return f"I could not {action} (Slack said: {error}). {hint} (reference {reference})"


def posting_failure_text(error: str, reference: str) -> str:
    """:func:`api_failure_text` for a reply Slack refused to take."""
    return api_failure_text(error, reference, "post my reply here")


def download_failure_text(filename: str, problem: str, reference: str) -> str:
    """The note sent when a shared file could not be downloaded (``problem`` says why)."""
    return f"I could not download “{filename}”: {problem} Nothing was added. (reference {reference})"
