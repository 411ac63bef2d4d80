"""A worker whose build is stuck stops renewing its lease, against a real Valkey.

Issue 28 point 2: a worker that hangs inside its build (a call that never returns) but
lives on kept renewing its channel's lease, so no other worker could ever build the
channel. The lease now watches the build's progress: no progress for ``stall_s`` and the
renewals stop, the lease runs out ``lease_s`` later, another worker takes the channel, and
the stuck one can no longer serve its tree.
"""

from __future__ import annotations

import time

import pytest

from bot.coordination.lease import ChannelLeases
from bot.coordination.link import RedisLink
from bot.neutral import ChannelKey
from raptor_engine import BuildBusy, BuildProgress, BuildSuperseded
from tests.coordination.conftest import coordination_config

KEY = ChannelKey("slack", "T1", "CSTALL")
LEASE_S, STALL_S = 2.0, 1.0


def leases(url: str, holder: str, stall_s: float | None = STALL_S) -> ChannelLeases:
    return ChannelLeases(RedisLink(coordination_config(url)), LEASE_S, holder, stall_s=stall_s)


def taken_by_another(url: str, within_s: float) -> bool:
    """Whether another worker takes ``KEY``'s lease within ``within_s`` (trying at least once)."""
    other = leases(url, "other")
    deadline = time.monotonic() + within_s
    while True:
        try:
            with other.hold(KEY):
                return True
        except BuildBusy:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)


def test_a_build_without_progress_lets_its_lease_run_out(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    stuck = leases(redis_url, "stuck")
    with stuck.hold(KEY):  # and no progress is ever reported
        assert not taken_by_another(redis_url, LEASE_S / 2)  # held at first
        assert taken_by_another(redis_url, STALL_S + LEASE_S + 2.0)
        with pytest.raises(BuildSuperseded):  # the stuck build, come back, cannot serve its tree
            stuck.confirm(KEY)
    assert "made no progress" in caplog.text


def test_a_build_that_progresses_keeps_its_lease(redis_url: str) -> None:
    busy = leases(redis_url, "busy")
    with busy.hold(KEY) as held:
        until = time.monotonic() + STALL_S + LEASE_S + 1.5
        while time.monotonic() < until:  # well past when a stalled build would have lost it
            held.progressed(BuildProgress("summarise", 1, 10, 1))
            time.sleep(0.2)
            assert not taken_by_another(redis_url, 0.0)
        busy.confirm(KEY)


def test_without_a_stall_time_the_lease_is_renewed_for_as_long_as_it_is_held(redis_url: str) -> None:
    """A one-shot rebuild (``python -m bot rebuild``) reports no progress to its lease."""
    one_shot = leases(redis_url, "one-shot", stall_s=None)
    with one_shot.hold(KEY):
        assert not taken_by_another(redis_url, STALL_S + LEASE_S + 1.5)
        one_shot.confirm(KEY)
