"""One builder per channel among the processes of one machine sharing a Chroma server (issue 13)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bot.build_lock import MachineBuildLocks
from raptor_engine.errors import BuildBusy
from raptor_engine.types import ChannelKey
from tests.conftest import REPO, SAMPLE

CHANNEL = ChannelKey("cli", "local", "team")


def test_a_second_builder_of_a_channel_is_refused_at_once_naming_the_first(tmp_path: Path) -> None:
    locks, other = MachineBuildLocks(tmp_path), MachineBuildLocks(tmp_path)
    with locks.hold(CHANNEL):
        with pytest.raises(BuildBusy, match=rf"process {os.getpid()} \(.*\) is rebuilding this channel"):
            with other.hold(CHANNEL):
                pass
        with other.hold(ChannelKey("cli", "local", "elsewhere")):  # another channel builds meanwhile
            pass
    with other.hold(CHANNEL):  # released when the first build ended
        pass


def test_each_server_and_database_has_its_own_locks(tmp_path: Path) -> None:
    one = MachineBuildLocks.for_server(tmp_path, "chroma.internal", 8000, "default_tenant", "a")
    assert one.directory == MachineBuildLocks.for_server(tmp_path, "chroma.internal", 8000, "default_tenant", "a").directory
    assert one.directory != MachineBuildLocks.for_server(tmp_path, "chroma.internal", 8000, "default_tenant", "b").directory
    assert one.directory.parent == tmp_path / "build-locks"


_HOLD = """
import sys, time
from pathlib import Path
from bot.build_lock import MachineBuildLocks
from raptor_engine.types import ChannelKey
locks = MachineBuildLocks.for_server(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), "default_tenant", "default_database")
with locks.hold(ChannelKey("cli", "local", sys.argv[4])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_cli_rebuild_beside_a_running_build_is_refused_until_its_holder_dies(
    tmp_path: Path, chroma_server: tuple[str, int]
) -> None:
    """Two processes on one machine and one Chroma server: a rebuild while another process
    builds the channel says who does, and changes nothing; once that process is killed
    (its lock file stays behind), the rebuild runs."""
    host, port = chroma_server
    channel = f"locked-{tmp_path.name}"
    config = tmp_path / "server.yaml"
    config.write_text(f"chroma:\n  host: {host}\n  port: {port}\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def bot(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "bot", "--config", str(config), *argv, "--channel", channel],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False)

    assert bot("ingest", str(SAMPLE)).returncode == 0
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path / "cache" / "raptor-chat"), host, str(port), channel],
                              stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        refused = bot("rebuild")
        assert refused.returncode == 1
        assert f"process {holder.pid} (python -c" in refused.stderr and "is rebuilding this channel" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert "no tree built yet" in bot("inspect").stdout.lower()  # nothing was built
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    rebuilt = bot("rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "no tree built yet" not in bot("inspect").stdout.lower()
