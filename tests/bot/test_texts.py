"""The shared words of every text (counts, moments, short ids) and where renderers agree."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from bot import replies
from bot.neutral import SourceView
from bot.texts.outline import picture_header
from bot.tree_outline import Branch, TreeOutline
from raptor_engine.types import Node, TreeStats


def test_count_when_and_short_id() -> None:
    assert replies.count(1, "source") == "1 source"
    assert replies.count(1200, "summary", "summaries") == "1,200 summaries"
    assert replies.short_id("0123456789abcdef") == "0123456789ab"
    assert replies.when("2024-05-01T16:03:00+02:00") == "2024-05-01 14:03 UTC"
    assert replies.when("2024-05-01T14:03:00") == "2024-05-01 14:03 UTC"  # naive: taken as UTC
    assert replies.when(datetime(2024, 5, 1, 9, 3, tzinfo=timezone(timedelta(hours=-5)))) == "2024-05-01 14:03 UTC"
    assert replies.when("") == "at an unknown time" and replies.when("not a date") == "not a date"


def test_the_outline_and_the_status_write_the_same_words() -> None:
    stats = TreeStats("c", 3, "2024-05-01T16:03:00+02:00", 1, {0: 1, 1: 2}, 1)
    outline = TreeOutline("#c", 3, stats.built_at, 1, 1, {0: 1, 1: 2}, (Branch("s1.r", 1, "sum", ("Doc",), 1),), ())
    status, text = replies.stats_text(stats, []), replies.outline_text(outline)
    for words in ("2024-05-01 14:03 UTC", "1 source", replies.layers_text(stats.nodes_per_layer)):
        assert words in status and words in text
    assert "1 child)" in text and "1 change waits" in text and "(s)" not in text + status
    assert picture_header(outline) == ("#c", "Tree v3, built 2024-05-01 14:03 UTC from 1 source; 1 change waits for a rebuild")
    assert picture_header(TreeOutline("", 0, "", 2, 2, {}, (), ())) == ("(untitled channel)", "2 sources, no tree built yet")


def test_stats_list_the_top_nodes() -> None:
    stats = TreeStats("c", 1, "2024-05-01T14:03:00+00:00", 2, {0: 5, 1: 1}, 0)
    text = replies.stats_text(stats, [Node("s1.root", 1, "All about lunch.", 4, children=("a", "b"))])
    assert text.splitlines()[-2:] == ["Top of the tree (1 node):", "  s1.root · summary (layer 1) · All about lunch."]


def test_a_source_choice_fits_its_limit_and_keeps_the_short_id() -> None:
    source = SourceView("0123456789abcdef", "T" * 300)
    choice = replies.source_choice_text(source, 100)
    assert len(choice) == 100 and choice.endswith("… · 0123456789ab")
    assert replies.source_choice_text(SourceView("0123456789abcdef", "Notes"), 100) == "Notes · 0123456789ab"


def test_the_command_lines_channel_with_nothing_to_search_is_named_in_one_line() -> None:
    many = [f"c{n}" for n in range(7)]
    assert replies.unknown_channel_text("x", many).endswith("the known ones: c0, c1, c2, c3, c4 and 2 others")
    assert replies.unknown_channel_text("x", many[:6]).endswith("c4 and 1 other")
    assert "nor any other" in replies.unknown_channel_text("x", [])
    for text in (replies.unknown_channel_text("x", many), replies.empty_channel_text("x", pins=True)):
        assert "\n" not in text and "could not find" not in text
