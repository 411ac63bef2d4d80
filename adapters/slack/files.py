"""Pure translation of Slack's files: a file object as a :class:`SlackFile`, a downloaded
file as an :class:`~bot.neutral.Upload`, and telling Slack's sign-in page from a file.

Contract: :func:`slack_file` never raises (no id gives None); a file Slack does not let
the bot read keeps an empty ``url``, which the app reports instead of downloading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.slack.payload import Origin, as_int, as_text
from bot.neutral import Person, Upload


@dataclass(frozen=True, slots=True)
class SlackFile:
    """A file as Slack describes it. ``url`` is ``url_private_download`` (else
    ``url_private``): empty when Slack sent only the id, then ``files.info`` tells the rest."""

    id: str
    name: str = ""
    title: str = ""
    mimetype: str = ""
    url: str = ""
    permalink: str = ""
    size: int = 0

    @property
    def filename(self) -> str:
        return self.name or self.title or self.id


def slack_file(raw: Mapping[str, Any]) -> SlackFile | None:
    """A file object of an event or of ``files.info``; None without an id. Files Slack
    does not let the bot read (``mode`` tombstone/hidden_by_limit, external links) keep an
    empty ``url``, which the app reports."""
    file_id = as_text(raw.get("id"))
    if not file_id:
        return None
    readable = raw.get("mode") not in ("tombstone", "hidden_by_limit", "external") and not raw.get("is_external")
    url = (as_text(raw.get("url_private_download")) or as_text(raw.get("url_private"))) if readable else ""
    return SlackFile(
        id=file_id,
        name=as_text(raw.get("name")),
        title=as_text(raw.get("title")),
        mimetype=as_text(raw.get("mimetype")),
        url=url,
        permalink=as_text(raw.get("permalink")),
        size=as_int(raw.get("size")),
    )


def upload(origin: Origin, person: Person, file: SlackFile, data: bytes) -> Upload:
    """A downloaded file as an upload, linked by its permalink, its file id as external id.
    Its size is the one Slack states: the download stops one byte past the limit."""
    return Upload(origin.key, person, file.filename, data, link=file.permalink, external_id=file.id,
                  size=file.size or None)


LOGIN_PAGE_PROBLEM = (
    "Slack sent a sign-in page instead of the file, which means the bot token is wrong or lacks "
    "the files:read scope (an admin can add it and reinstall the app)."
)


def is_login_page(content_type: str, file: SlackFile) -> bool:
    """True when a download answered HTML for a file that is not HTML: Slack's sign-in page,
    which it serves (with status 200) to a wrong token or one without ``files:read``."""
    served = content_type.split(";", 1)[0].strip().lower()
    return served == "text/html" and file.mimetype.lower() != "text/html"
