"""What a person sees of an answer's check (issue 29, points 1 and 2): unsupported sentences marked ⚠
with a note, or left out with ``answers.drop_unsupported``; a citation whose quote could not be
verified shown without quotation marks; the counts in the metrics; the settings validated."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot import replies
from bot.config import Config, load_config
from bot.errors import ConfigError
from bot.observability.metrics import Metrics
from bot.texts.answers import UNSUPPORTED_NOTE, answer_reply, citation_line
from raptor_engine.types import Answer, Citation

SUPPORTED = "One engineer is on call each week. [1]"
INVENTED = "The on-call engineer is fined one hundred euros. [1]"
UNCITED = "Everyone receives an apology email afterwards."


def checked(*unsupported: str, quote: str = "One engineer is on call each week.") -> Answer:
    citation = Citation(1, "l0.a", 0, "Handbook", "https://x.test/f", quote)
    return Answer(text=f"{SUPPORTED} {INVENTED} {UNCITED}", citations=(citation,), hits=(), found=True,
                  unsupported=unsupported, unverified_quotes=0 if quote else 1)


def test_unsupported_sentences_are_marked_and_named_in_the_note() -> None:
    reply = answer_reply(checked(INVENTED, UNCITED))
    assert reply.text == f"{SUPPORTED} {INVENTED} ⚠ {UNCITED} ⚠"
    assert reply.warning.startswith(UNSUPPORTED_NOTE) and f"“{UNCITED}”" in reply.warning
    assert reply.written == f"{SUPPORTED} {INVENTED} {UNCITED}"  # what a draft showed, unmarked


def test_with_drop_unsupported_they_are_left_out_and_counted() -> None:
    reply = answer_reply(checked(INVENTED, UNCITED), drop_unsupported=True)
    assert reply.text == SUPPORTED
    assert reply.warning == "2 sentences left out: the passages cited do not support them."


def test_a_supported_answer_is_shown_as_written() -> None:
    reply = answer_reply(checked())
    assert (reply.text, reply.warning, reply.written) == (f"{SUPPORTED} {INVENTED} {UNCITED}", "", "")


def test_an_unverified_quote_leaves_a_link_without_quotation_marks() -> None:
    [view] = answer_reply(checked(quote="")).citations
    line = citation_line(view)
    assert "“" not in line and "https://x.test/f" in line
    assert "“One engineer" in citation_line(answer_reply(checked()).citations[0])


def test_the_plain_text_answer_carries_the_marks_and_the_note() -> None:
    text = replies.answer_text(checked(UNCITED))
    assert f"{UNCITED} ⚠" in text and f"⚠ {UNSUPPORTED_NOTE}" in text


def test_the_checks_are_counted_under_their_documented_names() -> None:
    metrics = Metrics()
    metrics.count_answer_checks(unverified_quotes=2, unsupported_sentences=3)
    rendered = metrics.render().decode()
    assert "raptor_citations_unverified_total 2.0" in rendered
    assert "raptor_sentences_unsupported_total 3.0" in rendered
    with pytest.raises(ValueError):
        metrics.count_answer_checks(-1, 0)


def test_the_answers_section_is_validated(tmp_path: Path) -> None:
    assert Config().answers.support_threshold == 0.5 and not Config().answers.drop_unsupported
    path = tmp_path / "config.yaml"
    path.write_text("answers:\n  support_threshold: 0.7\n  drop_unsupported: true\n")
    assert load_config(path).answers.support_threshold == 0.7
    for bad in ("answers:\n  support_threshold: 1.5\n", "answers:\n  drop_unsuported: true\n"):
        path.write_text(bad)
        with pytest.raises(ConfigError, match="answers"):
            load_config(path)


def test_each_citation_says_how_old_its_source_is() -> None:
    from datetime import datetime, timezone

    from bot.texts.words import ago

    now = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
    assert ago("2026-12-02T11:00:00+00:00", now) == "3 days ago"
    assert ago("2026-12-05T09:30:00", now) == "2 hours ago"  # naive: taken as UTC
    assert ago("2026-12-05T11:59:30+00:00", now) == "just now"
    assert ago("", now) == "" and ago("not a time", now) == ""
    recent = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    citation = Citation(1, "l0.a", 0, "Handbook", "https://x.test/f", "One engineer is on call.", updated_at=recent)
    [view] = answer_reply(Answer("One engineer is on call. [1]", (citation,), (), True)).citations
    assert view.notes == "updated just now" and "· updated just now" in citation_line(view)
    summary = Citation(2, "s1.aa", 1, "Handbook", "", "", updated_at=recent, outdated_by="On-call rota")
    [marked] = answer_reply(Answer("Summary. [1]", (summary,), (), True)).citations
    assert marked.notes == "updated just now · may be outdated: built before “On-call rota” changed"
    added = Citation(3, "s2.ab", 2, "Handbook", "", "", outdated_by="Release notes", outdated_by_addition=True)
    [beside] = answer_reply(Answer("Summary. [1]", (added,), (), True)).citations
    assert beside.notes == "may be outdated: built before “Release notes” was added"
