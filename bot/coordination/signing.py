"""Records the bot's processes hand one another through Redis, signed so that Redis alone is not trusted.

Anyone who can write to the coordination server could otherwise queue a rebuild request
for any channel, or append a reply that a front-end posts wherever it names. Each such
record is a flat mapping of strings; :class:`RecordSigner` adds an HMAC-SHA256 of its
canonical JSON (keys sorted, no spaces), keyed by ``coordination.secret``, which only the
bot's processes hold. A reader keeps a record only if the HMAC matches
(:func:`hmac.compare_digest`). Each kind of record is signed under its own *purpose*, so a
signed record of one kind cannot pass for another.

What signing cannot stop: a writer may copy a record the bot signed earlier (a replay) or
delete records. A replayed record says only what the bot already said, to where it said it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping

SIGNATURE_FIELD = "sig"


def canonical(purpose: str, fields: Mapping[str, str]) -> bytes:
    """The bytes signed for ``fields`` under ``purpose``: the same on every process."""
    return json.dumps({"purpose": purpose, "fields": dict(fields)}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True).encode("ascii")


class RecordSigner:
    """Signs and checks records with the processes' shared secret (never logged, never stored)."""

    def __init__(self, secret: str) -> None:
        """``secret``: ``coordination.secret``; raises ``ValueError`` if empty."""
        if not secret:
            raise ValueError("a record signer needs coordination.secret")
        self._key = secret.encode("utf-8")

    def __repr__(self) -> str:
        return "RecordSigner(<secret>)"

    def signature(self, purpose: str, fields: Mapping[str, str]) -> str:
        """The hex HMAC-SHA256 of ``fields`` under ``purpose``."""
        return hmac.new(self._key, canonical(purpose, fields), hashlib.sha256).hexdigest()

    def signed(self, purpose: str, fields: Mapping[str, str]) -> dict[str, str]:
        """``fields`` with their signature added (as :data:`SIGNATURE_FIELD`)."""
        if SIGNATURE_FIELD in fields:
            raise ValueError(f"a record to sign cannot have a field named {SIGNATURE_FIELD!r}")
        return {**fields, SIGNATURE_FIELD: self.signature(purpose, fields)}

    def verified(self, purpose: str, record: Mapping[str, str]) -> dict[str, str] | None:
        """The record's fields without the signature if it carries a valid one for
        ``purpose``, else None (unsigned, wrongly signed, or signed for another purpose)."""
        given = record.get(SIGNATURE_FIELD)
        if not isinstance(given, str):
            return None
        fields = {name: value for name, value in record.items() if name != SIGNATURE_FIELD}
        if not all(isinstance(value, str) for value in fields.values()):
            return None
        # As bytes: compare_digest refuses a str that is not ASCII, and a forged one may not be.
        if not hmac.compare_digest(self.signature(purpose, fields).encode(), given.encode("utf-8", "replace")):
            return None
        return fields
