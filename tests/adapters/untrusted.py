"""A document and a model's answer that try to speak in the bot's voice, for the adapters' tests
(issue 28: documents never speak in the bot's voice).

Both hold a masked link and every platform's mentions. The extractive answerer quotes the
document's second paragraph word for word as its answer, and the model's answer is free
text, so either puts them into the bot's own message unless the adapter defuses them.
"""

from __future__ import annotations

MASKED = "[the reset page](https://evil.example/reset)"
SHOWN = "[the reset page] (https://evil.example/reset)"  # what the reader sees instead: the address in sight
TITLE = "Accounts @everyone"
LINK = "https://x.test/accounts"  # the document's own link: the bot's link to its source stays clickable
QUESTION = "How do I reset my password?"
SLACK_MENTIONS = ("<!channel>", "<!here>", "<!subteam^S0SEC>", "<@U0BOSS>")
DISCORD_MENTIONS = ("@everyone", "@here", "<@123456789012345678>", "<@&234567890123456789>")

DOCUMENT = (
    f"# {TITLE}\n\n"
    f"To reset your password, open {MASKED} and tell {', '.join(SLACK_MENTIONS)}, "
    f"or on Discord {', '.join(DISCORD_MENTIONS)}.\n\n"
    "Passwords expire every ninety days. Security reviews happen on Mondays.\n"
).encode()

MODEL_ANSWER = (
    f"To reset your password, open {MASKED} [1]. Then tell {' and '.join(SLACK_MENTIONS)} "
    f"(on Discord {' and '.join(DISCORD_MENTIONS)}) [1]."
)
