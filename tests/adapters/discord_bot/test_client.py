"""The real discord.py client against the Discord stand-in on 127.0.0.1, end to end.

Real components only: ``run_discord`` with discord.py's own HTTP and gateway
code, the Assistant (engine on embedded Chroma with the session's packaged model,
scheduler, handler). Each test runs its own event loop with ``asyncio.run``
(see ``conftest.py`` for the world every test gets). The stand-in refuses
messages over Discord's limits and interaction answers later than 3 s, so
every test also checks those.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import discord
import pytest

from adapters.discord_bot.client import run_discord
from adapters.discord_bot.sending import ChannelSend
from adapters.discord_bot.translate import Place
from bot.ingestion import adder_name
from bot.neutral import CitationKind, CitationView, Reply, ReplyKind
from bot.replies import NO_MATERIAL
from raptor_engine.engine import Engine
from raptor_engine.types import SourceKind
from testkit.discord_api import (
    CONTENT_LIMIT,
    EPHEMERAL,
    MESSAGE_CONTENT_INTENT,
    custom_ids,
    embed_length,
    message_payload,
    message_text,
    snowflake,
)
from tests.adapters.discord_bot.conftest import (
    ADMIN_ID,
    World,
    discord_world,
    run_world,
)
from tests.adapters.recording import counted, our_warnings, question_outcomes
from tests.conftest import SAMPLE

ON_CALL_QUESTION = "What does the on-call engineer do?"
OVERVIEW_QUESTION = "What are the main points about on-call?"  # broad by its words: led by a summary
FREEZE_NOTE = "Deploys are frozen on Fridays after noon, so that nobody is paged over the weekend."
REFERENCE = re.compile(r"\(reference ([0-9a-f]{8})\)")


def jump_url(world: World, channel_id: str, message_id: str) -> str:
    return f"https://discord.com/channels/{world.guild['id']}/{channel_id}/{message_id}"


async def add_handbook(world: World, channel: str = "general") -> dict[str, Any]:
    """Alice mentions the bot with the sample handbook attached and no question; waits for "Added"."""
    channel_id = world.channel(channel)
    before = len(world.fake.bot_messages(channel_id))
    attachment = world.fake.add_file(channel_id, "handbook.md", SAMPLE.read_bytes(), "text/markdown")
    message = await world.mention(channel, "", attachments=[attachment])
    posts = await world.bot_posts(channel_id, before + 1)
    assert posts[-1]["content"].startswith("Added “The Aurora Team Handbook”"), posts[-1]
    return message


def is_ephemeral(message: dict[str, Any]) -> bool:
    return bool(message["flags"] & EPHEMERAL)


# -- start-up ----------------------------------------------------------------------------------


def test_startup_syncs_the_command_and_restores_the_endpoints(engine: Engine, tmp_path: Path) -> None:
    route_base = discord.http.Route.BASE
    gateway = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY

    async def body(world: World) -> None:
        fake = world.fake
        assert discord.http.Route.BASE == fake.api_base_url  # "/api/v10" added to the configured URL
        slash = [c for c in fake.commands if c.get("type", 1) == 1]  # the message commands are type 3
        assert [c["name"] for c in slash] == ["docs"]
        subcommands = {o["name"]: o for o in slash[0]["options"]}
        assert list(subcommands) == ["ask", "rebuild", "status", "sources", "forget", "node", "tree", "feedback", "check",
                                    "help"]
        assert subcommands["ask"]["options"][0]["name"] == "question" and subcommands["ask"]["options"][0]["required"]
        assert subcommands["forget"]["options"][0]["autocomplete"] is True
        intents = int(fake.identifies[0]["intents"])
        assert intents & MESSAGE_CONTENT_INTENT and intents & 1 and intents & (1 << 9) and intents & (1 << 12)
        assert fake.identifies[0]["token"] == "fake-token"

        interaction = await world.slash("general", "help", command="docs")
        replies = await world.replies(interaction)
        assert interaction.callback_type == 5 and interaction.callback_at - interaction.dispatched_at < 3
        assert "ask QUESTION" in message_text(replies[0]) and not is_ephemeral(replies[0])

    run_world(engine, tmp_path, body, command="/Docs")
    assert discord.http.Route.BASE == route_base
    assert discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY == gateway


# -- questions and uploads -----------------------------------------------------------------------


def test_a_mention_with_a_file_adds_it_and_the_answer_cites_it(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        attachment = fake.add_file(general, "handbook.md", SAMPLE.read_bytes(), "text/markdown")
        start = len(fake.calls)
        question = await world.mention("general", ON_CALL_QUESTION, attachments=[attachment])
        added, answer = await world.bot_posts(general, 2)

        # Typing is the acknowledgement: it comes before the download and the replies.
        kinds = [(c.method, c.path) for c in fake.calls[start:]]
        typing = kinds.index(("POST", f"/channels/{general}/typing"))
        assert typing < min(i for i, (m, p) in enumerate(kinds) if p.startswith("/cdn/"))
        assert added["content"].startswith("Added “The Aurora Team Handbook” (")
        assert added["message_reference"]["message_id"] == question["id"]  # a reply to the question
        assert answer["message_reference"]["message_id"] == question["id"]

        text, sources = answer["embeds"]
        assert "pager" in text["description"] or "first responder" in text["description"], text
        assert sources["title"] == "Sources"
        link = jump_url(world, general, question["id"])
        first = sources["fields"][0]
        assert first["name"].startswith("[1] excerpt · The Aurora Team Handbook")
        assert first["value"].startswith("> ") and f"[open the source]({link})" in first["value"]
        assert re.search(r"node `\S+`", first["value"])
        buttons = custom_ids(answer)
        assert len(buttons) == 2 and buttons[0].startswith("raptor:vote:up:") and buttons[1].startswith("raptor:vote:down:")

        (source,) = world.engine.sources(world.key("general"))
        assert source.kind is SourceKind.FILE and source.link == link
        assert source.external_id == f"{general}/{question['id']}/{attachment['id']}"
        assert adder_name(source.added_by) == "Alice"

    run_world(engine, tmp_path, body)


def test_slash_commands_buttons_and_votes_end_to_end(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, key = world.fake, world.key("general")
        await add_handbook(world)

        status = await world.slash("general", "status")
        assert "1 source in this channel" in message_text((await world.replies(status))[0])
        listed = await world.slash("general", "sources")
        sources_text = message_text((await world.replies(listed))[0])
        short_id = re.search(r"^([0-9a-f]{12})  “The Aurora Team Handbook”", sources_text, re.MULTILINE)
        assert short_id, sources_text

        asked = await world.slash("general", "ask", {"question": ON_CALL_QUESTION})
        (answer,) = await world.replies(asked)
        assert asked.callback_type == 5 and not is_ephemeral(answer)
        assert answer["embeds"][1]["fields"][0]["name"].startswith("[1] excerpt · ")

        # Rebuild: refused to Alice (ephemeral), allowed to Mod (Manage Messages).
        refused = await world.slash("general", "rebuild")
        (refusal,) = await world.replies(refused)
        assert is_ephemeral(refusal) and "Only this channel's admins can rebuild" in refusal["content"]
        rebuilt = await world.slash("general", "rebuild", who=world.mod)
        await world.replies(rebuilt)
        assert "Rebuild started" in rebuilt.texts()[0]
        await world.bot.scheduler.wait_idle(key)
        await world.replies(rebuilt, 2)
        assert rebuilt.texts()[-1].startswith("Rebuilt: tree v1")

        # A summary citation has a button opening the node, for the presser only.
        asked = await world.slash("general", "ask", {"question": OVERVIEW_QUESTION})
        (answer,) = await world.replies(asked)
        summaries = [f for f in answer["embeds"][1]["fields"] if " summary · layer " in f["name"]]
        assert summaries, answer["embeds"][1]
        node_buttons = [c for c in custom_ids(answer) if c.startswith("raptor:node:")]
        assert node_buttons
        node_id = node_buttons[0].removeprefix("raptor:node:")
        assert f"node `{node_id}`" in "\n".join(f["value"] for f in summaries)
        opened = await fake.click(answer, world.alice, node_buttons[0])
        shown, *_ = await world.replies(opened)
        assert opened.callback_type == 5 and is_ephemeral(shown)
        assert re.match(rf"Summary \(layer \d+\) {node_id} ", shown["content"]), shown["content"]
        # A long summary (a root) continues in further messages; its children come last.
        listed = re.compile(r"^  (\S+) · (?:excerpt|summary \(layer \d+\)) · ", re.MULTILINE)
        await fake.wait_for(lambda: any(listed.search(m["content"]) for m in opened.messages))
        child = listed.search("\n".join(m["content"] for m in opened.messages).split("Summarises (")[-1])
        assert child and all(is_ephemeral(m) for m in opened.messages)

        # 👍 by Alice and 👎 by Mod are stored with the answer.
        answer_id = custom_ids(answer)[-1].rsplit(":", 1)[1]
        up = next(c for c in custom_ids(answer) if c.startswith("raptor:vote:up:"))
        down = next(c for c in custom_ids(answer) if c.startswith("raptor:vote:down:"))
        pressed = await fake.click(answer, world.alice, up)
        (said,) = await world.replies(pressed)
        assert pressed.callback_type == 6  # a silent acknowledgement, then the handler's word
        assert is_ephemeral(said) and said["content"].startswith("Thanks, your 👍 is recorded")
        pressed = await fake.click(answer, world.mod, down)  # 👎 opens the feedback form (test_feedback_form.py)
        await fake.wait_for(lambda: pressed.callback_type == 9)
        record = await fake.wait_for(
            lambda: next((r for r in world.engine.answers(key) if r.answer_id == answer_id and len(r.votes) == 2), None)
        )
        assert record.votes == {world.alice["user"]["id"]: 1, world.mod["user"]["id"]: -1}
        # The admin's feedback report holds what people said in a private form: for the asker only.
        report = await world.slash("general", "feedback", who=world.mod)
        (said,) = await world.replies(report)
        assert is_ephemeral(said) and "👎" in said["content"], said

        # `/raptor node` opens the summary's children, down to an excerpt (a root's are summaries).
        below = child.group(1)
        for _ in range(5):
            node = await world.slash("general", "node", {"node_id": below})
            content = (await world.replies(node))[0]["content"]
            if content.startswith(f"Excerpt {below}"):
                break
            assert content.startswith("Summary (layer"), content
            await fake.wait_for(lambda: any(listed.search(m["content"]) for m in node.messages))
            children = "\n".join(m["content"] for m in node.messages).split("Summarises (")[-1]
            below = listed.search(children).group(1)  # type: ignore[union-attr]
        assert content.startswith(f"Excerpt {below}"), content

        tree = await world.slash("general", "tree")
        await world.replies(tree)
        upload = fake.calls_to("POST", r"^/webhooks/\d+/" + re.escape(tree.token) + "$")[0]
        (name, picture), = upload.files
        assert name == "raptor-tree.png" and picture.startswith(b"\x89PNG")
        assert "tree v1" in tree.texts()[0]

        # forget: refused to Alice; allowed to the configured admin (no Manage Messages).
        typed = await fake.slash(world.channel("general"), world.alice, "forget", {"source": "aurora"},
                                 focused="source")
        await fake.wait_for(lambda: typed.callback_type is not None)
        assert typed.callback_type == 8
        (choice,) = typed.callback_data["choices"]
        assert choice["value"].startswith(short_id.group(1)) and "The Aurora Team Handbook" in choice["name"]
        refused = await world.slash("general", "forget", {"source": short_id.group(1)})
        assert "Only this channel's admins can forget" in (await world.replies(refused))[0]["content"]
        forgot = await world.slash("general", "forget", {"source": short_id.group(1)}, who=world.admin)
        assert (await world.replies(forgot))[0]["content"].startswith("Forgot “The Aurora Team Handbook”")
        assert world.engine.sources(key) == []

        # Every interaction was acknowledged in time (the stand-in refuses late answers).
        for interaction in fake.interactions.values():
            assert interaction.callback_at is not None and interaction.callback_at - interaction.dispatched_at < 3

    run_world(engine, tmp_path, body)


def test_threads_answers_and_follow_ups_without_mention(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        await add_handbook(world)
        question = await world.mention("general", ON_CALL_QUESTION)
        thread_id = question["id"]  # a thread started from a message takes its id
        (answer,) = await world.bot_posts(thread_id, 1)
        opened = fake.calls_to("POST", rf"^/channels/{general}/messages/{question['id']}/threads$")
        assert opened and opened[0].body["name"] == ON_CALL_QUESTION
        assert "Sources" in message_text(answer)

        # A follow-up in the thread needs no mention; the thread's history is read for context.
        await fake.post(thread_id, world.alice["user"], "How long is the handoff meeting?", world.alice)
        await world.bot_posts(thread_id, 2)
        assert fake.calls_to("GET", rf"^/channels/{thread_id}/messages$")
        follow_up = fake.bot_messages(thread_id)[-1]
        assert follow_up["embeds"][0]["description"] and follow_up["embeds"][1]["title"] == "Sources"

        # A thread the bot never posted in is not its business.
        chat = await fake.post(general, world.alice["user"], "Lunch plans?", world.alice)
        other = await fake.start_thread(general, chat, "lunch", world.alice["user"])
        await fake.post(other["id"], world.mod["user"], "Pizza, as usual.", world.mod)
        await fake.wait_for(lambda: fake.calls_to("GET", rf"^/channels/{other['id']}/messages$"))
        await world.replies(await world.slash("general", "help"))  # a round trip: the ignored message had its chance
        assert fake.bot_messages(other["id"]) == []
        assert not fake.calls_to("POST", rf"^/channels/{other['id']}/(typing|messages)$")

    run_world(engine, tmp_path, body, reply_in_thread=True)


def test_a_direct_message_is_a_question(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        dm = world.fake.add_dm(world.alice["user"])
        await world.fake.post(dm, world.alice["user"], "Is anyone there?")
        (reply,) = await world.bot_posts(dm, 1)
        assert reply["content"] == NO_MATERIAL

    run_world(engine, tmp_path, body)


def test_a_question_where_there_is_no_material_says_what_to_add(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A mention, a direct message and ``/raptor ask`` where no source is held get exactly
    ``NO_MATERIAL``: not "could not find anything" (nothing was searched), not an error with a
    reference; counted as ``no_material``, never as a failure, and nothing logged as one."""
    async def body(world: World) -> None:
        general = world.channel("general")
        await world.mention("general", ON_CALL_QUESTION)
        (mentioned,) = await world.bot_posts(general, 1)
        dm = world.fake.add_dm(world.alice["user"])
        await world.fake.post(dm, world.alice["user"], ON_CALL_QUESTION)
        (direct,) = await world.bot_posts(dm, 1)
        (slashed,) = await world.replies(await world.slash("general", "ask", {"question": ON_CALL_QUESTION}))
        for reply in (mentioned, direct, slashed):
            assert message_text(reply) == NO_MATERIAL and not reply.get("embeds"), reply
        assert not is_ephemeral(slashed) and question_outcomes(world.bot, "discord") == {"no_material": 3}
        assert counted(world.bot, "raptor_errors_total") == {}

    with caplog.at_level(logging.INFO):
        run_world(engine, tmp_path, body)
    assert our_warnings(caplog.records) == []


# -- sources: library channels and pins -----------------------------------------------------------


def test_library_channel_files_and_pins_added_and_removed(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake = world.fake
        general, library = world.channel("general"), world.channel("library")
        alice, mod = world.alice, world.mod

        # Library channel: every attachment is added, no mention needed.
        notes = fake.add_file(library, "notes.txt", b"The staging database is refreshed every Sunday night.")
        await fake.post(library, alice["user"], "weekly notes", alice, attachments=[notes])
        (added,) = await world.bot_posts(library, 1)
        assert added["content"].startswith("Added “notes")
        assert [s.kind for s in world.engine.sources(world.key("library"))] == [SourceKind.FILE]

        # A pin adds the message; an ordinary message in general is otherwise ignored.
        freeze = await fake.post(general, alice["user"], FREEZE_NOTE, alice)
        await fake.pin(general, freeze["id"])
        (pinned,) = await world.bot_posts(general, 1)
        assert pinned["content"].startswith("Added “Alice: Deploys are frozen on Fridays after noon, so…”")
        assert pinned["message_reference"]["message_id"] == freeze["id"]
        assert fake.calls_to("GET", rf"^/channels/{general}/messages/pins$")

        # A pinned message that starts a thread is added with the thread's messages.
        root = await fake.post(general, alice["user"], "Incident review of the ledger outage", alice)
        thread = await fake.start_thread(general, root, "ledger outage", alice["user"])
        await fake.post(thread["id"], mod["user"], "The ledger stopped because the disk of the replica was full.", mod)
        await fake.post(thread["id"], alice["user"], "We now alert at eighty percent disk use.", alice)
        await fake.pin(general, root["id"])
        await world.bot_posts(general, 2)
        sources = {s.external_id: s for s in world.engine.sources(world.key("general"))}
        assert sources[f"{general}/{freeze['id']}"].kind is SourceKind.MESSAGE
        assert sources[f"{general}/{freeze['id']}"].link == jump_url(world, general, freeze["id"])
        incident = sources[f"{general}/{root['id']}"]
        assert incident.kind is SourceKind.THREAD and incident.title.startswith("Thread by Alice: Incident review")
        asked = await world.slash("general", "ask", {"question": "At what disk use do we alert now?"})
        (answer,) = await world.replies(asked)
        assert "eighty percent" in answer["embeds"][0]["description"]
        assert "Thread by Alice" in answer["embeds"][1]["fields"][0]["name"]

        # Unpinning removes the source (and nothing else).
        await fake.unpin(general, freeze["id"])
        removed = await fake.wait_for(lambda: [m for m in fake.bot_messages(general) if m["content"].startswith("Removed")])
        assert removed[0]["content"].startswith("Removed “Alice: Deploys are frozen")
        assert removed[0]["message_reference"]["message_id"] == freeze["id"]
        assert {s.external_id for s in world.engine.sources(world.key("general"))} == {f"{general}/{root['id']}"}

    run_world(engine, tmp_path, body)


def test_an_edited_pinned_message_changes_what_the_bot_answers(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general, alice = world.fake, world.channel("general"), world.alice
        freeze = await fake.post(general, alice["user"], FREEZE_NOTE, alice)
        lunch = await fake.post(general, alice["user"], "Lunch is at one.", alice)
        await fake.pin(general, freeze["id"])
        await world.bot_posts(general, 1)

        await fake.edit(general, lunch["id"], "Lunch is at two.")  # not pinned: nothing said, nothing stored
        await fake.edit(general, freeze["id"], FREEZE_NOTE.replace("Fridays", "Thursdays"))
        (_, updated) = await world.bot_posts(general, 2)
        assert updated["content"].startswith("Updated “Alice: Deploys are frozen on Thursdays"), updated["content"]
        assert updated["message_reference"]["message_id"] == freeze["id"]
        (source,) = world.engine.sources(world.key("general"))
        assert source.external_id == f"{general}/{freeze['id']}" and "Thursdays" in source.title
        asked = await world.slash("general", "ask", {"question": "When are deploys frozen?"})
        (answer,) = await world.replies(asked)
        assert "Thursdays" in answer["embeds"][0]["description"], answer
        # The unpinned message's edit said nothing.
        assert not [m for m in fake.bot_messages(general) if (m.get("message_reference") or {}).get("message_id")
                    == lunch["id"]]

    run_world(engine, tmp_path, body)


def test_an_answer_in_a_thread_is_told_when_a_source_it_cites_changes(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general, alice = world.fake, world.channel("general"), world.alice
        freeze = await fake.post(general, alice["user"], FREEZE_NOTE, alice)
        await fake.pin(general, freeze["id"])
        await world.bot_posts(general, 1)
        question = await world.mention("general", "When are deploys frozen?")
        thread_id = question["id"]  # answered in a thread opened from the question
        (answer,) = await world.bot_posts(thread_id, 1)
        assert "Fridays" in answer["embeds"][0]["description"]

        await fake.edit(general, freeze["id"], FREEZE_NOTE.replace("Fridays", "Thursdays"))
        (_, updated) = await world.bot_posts(general, 2)
        assert "1 answer given before cited the earlier text" in updated["content"], updated["content"]
        (_, notice) = await world.bot_posts(thread_id, 2)  # said where the answer is, not in the channel
        assert "This answer cites material that changed after it was given" in message_text(notice), notice

    run_world(engine, tmp_path, body, reply_in_thread=True)


def test_pins_are_read_page_by_page(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, secret = world.fake, world.channel("secret")
        for n in range(52):  # pinned before anyone listened: the next pin update finds them all
            message = await fake.post(secret, world.alice["user"], f"Rule {n}: keep note number {n}.",
                                      world.alice, dispatch=False)
            fake.pins.setdefault(secret, []).insert(0, (message["id"], f"2024-01-01T00:00:{n:02d}+00:00"))
        last = await fake.post(secret, world.alice["user"], "Rule 52: the last one.", world.alice, dispatch=False)
        await fake.pin(secret, last["id"])
        await world.bot_posts(secret, 53, timeout=30)
        pages = fake.calls_to("GET", rf"^/channels/{secret}/messages/pins$")
        assert [c.params.get("limit") for c in pages] == ["50", "50"] and "before" in pages[1].params
        assert len(world.engine.sources(world.key("secret"))) == 53

    # Pins count against the uploads allowance (see test_a_pin_is_no_admin_action): this backlog is over the default.
    run_world(engine, tmp_path, body, bot_settings={"rate_limits": {"uploads_per_user_per_hour": 0}})


def test_a_private_thread_keeps_its_files_pins_and_answers_to_itself(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, alice = world.fake, world.alice
        general, library = world.channel("general"), world.channel("library")
        private = (await fake.start_private_thread(general, "pay review", alice["user"]))["id"]
        own = Place(int(world.guild["id"]), int(private)).key

        # A file and a pin in the private thread go to the thread's own tree, not general's.
        bands = fake.add_file(private, "bands.txt", b"The salary band for senior engineers ends at ninety thousand.")
        shared = await world.mention(private, "", attachments=[bands])
        (added,) = await world.bot_posts(private, 1)
        assert added["content"].startswith("Added “bands")
        note = await fake.post(private, alice["user"], "Bonuses are paid every March, after the review.", alice)
        await fake.pin(private, note["id"])
        await world.bot_posts(private, 3)  # the note is a follow-up in a thread the bot spoke in: it gets a reply too
        held = {s.external_id for s in world.engine.sources(own)}
        assert held == {f"{private}/{shared['id']}/{bands['id']}", f"{private}/{note['id']}"}
        assert world.engine.sources(world.key("general")) == []

        # Asked there, it answers from its own tree; asked in general, from general's (empty).
        await world.mention(private, "Where does the salary band for senior engineers end?")
        answer = (await world.bot_posts(private, 4))[-1]
        assert len(answer["embeds"]) == 2, answer
        _, cited = answer["embeds"]
        assert cited["title"] == "Sources" and all(f"/{private}/" in f["value"] for f in cited["fields"])
        asked = await world.slash("general", "ask", {"question": "Where does the salary band end?"})
        (reply,) = await world.replies(asked)
        assert "ninety" not in message_text(reply) and message_text(reply) == NO_MATERIAL
        listed = await world.slash(private, "sources")
        assert "bands" in message_text((await world.replies(listed))[0])

        # A private thread of a library channel is no library: files without a mention stay out.
        draft_thread = (await fake.start_private_thread(library, "draft", alice["user"]))["id"]
        draft = fake.add_file(draft_thread, "draft.txt", b"A draft nobody agreed to share.")
        await fake.post(draft_thread, alice["user"], "my draft", alice, attachments=[draft])
        await world.replies(await world.slash("general", "help"))  # a round trip: the message had its chance
        assert fake.bot_messages(draft_thread) == [] and not fake.calls_to("GET", rf"^/cdn/.*/{draft['id']}/")
        assert world.engine.sources(world.key("library")) == []

    run_world(engine, tmp_path, body, restrict=True)


# -- limits and failures ------------------------------------------------------------------------------


def long_reply() -> Reply:
    """An answer over every limit: 9,000 characters of text and 40 long citations."""
    paragraph = "The on-call engineer carries the pager and answers alerts within fifteen minutes. " * 12
    text = "\n\n".join(f"{n}. {paragraph}" for n in range(9))
    citations = tuple(
        CitationView(n, CitationKind.SUMMARY if n % 2 else CitationKind.EXCERPT, n % 2, f"s1.{n:010d}",
                     f"Title number {n} " + "of a very long document name " * 12,
                     "https://discord.com/channels/1/2/3", "quote " * 80)
        for n in range(1, 41)
    )
    return Reply(ReplyKind.ANSWER, text, citations, warning="Not checked.", answer_id="a" * 12)


def test_a_long_answer_is_split_within_discords_limits(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        channel = world.client.get_channel(int(general))

        with pytest.raises(discord.HTTPException) as refused:  # the stand-in enforces the limits
            await channel.send("x" * (CONTENT_LIMIT + 1))
        assert refused.value.status == 400 and refused.value.code == 50035

        reply = long_reply()
        start = len(fake.calls)
        await ChannelSend(channel)(reply)
        posted = fake.calls_to("POST", rf"^/channels/{general}/messages$", since=start)
        assert len(posted) >= 3 and all(c.status == 200 for c in posted)
        messages = fake.bot_messages(general)[-len(posted):]
        for message in messages:
            assert len(message["embeds"]) <= 10 and sum(embed_length(e) for e in message["embeds"]) <= 6000
        descriptions = "".join(e.get("description", "") for m in messages for e in m["embeds"])
        assert re.sub(r"\s", "", reply.text) in re.sub(r"\s", "", descriptions)
        names = [f["name"] for m in messages for e in m["embeds"] for f in e.get("fields", [])]
        assert [int(re.match(r"\[(\d+)\]", n).group(1)) for n in names] == list(range(1, 41))
        assert all(not custom_ids(m) for m in messages[:-1])
        assert len([c for c in custom_ids(messages[-1]) if c.startswith("raptor:node:")]) == 20

    run_world(engine, tmp_path, body)


def test_failures_to_post_and_to_download_are_said_with_a_logged_reference(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        # A download that fails.
        broken = fake.add_file(general, "report.md", b"# Report\n\nAll good.")
        fake.fail_next("GET", r"^/cdn/.*/report\.md$", 403, {"message": "Forbidden", "code": 0})
        await world.mention("general", "", attachments=[broken])
        (said,) = await world.bot_posts(general, 1)
        reference = REFERENCE.search(said["content"])
        assert said["content"].startswith("⚠️ I could not download “report.md”") and reference
        assert f"failed (reference {reference.group(1)})" in caplog.text

        # A file over files.max_mb is refused without downloading it.
        huge = dict(fake.add_file(general, "huge.txt", b"big"), size=world.engine.settings.max_file_bytes + 1)
        await world.mention("general", "", attachments=[huge])
        said = (await world.bot_posts(general, 2))[-1]
        assert "I could not add “huge.txt”: the file is" in said["content"]
        assert not fake.calls_to("GET", r"^/cdn/.*/huge\.txt$")

        # A reply Discord refuses: a short message with a reference instead.
        fake.fail_next("POST", rf"^/channels/{general}/messages$", 403, {"message": "Missing Permissions", "code": 50013})
        await world.mention("general", ON_CALL_QUESTION)
        said = (await world.bot_posts(general, 3))[-1]
        reference = REFERENCE.search(said["content"])
        assert said["content"].startswith("⚠️ I could not post my reply here.") and reference
        assert re.search(rf"posting a reply \(info: .*\) in channel {general} failed \(reference {reference.group(1)}\)",
                         caplog.text)

    run_world(engine, tmp_path, body)


# -- who and where -------------------------------------------------------------------------------------


def test_permissions_bots_and_places_not_allowed(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        start = len(fake.calls)
        await world.mention("general", "Am I heard?", who=world.robot)  # another bot
        await world.mention("secret", "Am I heard?")  # a channel not configured
        await fake.post(world.channel("elsewhere"), world.alice["user"], "Am I heard?", world.alice,
                        mention_bot=True)  # a guild not configured
        outside = await world.slash("secret", "status")
        await fake.wait_for(lambda: outside.callback_type is not None)
        assert outside.callback_type == 4 and outside.callback_data["flags"] & EPHEMERAL
        assert "not enabled in this channel" in outside.callback_data["content"]

        await world.mention("general", "Am I heard?")
        (reply,) = await world.bot_posts(general, 1)
        assert reply["content"] == NO_MATERIAL
        touched = {c.path for c in fake.calls[start:] if c.method == "POST" and c.path.startswith("/channels/")}
        assert touched == {f"/channels/{general}/typing", f"/channels/{general}/messages"}

        # Manage Messages (or bot.admins) lets a member rebuild and forget; others are refused.
        for who, allowed in ((world.alice, False), (world.mod, True), (world.admin, True)):
            for name, options in (("rebuild", None), ("forget", {"source": "0123456789"})):
                interaction = await world.slash("general", name, options, who=who)
                (said,) = await world.replies(interaction)
                refused = said["content"].startswith("⚠️ Only this channel's admins")
                assert refused is not allowed, (who["user"]["username"], name, said["content"])
                assert is_ephemeral(said) is not allowed
        assert ADMIN_ID in world.bot.config.bot.admins

    run_world(engine, tmp_path, body, restrict=True)


def test_malformed_events_do_not_bring_the_bot_down(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        broken = message_payload(snowflake(), general, world.alice["user"], "hi", world.guild["id"])
        del broken["author"], broken["content"]
        await fake.dispatch("MESSAGE_CREATE", broken)
        await fake.dispatch("INTERACTION_CREATE", {"id": snowflake(), "type": 2})
        await fake.dispatch("CHANNEL_PINS_UPDATE", {"guild_id": world.guild["id"]})
        await world.mention("general", "Still there?")
        await world.bot_posts(general, 1)
        assert "dropped a malformed MESSAGE_CREATE event from Discord (reference" in caplog.text
        assert "dropped a malformed INTERACTION_CREATE event" in caplog.text

        await fake.send_frame("this is not JSON {")
        await fake.wait_identified(2)  # the runner reconnected
        assert "the Discord connection failed unexpectedly (reference" in caplog.text
        await world.mention("general", "And now?")
        await world.bot_posts(general, 2)
        interaction = await world.slash("general", "status")
        assert "0 sources in this channel" in message_text((await world.replies(interaction))[0])
        assert not world.task.done()

    run_world(engine, tmp_path, body)


def test_closing_while_a_question_is_handled_is_clean(engine: Engine, tmp_path: Path) -> None:
    """Cancelling run_discord lets an event being handled finish, then closes the client."""

    async def session() -> None:
        async with discord_world(engine, tmp_path) as world:
            await world.mention("general", "Anyone?")
            await world.fake.wait_for(lambda: world.fake.calls_to("POST", r"/typing$"))
            world.task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await world.task
            assert world.client.is_closed()
            assert world.fake.bot_messages(world.channel("general"))  # it finished before closing

    asyncio.run(session())


def test_buttons_keep_working_after_a_restart(engine: Engine, tmp_path: Path) -> None:
    """The buttons' custom ids carry what they need: a new client handles presses on old answers."""

    async def session() -> None:
        async with discord_world(engine, tmp_path) as world:
            fake = world.fake
            await add_handbook(world)
            asked = await world.slash("general", "ask", {"question": ON_CALL_QUESTION})
            (answer,) = await world.replies(asked)
            world.task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await world.task

            clients: list[Any] = []
            config = world.bot.config.discord
            world.task = asyncio.create_task(run_discord(world.bot, config, guild_ready_timeout=0.05,
                                                         on_client=clients.append))
            await fake.wait_for(lambda: clients)
            await asyncio.wait_for(clients[0].wait_until_ready(), 10)
            assert len(fake.identifies) == 2
            up = next(c for c in custom_ids(answer) if c.startswith("raptor:vote:up:"))
            pressed = await fake.click(answer, world.alice, up)
            (said,) = await world.replies(pressed)
            assert said["content"].startswith("Thanks, your 👍 is recorded")
            (record,) = world.engine.answers(world.key("general"))
            assert record.votes == {world.alice["user"]["id"]: 1}

    asyncio.run(session())
