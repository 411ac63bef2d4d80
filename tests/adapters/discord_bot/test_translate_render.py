"""The pure halves of the Discord adapter: translation to neutral events, rendering within limits.

Messages here are plain namespaces with the attributes translation reads;
rendered messages are checked with the stand-in's own limit checker, the one
that answers the real client with Discord's 400 errors.
"""

from __future__ import annotations

import random
import re
from types import SimpleNamespace
from typing import Any

import discord
import pytest

from adapters.discord_bot import render, translate
from adapters.discord_bot.client import command_name
from adapters.discord_bot.connection import api_base
from adapters.discord_bot.posting import message_arguments
from adapters.discord_bot.translate import CastVote, OpenNode, Place, Scope
from bot.config import DiscordConfig
from bot.errors import ConfigError
from bot.neutral import (
    Attachment,
    CitationKind,
    CitationView,
    Command,
    Person,
    Reply,
    ReplyKind,
    Vote,
)
from raptor_engine.types import ChannelKey, Source, SourceKind
from testkit.discord_api import PRIVATE_THREAD, message_errors, thread_payload

BOT = 42
ALICE = SimpleNamespace(id=7, bot=False, name="alice", display_name="Alice")
RAPTOR = SimpleNamespace(id=BOT, bot=True, name="raptor", display_name="Raptor")


def message(author: Any, content: str = "", embeds: tuple[str, ...] = (), kind: discord.MessageType = discord.MessageType.default,
            resolved: Any = None, mentions: tuple[Any, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(
        author=author, content=content, embeds=[SimpleNamespace(description=d) for d in embeds], type=kind,
        reference=SimpleNamespace(resolved=resolved) if resolved is not None else None, mentions=list(mentions),
        role_mentions=[],
    )


def source(external_id: str) -> Source:
    return Source("id-" + external_id, "t", SourceKind.MESSAGE, "", "", "", 1, external_id)


# -- translation ------------------------------------------------------------------------------


def test_places_keys_and_scope() -> None:
    assert Place(1, 2).key == ChannelKey("discord", "1", "2") and Place(1, 2).thread == ""
    in_thread = Place(1, 3, parent_id=2)
    assert in_thread.key == ChannelKey("discord", "1", "2") and in_thread.thread == "3"  # the channel's tree
    assert Place(None, 9).key == ChannelKey("discord", "dm", "9")

    everything = Scope.of(DiscordConfig())
    assert everything.allows(Place(1, 2)) and everything.allows(Place(None, 9))
    scope = Scope.of(DiscordConfig(guilds=["1"], channels=["2"], library_channels=["5"]))
    assert scope.allows(Place(1, 2)) and scope.allows(in_thread)
    assert not scope.allows(Place(1, 4)) and not scope.allows(Place(8, 2)) and not scope.allows(Place(None, 2))
    assert scope.is_library(Place(1, 5)) and scope.is_library(Place(1, 6, parent_id=5))
    assert not scope.is_library(Place(1, 2))


def test_a_private_thread_is_a_channel_of_its_own() -> None:
    guild = SimpleNamespace(id=1)

    def thread(thread_id: str, kind: int) -> discord.Thread:  # the real discord.py type, from a payload
        return discord.Thread(guild=guild, state=None, data=thread_payload(thread_id, "1", "2", "t", "7", kind))  # type: ignore[arg-type]

    public = translate.place_of(thread("3", 11))
    assert public.key == ChannelKey("discord", "1", "2") and not public.private  # the parent's tree
    private = translate.place_of(thread("4", PRIVATE_THREAD))
    assert private.private and private.key == ChannelKey("discord", "1", "4") and private.thread == "4"
    assert translate.place_of(thread("5", 99)).key == ChannelKey("discord", "1", "5")  # unknown kind: kept apart
    # Every DM (or group DM) is its own channel too.
    assert translate.place_of(SimpleNamespace(id=8)).key == ChannelKey("discord", "dm", "8")
    assert translate.place_of(SimpleNamespace(id=9)).key != translate.place_of(SimpleNamespace(id=8)).key

    # Allowed where its parent is; but a library channel's private thread is no library itself.
    scope = Scope.of(DiscordConfig(guilds=["1"], channels=["2"], library_channels=["2"]))
    assert scope.allows(private) and scope.is_library(public) and not scope.is_library(private)
    assert Scope.of(DiscordConfig(library_channels=["4"])).is_library(private)
    assert not Scope.of(DiscordConfig(channels=["6"])).allows(private)
    # Its pins are compared with the sources of its own tree, under its own id.
    assert translate.pin_changes(4, [11], [source("4/10")]) == translate.PinChanges((11,), ("4/10",))


def test_question_text_and_mentions() -> None:
    names = {7: "Alice"}
    assert translate.question_text(f"<@{BOT}>   who is   on call?", BOT) == "who is on call?"
    assert translate.question_text(f"<@!{BOT}> ask <@7> and <@8>", BOT, names) == "ask @Alice and <@8>"
    assert translate.question_text(f"<@{BOT}>", BOT) == ""
    assert translate.mentions_bot(message(ALICE, f"hi <@{BOT}>"), BOT)
    assert translate.mentions_bot(message(ALICE, "a reply that pings", mentions=(RAPTOR,)), BOT)
    role = SimpleNamespace(tags=SimpleNamespace(bot_id=BOT))
    by_role = message(ALICE, "<@&5> hi")
    by_role.role_mentions = [role]
    assert translate.mentions_bot(by_role, BOT)
    assert not translate.mentions_bot(message(ALICE, "<@8> hi", mentions=(SimpleNamespace(id=8),)), BOT)
    assert translate.is_help(" Help ") and translate.is_help("/help") and not translate.is_help("help me")


def test_thread_context_and_replies() -> None:
    starter = message(ALICE, kind=discord.MessageType.thread_starter_message,
                      resolved=message(ALICE, f"<@{BOT}> How do we deploy?"))
    history = [starter, message(RAPTOR, embeds=("We deploy on weekdays. [1]",)), message(ALICE, "  "),
               message(ALICE, "and on Fridays?")]
    assert translate.bot_posted(history, BOT) and not translate.bot_posted(history[:1], BOT)
    assert translate.context_of(history, BOT) == ("How do we deploy?", "We deploy on weekdays. [1]", "and on Fridays?")
    many = [message(ALICE, f"message {n}") for n in range(30)]
    assert translate.context_of(many, BOT) == tuple(f"message {n}" for n in range(20, 30))

    replies = [starter, message(ALICE, "The disk was full."), message(RAPTOR, "an answer"),
               message(SimpleNamespace(id=9, bot=True, name="ci", display_name="CI"), "build passed")]
    assert translate.thread_replies(replies, BOT) == ("Alice: The disk was full.",)
    assert translate.thread_name("x " * 80).endswith("…") and len(translate.thread_name("x " * 80)) <= 100
    assert translate.thread_name("  ") == "Question"


def test_pin_changes_compare_with_the_sources_of_that_channel_only() -> None:
    sources = [source("10/1"), source("10/2"), source("10/3/77"), source("11/4"), source("")]
    changes = translate.pin_changes(10, [2, 5], sources)
    assert changes.added == (5,) and changes.removed == ("10/1",)  # the upload 10/3/77 and channel 11 untouched
    assert translate.pin_changes(11, [4], sources) == translate.PinChanges((), ())
    # A pinned message of files only, whose files were uploaded when it was posted, is there already.
    assert translate.pin_changes(10, [1, 2, 3], sources, files_only=[3]).added == ()
    assert translate.pin_changes(10, [1, 2, 3], sources).added == (3,)  # it has text: the text is added
    assert translate.pin_external_id(10, 1) == "10/1" and translate.upload_external_id(10, 3, 77) == "10/3/77"


def test_button_ids_round_trip_and_become_events() -> None:
    node_id = translate.node_custom_id("s2.0123456789")
    assert node_id == "raptor:node:s2.0123456789"
    assert translate.parse_custom_id(node_id) == OpenNode("s2.0123456789")
    up, down = translate.vote_custom_id("abc", True), translate.vote_custom_id("abc", False)
    assert translate.parse_custom_id(up) == CastVote("abc", True)
    assert translate.parse_custom_id(down) == CastVote("abc", False)
    for other in ("", "raptor", "raptor:node:", "raptor:vote:sideways:abc", "raptor:vote:up:", "other:node:x"):
        assert translate.parse_custom_id(other) is None
    assert translate.node_custom_id("n" * 100) is None

    person, place = Person("7", "Alice"), Place(1, 3, parent_id=2)
    assert translate.button_event(OpenNode("s1.x"), place, person) == Command(place.key, person, "node", "s1.x", "3")
    assert translate.button_event(CastVote("abc", False), place, person) == Vote(place.key, person, "abc", False)


def test_endpoints_and_command_names() -> None:
    assert api_base("http://127.0.0.1:8080") == "http://127.0.0.1:8080/api/v10"
    assert api_base("https://proxy.example/api/v9/") == "https://proxy.example/api/v9"
    assert command_name("/Raptor") == "raptor" and command_name("ask-docs") == "ask-docs"
    with pytest.raises(ConfigError):
        command_name("two words")


# -- rendering ----------------------------------------------------------------------------------


def citation(number: int, kind: CitationKind = CitationKind.EXCERPT, title: str = "Handbook", quote: str = "quote",
             link: str = "https://discord.com/channels/1/2/3", node_id: str = "") -> CitationView:
    layer = 0 if kind is CitationKind.EXCERPT else 1
    return CitationView(number, kind, layer, node_id or f"s{layer}.{number:010d}", title, link, quote)


def payload(outgoing: render.Outgoing) -> dict[str, Any]:
    """The JSON body discord.py would send for one outgoing message."""
    arguments = message_arguments(outgoing)
    body: dict[str, Any] = {"content": arguments.get("content")}
    body["embeds"] = [embed.to_dict() for embed in arguments.get("embeds", [])]
    if "view" in arguments:
        body["components"] = arguments["view"].to_components()
    return body


def assert_within_limits(messages: list[render.Outgoing]) -> None:
    for outgoing in messages:
        assert message_errors(payload(outgoing), len(outgoing.files)) is None, payload(outgoing)


def test_an_answer_renders_as_embeds_sources_and_buttons() -> None:
    reply = Reply(ReplyKind.ANSWER, "Roll back first. [1] [2]", (
        citation(1, title="Deploys *and* rollbacks", quote="Any engineer may roll back."),
        citation(2, CitationKind.SUMMARY, link="/local/path.md"),
    ), warning="Not checked.", answer_id="a1")
    (outgoing,) = render.render_reply(reply)
    answer, sources = outgoing.embeds
    assert answer.description == "Roll back first. [1] [2]\n\n⚠️ *Not checked.*"
    assert sources.title == "Sources"
    first, second = sources.fields
    assert first.name == r"[1] excerpt · Deploys \*and\* rollbacks"
    assert first.value == ("> Any engineer may roll back.\n"
                           "[open the source](https://discord.com/channels/1/2/3) · node `s0.0000000001`")
    assert second.name == "[2] summary · layer 1 · Handbook"
    assert second.value == "> quote\nnode `s1.0000000002`"  # not a web link: not linked
    assert [(b.custom_id, b.row) for b in outgoing.buttons] == [
        ("raptor:node:s1.0000000002", 0), ("raptor:vote:up:a1", 1), ("raptor:vote:down:a1", 1)]
    assert_within_limits([outgoing])
    assert not render.answer_buttons(Reply(ReplyKind.ANSWER, "x"))  # no id, no votes


@pytest.mark.parametrize("size", [1, 3999, 4096, 4097, 9000, 30_000])
def test_answers_of_any_size_split_within_limits(size: int) -> None:
    rng = random.Random(size)
    words = [rng.choice(["alpha", "beta", "gamma", "delta", "\n", "epsilon", "zeta" * 40]) for _ in range(size // 4)]
    text = " ".join(words)[:size] or "x"
    citations = tuple(citation(n, CitationKind(rng.choice(["excerpt", "summary"])), "T" * rng.randint(1, 400),
                               "q " * rng.randint(0, 700)) for n in range(1, rng.randint(1, 60)))
    messages = render.render_reply(Reply(ReplyKind.ANSWER, text, citations, answer_id="b" * 12))
    assert_within_limits(messages)
    shown = "".join(e.description or "" for m in messages for e in m.embeds)
    assert re.sub(r"\s", "", text) == re.sub(r"\s", "", shown)
    numbers = [int(f.name[1:].split("]")[0]) for m in messages for e in m.embeds for f in e.fields]
    assert numbers == [c.number for c in citations]
    assert all(not m.buttons for m in messages[:-1]) and messages[-1].buttons


def test_text_replies_split_and_carry_files_and_references() -> None:
    long = "\n".join(f"line {n} " + "word " * rng_words for n, rng_words in enumerate([3, 600, 2, 900, 1] * 3))
    picture = Attachment("raptor-tree.png", b"\x89PNG")
    messages = render.render_reply(Reply(ReplyKind.INFO, long, attachments=(picture,)))
    assert len(messages) > 1 and messages[0].files == (picture,) and all(not m.files for m in messages[1:])
    assert all(len(m.content) <= 2000 for m in messages)
    assert re.sub(r"\s", "", long) == re.sub(r"\s", "", "".join(m.content for m in messages))
    assert_within_limits(messages)

    (error,) = render.render_reply(Reply(ReplyKind.ERROR, "It broke.", reference="abcd1234"))
    assert error.content == "⚠️ It broke. (reference abcd1234)"
    (progress,) = render.render_reply(Reply(ReplyKind.PROGRESS, "Clustering layer 1"))
    assert progress.content == "⏳ Clustering layer 1"
    (empty,) = render.render_reply(Reply(ReplyKind.INFO, "  "))
    assert empty.content == render.EMPTY_TEXT
    assert render.split_text("x" * 4500, 2000) == ["x" * 2000, "x" * 2000, "x" * 500]


def test_adapter_notices() -> None:
    assert "reference 0badf00d" in render.send_failed_reply("0badf00d").text
    assert render.download_failed_reply("a.md", "0badf00d").reference == "0badf00d"
    refused = render.too_large_reply("big.pdf", 30 * 1024 * 1024, 20 * 1024 * 1024)  # binary MB, as files.max_mb
    assert refused.text.startswith("I could not add “big.pdf”: the file is 30 MB, over the limit of 20 MB")
