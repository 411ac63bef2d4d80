"""What a front-end process shares with its replicas, put together from the configuration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bot.config import Config
from bot.coordination.deliveries import FrontEndShare, SharedLedger
from bot.coordination.lease import holder_name
from bot.coordination.link import RedisLink
from bot.coordination.reply_stream import ReplyReader
from bot.coordination.shared_limits import LimiterFactory, shared_limiters
from bot.coordination.signing import RecordSigner
from bot.engine_calls import AsyncEngine
from bot.model_budget import SharedSpending
from bot.neutral import Courier
from bot.rebuilds.queued import QueuedRebuilds
from bot.rebuilds.requests import RebuildRequests


@dataclass(frozen=True, slots=True)
class FrontEnd:
    """The shared pieces of a front-end: event de-duplication, rate limits, the workspaces'
    daily model spending, queued rebuilds,
    and the reader posting workers' replies (those signed with ``signer``'s secret, to where
    someone asked)."""

    link: RedisLink
    deliveries: SharedLedger
    rebuilds: QueuedRebuilds
    limiters: LimiterFactory
    spending: SharedSpending
    signer: RecordSigner
    reply_max_age_s: float

    def reader(self, couriers: Mapping[str, Courier]) -> ReplyReader:
        """The reader of rebuild replies for the platforms in ``couriers`` (read as they are
        registered: adapters register theirs once connected)."""
        requests = RebuildRequests(self.link, self.signer)
        return ReplyReader(self.link, couriers, holder_name(), self.signer, requests.asked, self.reply_max_age_s)


def front_end(config: Config, engine: AsyncEngine) -> FrontEnd:
    """The front-end's coordination. ``config.coordination`` must be enabled."""
    link = RedisLink(config.coordination)
    return FrontEnd(
        link=link,
        deliveries=SharedLedger(link, config.coordination.event_ttl_s,
                                FrontEndShare(config.coordination.front_end_index, config.coordination.front_ends)),
        rebuilds=QueuedRebuilds(engine, config.bot, config.coordination, link),
        limiters=shared_limiters(link),
        spending=SharedSpending(link),
        signer=RecordSigner(config.coordination.secret.get_secret_value()),
        reply_max_age_s=config.coordination.reply_max_age_s,
    )
