"""Opening Chroma: :class:`ChromaStore`, the database that holds every channel.

Contract: Chroma is opened embedded (a data directory of this process) or remote (a Chroma
server, with token or HTTP basic credentials, each request given up after a deadline:
``deadline.py``); either way a failure to open is a ``StoreUnavailable`` or ``StoreError``
whose message names no credential. A store hands out
one :class:`ChannelStore` per channel, registering the channel in ``rc-channels`` on first
use. Opening a store brings the records earlier versions wrote to the current format, once
(``migrations.py``). On the embedded store it also reclaims the disk space Chroma keeps after deleting
collections, and tidies what rebuilds leave behind (``reclaim.py``); a Chroma server keeps
those files (chroma issue 5259), and only its operator can reclaim them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from raptor_engine import defaults
from raptor_engine.errors import RaptorError, StoreError, StoreUnavailable
from raptor_engine.reclaim import Reclaimed, reclaim, tidy as tidy_database
from raptor_engine.store.channel import ChannelStore
from raptor_engine.store.common import channel_digest, log, open_registry, translated
from raptor_engine.store.deadline import open_with_deadline
from raptor_engine.store.migrations import migrate_listed, open_channel
from raptor_engine.store.write_clock import CountingClient, clock_for
from raptor_engine.types import ChannelKey


class ChromaStore:
    """The Chroma database holding every channel; hands out one :class:`ChannelStore` each."""

    def __init__(self, client: Any, path: Path | None = None) -> None:
        """``path``: the data directory of an embedded client, None for a Chroma server. An
        embedded client's writes are counted (``write_clock.py``): the reads every question
        makes are kept until this process writes again."""
        self._clock = clock_for(path) if path is not None else None
        self._client = CountingClient(client, self._clock) if self._clock is not None else client
        self._path = path
        self._reclaiming = threading.Lock()  # one reclaim at a time: two would rewrite the file twice

    @classmethod
    def embedded(cls, path: Path) -> ChromaStore:
        """Chroma embedded in this process, persisted under ``path``.

        Records earlier versions wrote are brought to the current format first
        (``migrations.py``). What a crash between dropping a channel and reclaiming its space
        left behind is reclaimed here, cheaply (:meth:`reclaim` with ``only_if_worth``); a
        failure of that is logged, not raised: the store works without it.
        """
        import chromadb
        from chromadb.config import Settings

        with translated(f"opening {path}"):
            path.mkdir(parents=True, exist_ok=True)
            client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
        store = cls(client, path)
        migrate_listed(store._client)
        try:
            store.reclaim(only_if_worth=True)
        except StoreError as exc:
            log.warning("could not reclaim the space Chroma left in %s (the next forget tries again): %s", path, exc)
        return store

    @classmethod
    def remote(cls, host: str, port: int, ssl: bool = False, *, token: str = "",
               token_header: str = "Authorization", username: str = "", password: str = "",
               tenant: str = "default_tenant", database: str = "default_database",
               timeout_s: float = defaults.STORE_TIMEOUT_S) -> ChromaStore:
        """A Chroma server (``chroma run``, a secured server, or hosted Chroma) reached over HTTP.

        Credentials go through Chroma's own client auth providers: ``token`` is sent as
        ``Authorization: Bearer <token>`` (or in ``X-Chroma-Token`` when ``token_header``
        names it), ``username`` and ``password`` as HTTP basic. ``tenant`` and
        ``database`` must exist on the server. Opening, and every request after it, is given
        up after ``timeout_s`` (``deadline.py``): a server that does not answer then raises
        ``StoreTimeout``. Raises ``StoreUnavailable`` when the server cannot be reached,
        ``StoreError`` when it refuses the credentials or has no such tenant or database. No
        credential appears in an error message. Records earlier versions wrote are brought
        to the current format first (``migrations.py``).
        """
        import chromadb
        from chromadb.config import Settings
        from chromadb.errors import ChromaError, NotFoundError

        where = f"the Chroma server at {host}:{port}"
        settings = Settings(anonymized_telemetry=False, **cls._auth_settings(token, token_header, username, password))

        def connect() -> Any:
            client = chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=settings,
                                         tenant=tenant, database=database)
            client.heartbeat()
            return client

        try:
            client = open_with_deadline(connect, timeout_s, where)
        except RaptorError:
            raise
        except ChromaError as exc:
            # Chroma answers a refused sign-in with 401 (AuthorizationError) or 403 (AuthError).
            if exc.code() in (401, 403):
                raise StoreError(f"{where} refused access: the credentials are missing or wrong ({exc.name()})") from None
            if isinstance(exc, NotFoundError):
                raise StoreError(f"{where} has no tenant {tenant!r} with a database {database!r}") from None
            raise StoreUnavailable(f"{where} failed to open: {exc}") from exc
        except Exception as exc:
            raise StoreUnavailable(f"cannot reach {where}: {exc}") from exc
        migrate_listed(client)
        return cls(client)

    def reachable(self) -> bool:
        """Whether the store answers now (a server's heartbeat, within the server's deadline;
        the embedded store always answers). Never raises: for readiness checks."""
        try:
            self._client.heartbeat()
        except Exception:
            return False
        return True

    @staticmethod
    def _auth_settings(token: str, token_header: str, username: str, password: str) -> dict[str, Any]:
        """Chroma client settings for a token or HTTP basic credentials ({} for none).
        Chroma itself refuses a token of other than ASCII letters, digits and punctuation
        with a message that reads like a connection failure: checked here instead."""
        if token:
            if not all(33 <= ord(char) < 127 for char in token):
                raise StoreError("the Chroma token may hold only ASCII letters, digits and punctuation")
            return {
                "chroma_client_auth_provider": "chromadb.auth.token_authn.TokenAuthClientProvider",
                "chroma_client_auth_credentials": token,
                "chroma_auth_token_transport_header": token_header,
            }
        if username or password:
            return {
                "chroma_client_auth_provider": "chromadb.auth.basic_authn.BasicAuthClientProvider",
                "chroma_client_auth_credentials": f"{username}:{password}",
            }
        return {}

    def channel(self, key: ChannelKey) -> ChannelStore:
        """The store of one channel; registers the channel on first use, its records brought to
        the current format first if an earlier version wrote them (``migrations.py``)."""
        digest = channel_digest(key)
        open_channel(self._client, key, digest)
        return ChannelStore(self._client, key, digest, self._clock)

    def reclaim(self, only_if_worth: bool = False) -> Reclaimed | None:
        """Gives back the disk space embedded Chroma keeps after collections are deleted (a
        dropped channel's): removes their segment directories and compacts its SQLite file
        (see ``reclaim.py``). ``only_if_worth``: the cheap check at open, which compacts
        only a file that is largely free pages. Safe while this store is in
        use (from any thread).

        On a Chroma server this does nothing and returns None: dropping collections is all a
        client can do there. The server keeps their segment directories (chroma issue 5259)
        and the free pages in its SQLite file; ``chroma vacuum`` on the server's directory,
        run by its operator, reclaims those pages. Raises ``StoreError`` if a step fails.
        """
        if self._path is None:
            return None
        with self._reclaiming:
            reclaimed = reclaim(self._path, always_compact=not only_if_worth)
        if reclaimed.freed > 0:
            log.info("reclaimed %.2f MB in %s (%d orphan segment directories; SQLite file %.2f -> %.2f MB)",
                     reclaimed.freed / 1e6, self._path, reclaimed.orphans,
                     reclaimed.database_before / 1e6, reclaimed.database_after / 1e6)
        return reclaimed

    def tidy(self) -> None:
        """Keeps what rebuilds leave behind from piling up: on the embedded store, merges
        Chroma's full-text index once deleted entries are a quarter of it (only older stores
        put texts there, see ``TEXT_KEY``) and gives the file's free pages back (see ``reclaim.tidy``). Nothing on a Chroma server, whose
        files are its own. Safe while the store is in use. Raises ``StoreError``."""
        if self._path is None:
            return
        with self._reclaiming:
            tidy_database(self._path)

    def channels(self) -> list[ChannelKey]:
        """Every channel that has ever been used, in a stable order."""
        with translated("listing channels"):
            registry = open_registry(self._client)
            metadatas = registry.get(include=["metadatas"])["metadatas"] or []
        keys = [ChannelKey(str(m["platform"]), str(m["workspace"]), str(m["channel"])) for m in metadatas]
        return sorted(keys, key=str)

