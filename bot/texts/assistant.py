"""What the bot says in an AI assistant's side panel (Slack's assistant container): the
suggested prompts of a new thread, the status line while a question is worked on, and why
a question is not answered from the channel being viewed; and the refusal of material
while the app is distributed to other workspaces (``slack.distribution``)."""

from __future__ import annotations

from bot.neutral import Stage

PROMPTS_TITLE = "Ask about a channel's material:"
"""The line Slack shows above a new thread's suggested prompts."""

GENERAL_PROMPTS: tuple[tuple[str, str], ...] = (
    ("What are the main points?", "What are the main points of the material?"),
    ("What was decided?", "What decisions does the material record, and when were they made?"),
    ("Who is responsible?", "Who is responsible for what, according to the material?"),
)
"""(title, message) of the prompts every new thread gets: the message is what the person
sends by picking the title."""


def channel_prompts(name: str) -> tuple[tuple[str, str], ...]:
    """(title, message) of the prompts about the channel ``name`` (without ``#``) that the
    person is viewing, a member of it, and that has a tree."""
    return (
        (f"Summarise #{name}'s material", f"Summarise the material of #{name}."),
        (f"What changed in #{name} this week?", f"What changed in #{name} this week?"),
    )


def stage_text(stage: Stage, channel: str = "") -> str:
    """The status line of ``stage``; ``channel`` names the channel searched (without ``#``;
    empty: "this channel")."""
    if stage is Stage.READING:
        return "Reading your question…"
    if stage is Stage.SEARCHING:
        return f"Searching #{channel}…" if channel else "Searching this channel's material…"
    return "Writing…"


def not_a_member_text(channel: str) -> str:
    """The reply to a question asked beside a channel the person is not a member of: it is
    answered from nothing (no retrieval), and says so."""
    return (f"You're viewing #{channel}, but you're not a member of it, so I can't answer from its "
            "material. Join the channel, or ask me in a channel you belong to.")


DISTRIBUTED_REFUSAL = ("I keep no files or messages from Slack in this installation: it is distributed to other "
                       "workspaces (slack.distribution: distributed), and Slack's API terms do not let such an "
                       "app keep an index of a workspace's messages. Questions are still answered.")
"""The reply to a file shared or a message pinned while ``slack.distribution`` is ``distributed``."""

DISTRIBUTED_CORRECTION = ("Your correction was not kept as material: this installation is distributed to other "
                          "workspaces (slack.distribution: distributed), so nothing from Slack becomes a source. "
                          "Your 👎 and your reason were kept.")
"""Said, privately, to a channel admin whose correction a distributed Slack app did not store."""
