"""The questions ``bench.answers`` asks, and the channel each is asked in.

Three kinds, each an :class:`Asked`:

- **answerable**: every question of every set, in its own document's channel, with the
  half of its set its document is in (:data:`FIT`: documents at even positions, where the
  unfound-words check's thresholds are fitted; :data:`HELD`: odd positions);
- **off topic**: QuALITY and review questions asked in a channel of another set, where
  nothing answers them (the patent question is generic, so it is not used off topic);
- **mixed**: each answerable question followed, in its own channel, by a QuALITY or review
  question of another set ("… And how do guests rate the cleanliness of Marquesa Hotel?":
  a clearly absent topic) or of another document of the same set (another story, another
  hotel: a neighbouring one), whose answer should name a word of that second question.
  (A second question that happens to fit the channel too, "What can we infer from the
  longest dialogue in the story?", counts against the check: the figures are a floor.) A
  whole question is appended rather than one word: the scope only lists missing words when
  they are at least a third of the question's content words, so one word added to a long
  question is never listed, with or without the meaning check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from bench.data import FIT, DataSet, half_of
from raptor_engine import ChannelKey

OFF_TOPIC_POOLS = ("quality", "reviews")  # sets whose questions are specific enough to be off topic elsewhere
OTHER_SET, SAME_SET = "other set", "same set"  # where a mixed question's second question comes from


@dataclass(frozen=True, slots=True)
class Asked:
    """A question as sent: its set, the channel asked in, its text and gold answer; the half
    of its set its document is in (:data:`FIT` or :data:`HELD`); for a mixed question, how
    it was mixed (``mix``: :data:`OTHER_SET` or :data:`SAME_SET`) and the question
    ``appended`` to the answerable one (both empty otherwise)."""

    set_name: str
    key: ChannelKey
    text: str
    gold: str
    half: str = FIT
    mix: str = ""
    appended: str = ""


def answerable(sets: Sequence[DataSet], keys: dict[str, dict[int, ChannelKey]]) -> list[Asked]:
    """Every question of every set, in its own document's channel, with its document's half."""
    return [Asked(data.name, keys[data.name][a.index], q.text, q.gold, half_of(position))
            for data in sets for position, a in enumerate(data.articles) for q in a.questions]


def mixed(sets: Sequence[DataSet], keys: dict[str, dict[int, ChannelKey]], mix: str) -> list[Asked]:
    """Each answerable question followed by a QuALITY or review question that its channel
    does not hold, asked in that channel (its gold kept): "<question> And <other question>",
    the other's first letter lower-cased.

    With ``mix`` :data:`OTHER_SET` the second question comes from another set (a clearly
    absent topic); with :data:`SAME_SET` from another document of the same set (a
    neighbouring one: another story, another hotel), for QuALITY and review channels
    only. The second questions are taken in turn: the other sets alternate, and each
    pool's questions are taken in order, so every set and document gets its share.
    """
    pools = {data.name: [(a.index, q.text) for a in data.articles for q in a.questions]
             for data in sets if data.name in OFF_TOPIC_POOLS}
    taken = dict.fromkeys(pools, 0)
    asked: list[Asked] = []
    for turn, question in enumerate(answerable(sets, keys)):
        if mix == SAME_SET:
            others = [question.set_name] if question.set_name in pools else []
        else:
            others = [name for name in pools if name != question.set_name and pools[name]]
        if not others:
            continue
        name = others[turn % len(others)]
        pool = [text for index, text in pools[name] if keys[name][index] != question.key]
        if not pool:
            continue
        other = pool[taken[name] % len(pool)]
        taken[name] += 1
        text = f"{question.text.rstrip()} And {other[:1].lower()}{other[1:]}"
        asked.append(replace(question, text=text, mix=mix, appended=other))
    return asked


def off_topic(sets: Sequence[DataSet], keys: dict[str, dict[int, ChannelKey]]) -> list[Asked]:
    """Each QuALITY and review question once, in a channel of another set.

    The channels of the other sets are taken in turn (round robin over all
    their documents), so every other set and document gets its share.
    """
    asked: list[Asked] = []
    for data in sets:
        if data.name not in OFF_TOPIC_POOLS:
            continue
        channels = [key for other in sets if other.name != data.name for key in keys[other.name].values()]
        if not channels:
            continue
        questions = [q for article in data.articles for q in article.questions]
        asked += [Asked(data.name, channels[i % len(channels)], q.text, q.gold) for i, q in enumerate(questions)]
    return asked
