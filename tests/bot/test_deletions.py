"""Which sources a deletion takes (pure), and text an edit removed (pure)."""

from __future__ import annotations

from bot.deletions import deleted_sources
from bot.neutral import ChannelKey, Deleted
from raptor_engine import Source, SourceKind
from raptor_engine.removed_text import RemovedText

KEY = ChannelKey("discord", "1", "2")


def source(external_id: str, kind: SourceKind = SourceKind.FILE, file_name: str = "") -> Source:
    return Source(external_id or "none", "t", kind, "", "", "", 1, external_id, file_name)


def test_a_deletion_takes_its_message_and_its_parts_and_spares_what_an_edit_kept() -> None:
    pin = source("2/10", SourceKind.MESSAGE)
    pinned_file = source("2/10", file_name="a.txt")
    kept_pinned_file = source("2/10", file_name="b.txt")
    upload, kept_upload = source("2/10/100"), source("2/10/101")
    other, prefix_only = source("2/11"), source("2/100")
    everything = [pin, pinned_file, kept_pinned_file, upload, kept_upload, other, prefix_only]
    deleted = Deleted(KEY, external_ids=("2/10",), parts_of=("2/10",))
    assert deleted_sources(everything, deleted) == [pin, pinned_file, kept_pinned_file, upload, kept_upload]
    edited = Deleted(KEY, external_ids=("2/10",), parts_of=("2/10",), kept=("2/10/101",), files_kept=("b.txt",))
    assert deleted_sources(everything, edited) == [pinned_file, upload]  # the text stays: the pins part's own


def test_removed_text_is_found_in_texts_that_quote_it_only() -> None:
    removed = RemovedText("Deploys are frozen on Fridays after noon. The staging password rotates every Tuesday.",
                          "Deploys are frozen on Fridays after noon.")
    assert removed.quoted_in("As the note says: “the staging password rotates every Tuesday” [1]")
    assert not removed.quoted_in("Deploys are frozen on Fridays after noon. [1]")
    assert not RemovedText("Deploys are frozen.", "deploys are FROZEN!").quoted_in("Deploys are frozen.")
    assert RemovedText("Lunch at one.", "Lunch at two.").quoted_in("lunch at one")  # shorter than a run: whole
