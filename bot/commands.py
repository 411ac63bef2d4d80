"""The chat commands, the same on every platform: their names, one-line help, parsing, permissions.

A command arrives as text (``"/rebuild"``, ``"rebuild"``, ``"forget 3f9a1c2b7d"``;
Slack's ``/raptor rebuild`` gives the adapter ``"rebuild"``) and is parsed into a
name and an argument by :func:`parse_command`. The handler
(:mod:`bot.handler`, through :mod:`bot.command_handling`) runs them; :func:`may_manage` says who may run the
commands marked ``admin_only``, :func:`may_remove_pin` who may remove a
source by unpinning it, and :func:`may_mark_solved` who may mark a forum post solved;
:func:`post_question` reads what a new forum post asks (see :mod:`bot.forum_handling`).

A channel's admins are the people the platform says manage it
(``Person.manages_channel``: Slack workspace admins and owners; on Discord,
members with Manage Messages in the channel, and anyone in a direct message; the
person at the console) and the ids listed in ``bot.admins`` or in
``bot.channels["platform/workspace/channel"].admins``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bot.config import BotConfig
from bot.neutral import Person
from raptor_engine import ChannelKey

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One command: its ``name``, how to call it (``usage``), what it does in one line,
    and whether only the channel's admins may run it."""

    name: str
    usage: str
    help: str
    admin_only: bool = False


ASK = "ask"
REBUILD = "rebuild"
STATUS = "status"
SOURCES = "sources"
FORGET = "forget"
NODE = "node"
TREE = "tree"
FEEDBACK = "feedback"
CHECK = "check"
HELP = "help"

COMMANDS: dict[str, CommandSpec] = {
    spec.name: spec
    for spec in (
        CommandSpec(ASK, "ask QUESTION", "answer a question from this channel's material, citing its sources"),
        CommandSpec(REBUILD, "rebuild [force]", "rebuild this channel's tree of summaries now (force: serve it even "
                    "if the check would hold it back)", admin_only=True),
        CommandSpec(STATUS, "status", "the tree's size, when it was built, and the next scheduled rebuild"),
        CommandSpec(SOURCES, "sources", "list the files and pinned messages this channel answers from"),
        CommandSpec(FORGET, "forget SOURCE", "remove a source (its id or a prefix of it) and all built from it",
                    admin_only=True),
        CommandSpec(NODE, "node ID", "show a cited excerpt or summary with its children and parents"),
        CommandSpec(TREE, "tree", "a picture and an outline of this channel's tree"),
        CommandSpec(FEEDBACK, "feedback", "recent 👎 with their reasons, and the questions I could not answer",
                    admin_only=True),
        CommandSpec(CHECK, "check", "ask the approved questions (👍 answers, corrections) of the tree: which still "
                    "find their sources", admin_only=True),
        CommandSpec(HELP, "help", "this list"),
    )
}
"""Every command, in the order help lists them."""


def parse_command(text: str) -> tuple[str, str]:
    """Splits ``"/name argument..."`` or ``"name argument..."`` into the lower-cased name
    and the stripped rest. Blank text (or a lone ``/``) is ``("help", "")``.

    The name is returned even when it is not in :data:`COMMANDS`: the handler
    answers an unknown name with help that names it.
    """
    stripped = text.strip().removeprefix("/")
    name, _, argument = stripped.partition(" ")
    if not name.strip():
        return HELP, ""
    return name.strip().lower(), argument.strip()


def may_manage(person: Person, key: ChannelKey, config: BotConfig) -> bool:
    """True when ``person`` is an admin of the channel ``key`` (see the module docstring):
    the platform says they manage the channel, or their id is listed in ``bot.admins``
    or in ``bot.channels["platform/workspace/channel"].admins``."""
    if person.manages_channel or person.id in config.admins:
        return True
    channel = config.channels.get(str(key))
    return channel is not None and person.id in channel.admins


def may_remove_pin(person: Person, pinner_id: str, key: ChannelKey, config: BotConfig) -> bool:
    """True when unpinning by ``person`` may remove the source a pin became: they are an
    admin of the channel (:func:`may_manage`), or they are the person who pinned it
    (``pinner_id``, a platform id; empty when unknown, which matches nobody)."""
    return may_manage(person, key, config) or (bool(pinner_id) and person.id == pinner_id)


def post_question(title: str, opening: str) -> str:
    """What a new forum post asks: its title, then its opening message (either may be empty;
    the title is left out when the message repeats it)."""
    title, opening = " ".join(title.split()), opening.strip()
    if not title or title.lower() in opening.lower():
        return opening
    return f"{title}\n{opening}" if opening else title


def may_mark_solved(person: Person, author_id: str, key: ChannelKey, config: BotConfig) -> bool:
    """True when ``person`` may mark the post opened by ``author_id`` solved: they opened it,
    or they are an admin of the forum (:func:`may_manage`)."""
    return (bool(author_id) and person.id == author_id) or may_manage(person, key, config)
