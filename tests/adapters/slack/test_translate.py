"""Pure translation of Slack payloads: classification, plain text, threads, people, commands, buttons."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.slack import translate
from adapters.slack.translate import (
    ACTION_NODE,
    ACTION_VOTE_DOWN,
    ACTION_VOTE_UP,
    Asked,
    BotIdentity,
    FileNotice,
    FilesShared,
    FollowUp,
    Ignored,
    Origin,
    Pinned,
    SlackFile,
    Unpinned,
)
from bot.neutral import Command, Person, Vote
from raptor_engine.types import ChannelKey

BOT = BotIdentity("UBOT", "BBOT", "T1")
ANA = Person("UANA", "Ana")


def callback(event: Any, team: str = "T1") -> dict[str, Any]:
    return {"type": "event_callback", "team_id": team, "event_id": "Ev1", "event": event}


def message(**fields: Any) -> dict[str, Any]:
    base = {"type": "message", "channel": "C1", "user": "UANA", "text": "hello", "ts": "100.000001",
            "channel_type": "channel"}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


# -- classification ----------------------------------------------------------------


def test_a_mention_is_asked_and_answered_in_a_thread_under_it() -> None:
    event = {"type": "app_mention", "channel": "C1", "user": "UANA", "ts": "100.000001",
             "text": "<@UBOT> what is  <https://x.org/a|the plan> for <#C9|ops>?"}
    arrival = translate.classify_event(callback(event), BOT)
    assert isinstance(arrival, Asked) and not arrival.direct
    assert arrival.text == "what is the plan (https://x.org/a) for #ops?"
    assert arrival.origin.key == ChannelKey("slack", "T1", "C1")
    assert arrival.reply_thread == "100.000001"
    in_thread = translate.classify_event(callback({**event, "thread_ts": "50.000001"}), BOT)
    assert isinstance(in_thread, Asked) and in_thread.reply_thread == "50.000001"


def test_an_edited_message_is_a_possible_source_update_unless_a_bot_wrote_it() -> None:
    def edit(now: dict[str, Any]) -> dict[str, Any]:
        return callback({"type": "message", "subtype": "message_changed", "channel": "C1", "hidden": True,
                         "message": now, "previous_message": {**now, "text": "before"}, "ts": "101.000001"})

    arrival = translate.classify_event(edit({"type": "message", "user": "UBEN", "text": "after &amp; now",
                                              "ts": "100.000001", "edited": {"user": "UBEN", "ts": "140.000200"}}),
                                         BOT)
    assert isinstance(arrival, Pinned) and arrival.edited and arrival.text == "after & now"
    assert (arrival.origin.channel, arrival.origin.ts, arrival.author) == ("C1", "100.000001", "UBEN")
    pin = translate.pin(arrival, ANA, arrival.text, "")
    assert pin.edited and pin.external_id == "C1:100.000001"
    assert pin.revision == 140.0002  # when the edit was made: edits are applied in that order
    for own in ({"user": "UBOT", "text": "streamed answer", "ts": "100.000002"},
                {"bot_id": "B2", "text": "another bot", "ts": "100.000003"}):
        assert isinstance(translate.classify_event(edit(own), BOT), Ignored)


def test_direct_messages_are_questions_answered_directly() -> None:
    arrival = translate.classify_event(callback(message(channel="D1", channel_type="im", text="hi there")), BOT)
    assert isinstance(arrival, Asked) and arrival.direct and arrival.reply_thread == ""
    threaded = translate.classify_event(
        callback(message(channel="D1", channel_type="im", thread_ts="90.000001")), BOT
    )
    assert isinstance(threaded, Asked) and threaded.reply_thread == "90.000001"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"thread_ts": "90.000001"}, FollowUp),  # a reply in a thread: maybe a follow-up
        ({"subtype": "thread_broadcast", "thread_ts": "90.000001"}, FollowUp),
        ({}, Ignored),  # a channel message not addressed to the bot
        ({"text": "<@UBOT> hi"}, Ignored),  # its app_mention is answered instead
        ({"thread_ts": "90.000001", "text": "<@UBOT|raptor> hi"}, Ignored),
        ({"bot_id": "B2", "thread_ts": "90.000001"}, Ignored),  # another bot
        ({"user": "UBOT", "thread_ts": "90.000001"}, Ignored),  # ourselves
        ({"subtype": "message_changed"}, Ignored),
        ({"subtype": "channel_join"}, Ignored),
        ({"user": None}, Ignored),
    ],
)
def test_channel_messages(fields: dict[str, Any], expected: type) -> None:
    assert isinstance(translate.classify_event(callback(message(**fields)), BOT), expected)


def test_file_shares_and_file_shared_events() -> None:
    files = [
        {"id": "F1", "name": "a.md", "mimetype": "text/markdown", "url_private": "u1", "url_private_download": "d1",
         "permalink": "https://p/F1", "size": "12"},
        {"id": "F2", "name": "gone.txt", "mode": "tombstone", "url_private": "u2"},
        {"name": "no id"},
    ]
    arrival = translate.classify_event(callback(message(subtype="file_share", files=files)), BOT)
    assert isinstance(arrival, FilesShared)
    assert arrival.files == (
        SlackFile("F1", "a.md", "", "text/markdown", "d1", "https://p/F1", 12),
        SlackFile("F2", "gone.txt", url=""),
    )
    assert isinstance(translate.classify_event(callback(message(subtype="file_share", files="x")), BOT), Ignored)
    notice = translate.classify_event(
        callback({"type": "file_shared", "channel_id": "C1", "user_id": "UANA", "file": {"id": "F3"}}), BOT
    )
    assert notice == FileNotice(Origin("T1", "C1", "UANA"), "F3")


def test_pins_and_unpins() -> None:
    item = {"type": "message", "channel": "C1",
            "message": {"ts": "100.000001", "user": "UBEN", "text": "Deploys &amp; rollbacks", "permalink": "https://l"}}
    pinned = translate.classify_event(callback({"type": "pin_added", "user": "UANA", "channel_id": "C1",
                                                "item": item}), BOT)
    assert pinned == Pinned(Origin("T1", "C1", "UANA", "100.000001"), "Deploys & rollbacks", "UBEN", "https://l")
    assert not pinned.is_reply
    reply_item = {**item, "message": {**item["message"], "thread_ts": "90.000001"}}
    reply = translate.classify_event(callback({"type": "pin_added", "user": "UANA", "channel_id": "C1",
                                               "item": reply_item}), BOT)
    assert isinstance(reply, Pinned) and reply.is_reply
    unpinned = translate.classify_event(callback({"type": "pin_removed", "user": "UANA", "channel_id": "C1",
                                                  "item": item}), BOT)
    assert isinstance(unpinned, Unpinned)
    assert translate.unpin(unpinned, ANA).external_id == translate.pin(pinned, ANA, "t", "l").external_id == (
        "C1:100.000001"
    )
    assert isinstance(translate.classify_event(callback({"type": "pin_added", "item": {"type": "file"}}), BOT), Ignored)


@pytest.mark.parametrize(
    "body",
    [{}, {"event": "oops"}, {"event": {"type": 3}}, {"event": {"type": "app_mention"}},
     {"event": {"type": "pin_added", "item": None}}, {"event": {"type": "reaction_added"}},
     {"event": {"type": "message", "files": 5, "subtype": "file_share", "channel": "C", "user": "U", "ts": "1.1"}}],
)
def test_malformed_payloads_are_ignored_not_raised(body: dict[str, Any]) -> None:
    assert isinstance(translate.classify_event(body, BOT), Ignored)


# -- text ---------------------------------------------------------------------------


def test_plain_text() -> None:
    text = "<@UBOT> ask <@U2|bob> &lt;x&gt; &amp; <!here> <https://a.b/c> <mailto:a@b.c|a@b.c>\n  next   line "
    assert translate.plain_text(text, "UBOT") == "ask @bob <x> & @here https://a.b/c a@b.c\nnext line"
    assert translate.mentions("hi <@UBOT>", "UBOT") and not translate.mentions("hi <@UBOTX>", "UBOT")


# -- threads ----------------------------------------------------------------------------


def bot_answer(ts: str, text: str) -> dict[str, Any]:
    return {"ts": ts, "user": "UBOT", "bot_id": "BBOT", "text": text + "\n[1] Source",
            "blocks": [{"block_id": "raptor_answer_0", "text": {"type": "mrkdwn", "text": text}},
                       {"block_id": "raptor_source_1", "text": {"type": "mrkdwn", "text": "[1] Source"}}]}


def test_thread_context_and_whether_the_bot_answered() -> None:
    thread = [
        {"ts": "100.000001", "user": "UANA", "text": "<@UBOT> who is on call?"},
        bot_answer("100.000003", "Ben is on call &amp; Ana backs up. [1]"),
        {"ts": "100.000004", "user": "UBOT", "bot_id": "BBOT", "text": "progress",
         "blocks": [{"block_id": "raptor_progress_0"}]},
        {"ts": "100.000005", "user": "UBEN", "text": "and next week?"},
        {"ts": "100.000009", "user": "UBEN", "text": "later message"},
    ]
    assert translate.bot_answered(thread, BOT)
    assert not translate.bot_answered(thread[:1] + thread[2:], BOT)
    context = translate.thread_context(thread, "100.000005", BOT)
    assert context == ("who is on call?", "Ben is on call & Ana backs up. [1]")
    many = [{"ts": f"100.{i:06d}", "user": "UANA", "text": f"m{i}"} for i in range(1, 40)]
    assert translate.thread_context(many, "100.000039", BOT)[-1] == "m38"
    assert len(translate.thread_context(many, "", BOT)) == translate.MAX_CONTEXT_MESSAGES


def test_an_answer_whose_markdown_block_lost_its_id_is_still_known_and_read_from_its_text() -> None:
    # As Slack documents: a markdown block's block_id is not kept; the sources and buttons keep theirs.
    answer = {"ts": "100.000003", "user": "UBOT", "bot_id": "BBOT",
              "text": "| who | when |\n| Ben | Monday |\nSources:\n[1] Rota (excerpt)",
              "blocks": [{"type": "rich_text", "elements": []},
                         {"type": "context", "block_id": "raptor_sources", "elements": []},
                         {"type": "section", "block_id": "raptor_source_1", "text": {"type": "mrkdwn", "text": "x"}},
                         {"type": "actions", "block_id": "raptor_feedback", "elements": []}]}
    question = {"ts": "100.000001", "user": "UANA", "text": "<@UBOT> who is on call?"}
    assert translate.bot_answered([question, answer], BOT)
    assert translate.thread_context([question, answer], "", BOT) == ("who is on call?",
                                                                      "| who | when |\n| Ben | Monday |")
    note = {"ts": "100.000004", "user": "UBOT", "bot_id": "BBOT", "text": "Added a file",
            "blocks": [{"type": "section", "block_id": "raptor_info_0"}]}
    assert not translate.bot_answered([question, note], BOT)


def test_a_pinned_thread() -> None:
    thread = [{"ts": "1.000002", "user": "UBEN", "text": "Run the rollback job."},
              {"ts": "1.000001", "user": "UANA", "text": "How do we roll back?"},
              bot_answer("1.000003", "Use the job. [1]")]
    assert translate.pinned_thread(thread, "1.000001", BOT) == (
        "How do we roll back?", ("Run the rollback job.", "Use the job. [1]")
    )


# -- people, commands, buttons ---------------------------------------------------------------


def test_people() -> None:
    user = {"id": "U1", "team_id": "T1", "name": "ana", "real_name": "Ana Real", "is_admin": False, "is_owner": True,
            "profile": {"display_name": "", "real_name": "Ana R."}}
    assert translate.person_from_user(user, "T1") == Person("U1", "Ana R.", True)
    assert translate.person_from_user({"name": "bo"}, "T1", "U2") == Person("U2", "bo", False)
    # An owner of another organisation (a Slack Connect guest) manages nothing here.
    assert translate.person_from_user({**user, "team_id": "T9"}, "T1") == Person("U1", "Ana R.", False)


def test_slash_commands() -> None:
    body = {"team_id": "T1", "channel_id": "C1", "user_id": "UANA", "text": "  Forget 3f9a1c2b7d  "}
    assert translate.command(body, ANA, "T1") == Command(ChannelKey("slack", "T1", "C1"), ANA, "forget", "3f9a1c2b7d")
    assert translate.command({**body, "text": ""}, ANA, "T1").name == "help"
    # Typed by someone of another organisation: the channel is still the installing workspace's.
    assert translate.command({**body, "team_id": "T9"}, ANA, "T1").channel == ChannelKey("slack", "T1", "C1")


def test_buttons() -> None:
    body = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": "UBEN"}, "channel": {"id": "C1"},
            "container": {"message_ts": "5.000002", "thread_ts": "5.000001"},
            "message": {"ts": "5.000002", "thread_ts": "5.000001"},
            "actions": [{"action_id": ACTION_NODE, "value": "s1.abc"}]}
    key = ChannelKey("slack", "T1", "C1")

    def event(payload: dict[str, Any]) -> Command | Vote | None:
        click = translate.read_click(payload, "T1")
        return click.event(ANA) if click is not None else None

    assert event(body) == Command(key, ANA, "node", "s1.abc", thread="5.000001")
    assert event({**body, "team": {"id": "T9"}}) == Command(key, ANA, "node", "s1.abc", thread="5.000001")
    up = {**body, "actions": [{"action_id": ACTION_VOTE_UP, "value": "a1"}]}
    assert event(up) == Vote(key, ANA, "a1", True)
    down = {**body, "actions": [{"action_id": ACTION_VOTE_DOWN, "value": "a1"}]}
    assert event(down) == Vote(key, ANA, "a1", False)
    assert event({**body, "actions": [{"action_id": "other", "value": "x"}]}) is None
    assert event({**body, "actions": [{"action_id": ACTION_NODE, "value": ""}]}) is None


def test_a_click_is_read_once_with_how_to_answer_it() -> None:
    body = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": "UBEN", "team_id": "T1"},
            "container": {"type": "message", "message_ts": "5.000002", "channel_id": "C1", "thread_ts": "5.000001"},
            "trigger_id": "t-1", "response_url": "https://hooks.slack.test/r/1",
            "actions": [{"action_id": ACTION_VOTE_DOWN, "value": " a1 ", "type": "button"}]}
    click = translate.read_click(body, "T1")
    assert click == translate.Click(Origin("T1", "C1", "UBEN", "5.000002", "5.000001"), ACTION_VOTE_DOWN,
                                    "a1", "https://hooks.slack.test/r/1", "t-1")
    assert click.form_answer == "a1"  # a 👎 opens the feedback form about its answer
    up = translate.read_click({**body, "actions": [{"action_id": ACTION_VOTE_UP, "value": "a1"}]}, "T1")
    assert up is not None and up.form_answer == ""
    # A click nowhere (no channel), or on nothing of ours, is no click of the bot's.
    assert translate.read_click({**body, "container": {}}, "T1") is None
    assert translate.read_click({**body, "actions": "garbled"}, "T1") is None
    assert translate.read_click({}, "T1") is None


def test_login_pages_and_failure_notes() -> None:
    markdown = SlackFile("F1", "a.md", mimetype="text/markdown")
    assert translate.is_login_page("text/html; charset=utf-8", markdown)
    assert not translate.is_login_page("text/markdown", markdown)
    assert not translate.is_login_page("text/html", SlackFile("F2", "page.html", mimetype="text/html"))
    note = translate.posting_failure_text("not_in_channel", "abcd1234")
    assert "invite me" in note and "reference abcd1234" in note
    assert "files:read" in translate.download_failure_text("a.md", translate.LOGIN_PAGE_PROBLEM, "r1")
