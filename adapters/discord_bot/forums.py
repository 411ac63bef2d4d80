"""Discord forum channels served as help desks (``discord.forums``).

Contract (:class:`ForumHandling`, a part of :class:`~adapters.discord_bot.client.DiscordClient`;
the rules are :mod:`bot.forum_handling`'s, the forum's translation :mod:`~adapters.discord_bot.forum_posts`'s):

* a new post is answered in the post from its opening message (MESSAGE_CREATE in the post's
  thread, whose id is the post's), and every later message in a post is a question: both as
  any message is handled (:class:`~adapters.discord_bot.messages.MessageHandling`), claimed
  once in the delivery ledger as ``discord:message:<id>``, so a post delivered twice (its
  THREAD_CREATE or its opening message, or to several front-ends) is answered once;
* under an answer the bot kept (one with sources to vote on) it posts a short message with a
  "Mark solved" button (:class:`OfferingSolved`). A press is claimed as any interaction
  (``discord:interaction:<id>``), acknowledged privately within Discord's 3 s, and handed to the
  bot as a :class:`~bot.neutral.Solved` naming the kept answer; who may press it is the bot's
  rule, Discord's Manage Messages (as resolved for the interaction) making an admin. The replies
  are shown to the presser only;
* the forum's Solved tag applied to a post (THREAD_UPDATE whose ``applied_tags`` gained a tag
  named "Solved" or "Resolved") marks it solved with the post's latest answer, once across
  front-ends (``discord:solved-tag:<post>:<tag>``). Discord lets only the post's author, or a
  member with Manage Threads, set a post's tags, and does not say which: the mark is the
  author's. The bot says in the post what became of it;
* a post's question is its title and opening message, fetched when it is marked (an edit of it
  since is taken); the source links to the post.

Failures are logged with a reference and said where the event came from, as everywhere.
"""

from __future__ import annotations

import logging

import discord

from adapters.discord_bot import forum_posts, render, translate
from adapters.discord_bot.interactions import InteractionHandling
from adapters.discord_bot.lifecycle import interaction_key
from adapters.discord_bot.messages import HISTORY_LIMIT, place_manager
from adapters.discord_bot.posting import ALLOWED_MENTIONS, button_view
from adapters.discord_bot.sending import ChannelSend, InteractionSend
from adapters.discord_bot.translate import Place
from bot.errors import log_failure
from bot.neutral import AnswerDraft, Person, Reply, ReplyKind, Send, Solved

log = logging.getLogger(__name__)

OFFER_TEXT = ("Did this answer your question? The post's author (or an admin) can mark it solved: "
              "the question and this answer then help answer the next ones.")
OFFER_LABEL = "Mark solved"


class ForumHandling(InteractionHandling):
    """The client's forum posts; see the module docstring. It comes before the messages part
    in the client's bases: its :meth:`answer_send` is the one the messages part calls."""

    def answer_send(self, message: discord.Message, place: Place) -> Send:
        """How the answer to ``message`` is sent (see ``MessageHandling.answer_send``): in a
        served forum post, with the offer to mark the post solved."""
        send = ChannelSend(message.channel, message, components_v2=self.settings.components_v2)
        return OfferingSolved(send) if forum_posts.in_served_forum(place, self.settings.forums) else send

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A press on "Mark solved"; any other interaction as the interactions part handles it."""
        pressed = interaction.type is discord.InteractionType.component
        custom_id = str(interaction.data.get("custom_id", "")) if pressed and interaction.data else ""
        answer_id = forum_posts.solved_answer_id(custom_id)
        if answer_id is None:
            await super().on_interaction(interaction)
            return
        if not await self.claim(interaction_key(interaction)):
            return  # another front-end answers it
        await self._mark_solved(interaction, answer_id)

    async def on_thread_update(self, before: discord.Thread, after: discord.Thread) -> None:
        """A served forum's post given its Solved tag: marked solved with its latest answer."""
        place = translate.place_of(after)
        if not (forum_posts.in_served_forum(place, self.settings.forums) and self.scope.allows(place)):
            return
        tag = forum_posts.newly_solved_tag(before.applied_tags, after.applied_tags)
        if tag is None:
            return
        with self._tracked():
            if not await self.claim(f"discord:solved-tag:{after.id}:{tag.id}"):
                return
            send = ChannelSend(after)
            try:
                newest_first = [m async for m in after.history(limit=HISTORY_LIMIT)]
                answer, answerer = forum_posts.latest_answer(newest_first, after.owner_id, self.bot_id)
                opening = await _opening(after)
                author = opening.author if opening is not None else None
                marker = (translate.person_of(author, place_manager(after, author)) if author is not None
                          else Person(str(after.owner_id or "")))
                event = self._solved(after, place, marker, opening, answer=answer, answerer=answerer)
                await self.raptor.handler.handle(event, send)
            except Exception:  # noqa: BLE001 (reported with a reference, never silent)
                await self._failed(f"marking post {after.id} solved by its tag", send)

    async def _mark_solved(self, interaction: discord.Interaction, answer_id: str) -> None:
        """A "Mark solved" press in a served forum's post, acknowledged privately, then handed to the bot."""
        post = interaction.channel if isinstance(interaction.channel, discord.Thread) else None

        async def mark(place: Place, person: Person, send: InteractionSend) -> None:
            if post is not None:  # (``serves`` let only a post through)
                event = self._solved(post, place, person, await _opening(post), answer_id=answer_id)
                await self.raptor.handler.handle(event, send)

        await self.run_deferred(interaction, f"marking post {interaction.channel_id} solved", mark, private=True,
                                serves=lambda place: post is not None and forum_posts.in_served_forum(
                                    place, self.settings.forums))

    def _solved(self, post: discord.Thread, place: Place, marker: Person, opening: discord.Message | None,
                answer_id: str = "", answer: str = "", answerer: str = "") -> Solved:
        """The neutral event of ``post`` marked solved by ``marker``."""
        question = (translate.question_text(opening.content or "", self.bot_id, translate.mention_names(opening))
                    if opening is not None else "")
        return Solved(place.key, marker, str(post.id), str(post.owner_id or ""), post.name, question,
                      forum_posts.solved_external_id(post.id), post.jump_url, answer_id, answer, answerer)


async def _opening(post: discord.Thread) -> discord.Message | None:
    """The message that opened a post (it has the post's id), or None when it is gone or unreadable."""
    try:
        return await post.fetch_message(post.id)
    except (discord.NotFound, discord.Forbidden) as exc:
        log.info("the opening message of post %s cannot be read: %s", post.id, exc)
        return None


class OfferingSolved:
    """The ``Send`` of a question in a served forum post: replies as :class:`ChannelSend` posts
    them, and after an answer the bot kept with sources, the offer to mark the post solved (a
    short message with the "Mark solved" button). An answer shown while it is written gets the
    offer once finished. Like every ``Send``, it never raises: a failed offer is logged."""

    def __init__(self, send: ChannelSend) -> None:
        self._send = send

    async def __call__(self, reply: Reply) -> None:
        await self._send(reply)
        await self.offer(reply)

    def draft(self, thread: str = "") -> AnswerDraft:
        """A draft of an answer (see :class:`~bot.neutral.DraftingSend`), with the offer when finished."""
        return _OfferingDraft(self._send.draft(thread), self)

    async def offer(self, reply: Reply) -> None:
        """Posts the offer under ``reply`` when it is an answer kept with sources."""
        if reply.kind is not ReplyKind.ANSWER or not reply.citations or reply.private:
            return
        custom_id = forum_posts.solved_custom_id(reply.answer_id)
        if custom_id is None:
            return
        view = button_view((render.ButtonSpec(OFFER_LABEL, custom_id, discord.ButtonStyle.success, "✅"),))
        try:
            destination = await self._send.destination()
            await destination.send(content=OFFER_TEXT, view=view, allowed_mentions=ALLOWED_MENTIONS)
        except Exception:  # noqa: BLE001 (logged with a reference; the answer itself is posted)
            log_failure(log, "offering to mark a post solved under answer %s failed (reference %s)", reply.answer_id)


class _OfferingDraft:
    """An answer draft (:class:`~bot.neutral.AnswerDraft`) followed, once finished, by the offer."""

    def __init__(self, draft: AnswerDraft, offering: OfferingSolved) -> None:
        self._draft = draft
        self._offering = offering

    @property
    def interval_s(self) -> float:
        return self._draft.interval_s

    async def show(self, text: str) -> None:
        await self._draft.show(text)

    async def finish(self, reply: Reply) -> None:
        await self._draft.finish(reply)
        await self._offering.offer(reply)
