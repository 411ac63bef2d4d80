"""Where the Slack adapter may send its bot token when downloading a shared file."""

from __future__ import annotations

import pytest
from yarl import URL

from adapters.slack.downloads import carries_token

API = "http://127.0.0.1:8123/api/"


@pytest.mark.parametrize("url", [
    "https://files.slack.com/files-pri/T1-F1/download/a.txt",
    "https://FILES.slack.com./files-pri/T1-F1/a.txt",  # case and a final dot name the same host
    "https://acme.enterprise.slack.com/files-pri/T1-F1/a.txt",
    "https://files.slack-gov.com/files-pri/T1-F1/a.txt",  # GovSlack
    "https://a.slack-edge.com/x.png",
    "http://127.0.0.1:8123/files-pri/T1-F1/a.txt",  # the configured api_base_url's origin
])
def test_slacks_hosts_and_the_configured_api_get_the_token(url: str) -> None:
    assert carries_token(URL(url), API)


@pytest.mark.parametrize("url", [
    "http://files.slack.com/files-pri/T1-F1/a.txt",  # not over TLS
    "https://files.slack.com.evil.example/a.txt",
    "https://evilslack.com/a.txt",
    "https://files.slack.com@evil.example/a.txt",  # user info, not the host
    "https://files.slack.com%2eevil.example/a.txt",
    "http://127.0.0.1:8124/files-pri/T1-F1/a.txt",  # the right host, another port
    "https://127.0.0.1:8123/files-pri/T1-F1/a.txt",  # the right host and port, another scheme
    "https://docs.google.com/document/d/1",
    "/files-pri/T1-F1/a.txt",
    "",
])
def test_any_other_link_does_not(url: str) -> None:
    assert not carries_token(URL(url), API)
    assert not carries_token(URL(url))


def test_without_a_configured_api_only_slack_is_trusted() -> None:
    assert carries_token(URL("https://files.slack.com/a"))
    assert not carries_token(URL("http://127.0.0.1:8123/files-pri/a"), "")
    assert not carries_token(URL("http://127.0.0.1:8123/files-pri/a"), "not a url")
