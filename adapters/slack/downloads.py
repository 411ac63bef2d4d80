"""Downloading the files people share, with the bot token, from Slack only.

Contract: :class:`Downloader` raises :class:`DownloadError` with a sentence for the
person (a sign-in page served instead of the file is named as a token or
``files:read`` problem). It sends the bot token only to Slack's own hosts
(:func:`carries_token`): a file link pointing anywhere else is refused before any
request is made. Downloads go through the adapter's one ``aiohttp`` session.
"""

from __future__ import annotations

import aiohttp
from yarl import URL

from adapters.slack import translate
from adapters.slack.translate import SlackFile
from adapters.slack.web import error_code

DOWNLOAD_TIMEOUT_S = 120.0
# Where Slack serves files (url_private, url_private_download): its commercial and GovSlack
# domains and their subdomains (files.slack.com, files.slack-gov.com, an Enterprise Grid's
# <org>.enterprise.slack.com), and its CDN. The token is sent nowhere else.
SLACK_FILE_DOMAINS = ("slack.com", "slack-gov.com", "slack-edge.com")
OUTSIDE_SLACK_PROBLEM = "its link does not point to Slack, and I send my Slack token to Slack only."


class DownloadError(Exception):
    """A shared file could not be downloaded; ``problem`` says why, for the person."""

    def __init__(self, problem: str, detail: str = "") -> None:
        super().__init__(detail or problem)
        self.problem = problem
        self.detail = detail or problem


def carries_token(url: URL, api_base_url: str = "") -> bool:
    """True when the bot token may be sent to ``url``: HTTPS to one of
    :data:`SLACK_FILE_DOMAINS` or a subdomain, or the very origin (scheme, host and
    port) of the configured Web API ``api_base_url`` (a proxy, or a stand-in in tests)."""
    host = (url.host or "").lower().rstrip(".")
    if url.scheme == "https" and any(host == d or host.endswith("." + d) for d in SLACK_FILE_DOMAINS):
        return True
    if not api_base_url:
        return False
    try:
        api = URL(api_base_url)
    except ValueError:
        return False
    return api.is_absolute() and url.is_absolute() and url.origin() == api.origin()


class Downloader:
    """Downloads shared files with the bot token (``Authorization: Bearer``), at most
    ``max_bytes + 1`` bytes of each: one byte past the limit is enough for the engine
    to refuse the file as too large, without reading the rest.

    The token goes only where :func:`carries_token` allows (``api_base_url`` is the
    configured ``slack.api_base_url``); any other link is refused unrequested. A
    redirect to another origin loses the token (aiohttp drops ``Authorization`` then)."""

    def __init__(self, session: aiohttp.ClientSession, token: str, max_bytes: int, api_base_url: str = "") -> None:
        self._session = session
        self._token = token
        self._max_bytes = max_bytes
        self._api_base_url = api_base_url

    async def fetch(self, file: SlackFile) -> bytes:
        """The file's bytes; raises :class:`DownloadError`."""
        if not file.url:
            raise DownloadError("Slack gave me no link to download it (it may be an external or deleted file).")
        try:
            url = URL(file.url)
        except ValueError:
            url = URL()
        if not carries_token(url, self._api_base_url):
            # The same parsed URL is requested below, so what is checked is what would be fetched.
            raise DownloadError(OUTSIDE_SLACK_PROBLEM, f"its link points outside Slack (host {url.host or '?'}); "
                                                       "the token was not sent")
        headers = {"Authorization": f"Bearer {self._token}"}
        timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT_S)
        try:
            async with self._session.get(url, headers=headers, timeout=timeout) as response:
                if response.status != 200:
                    raise DownloadError(f"Slack answered HTTP {response.status}.", f"HTTP {response.status}")
                if translate.is_login_page(response.headers.get("Content-Type", ""), file):
                    raise DownloadError(translate.LOGIN_PAGE_PROBLEM, "a sign-in page (text/html) instead of the file")
                return await self._read(response)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise DownloadError("the download failed; please share it again.", error_code(exc)) from exc

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        data = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            data += chunk
            if len(data) > self._max_bytes:
                break
        return bytes(data[: self._max_bytes + 1])
