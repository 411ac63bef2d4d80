"""One writer per embedded data directory, with real processes.

A process holds the data directory (the bot itself, or a helper that opens the
store and sleeps); a command run beside it must refuse in one line naming the
holder, exit 1 and leave the directory untouched. Once the holder is SIGKILLed,
its lock file stays behind but blocks no one.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bot.cli import main
from bot.config import Config
from bot.data_lock import LOCK_NAME, lock_data_dir
from bot.errors import DataDirInUse
from tests.conftest import REPO, SAMPLE

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from bot.composition import open_store
    from bot.config import Config
    store = open_store(Config(data_dir=Path(sys.argv[1])))
    print("holding", flush=True)
    time.sleep(600)
""")


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory`` with its size and modification time, but numba's cache:
    processes share it by design, and the holder's UMAP warm-up may be writing it meanwhile."""
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*"))
            if p.is_file() and p.relative_to(directory).parts[0] != "numba-cache"}


def cli_process(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot", *argv], check=False, capture_output=True, text=True, env=ENV,
                          cwd=REPO, timeout=300)


def wait_for_line(process: subprocess.Popen[str], fragment: str, timeout: float = 240) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        if fragment in line:
            return
        assert time.monotonic() < deadline, f"no {fragment!r} in time"
    raise AssertionError(f"the process ended before {fragment!r} (exit {process.wait()})")


@contextmanager
def started(argv: list[str], ready: str) -> Iterator[subprocess.Popen[str]]:
    """A process in its own session, running until the test ends; every process of its session
    (the bot's clustering worker too) is killed at the end."""
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env=ENV, cwd=REPO, start_new_session=True)
    try:
        wait_for_line(process, ready)
        yield process
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)


@pytest.mark.slow
def test_ingest_beside_the_bot_is_refused_until_the_bot_is_killed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with started([sys.executable, "-m", "bot", "--data-dir", str(data)], ready="Welcome") as bot:
        before = snapshot(data)
        refused = cli_process("--data-dir", str(data), "ingest", "--channel", "c", str(SAMPLE))
        assert refused.returncode == 1
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert lines[0].startswith(f"error: The data directory {data} is in use by process {bot.pid} (")
        assert "-m bot --data-dir" in lines[0]  # the holder's command, as ps shows it
        assert "Use that process, or a Chroma server (chroma.host" in lines[0]
        assert snapshot(data) == before  # nothing written, not even the lock file

        bot.send_signal(signal.SIGKILL)  # only the bot: its worker process may live on a while
        bot.wait(timeout=30)
        assert (data / LOCK_NAME).exists()  # the stale lock file is still there...
        stored = cli_process("--data-dir", str(data), "ingest", "--channel", "c", str(SAMPLE))
        assert stored.returncode == 0, stored.stderr  # ...and blocks no one
        assert "stored" in stored.stdout


def test_a_command_in_this_process_is_refused_while_another_holds_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    with started([sys.executable, "-c", HOLDER, str(data)], ready="holding") as holder:
        before = snapshot(data)
        out = io.StringIO()
        code = main(["--data-dir", str(data), "sources", "--channel", "c"], stdout=out)
        err = capsys.readouterr().err
        assert code == 1 and out.getvalue() == ""
        assert f"is in use by process {holder.pid} (" in err and err.count("\n") == 1
        assert snapshot(data) == before
        with pytest.raises(DataDirInUse):
            lock_data_dir(data)

        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        code = main(["--data-dir", str(data), "sources", "--channel", "c"], stdout=out)
        assert code == 0


def test_one_process_shares_its_lock_and_releases_it(tmp_path: Path) -> None:
    first = lock_data_dir(tmp_path)
    assert lock_data_dir(tmp_path) is first  # the same process opening the directory again
    content = (tmp_path / LOCK_NAME).read_text().splitlines()
    assert content[0] == str(os.getpid()) and "python" in content[1]
    first.release()
    again = lock_data_dir(tmp_path)
    assert again is not first
    again.release()


def test_a_server_takes_no_lock(tmp_path: Path, chroma_server: tuple[str, int]) -> None:
    from bot.composition import open_store

    host, port = chroma_server
    data = tmp_path / "data"
    with started([sys.executable, "-c", HOLDER, str(data)], ready="holding"):
        open_store(Config(data_dir=data, chroma={"host": host, "port": port}))  # type: ignore[arg-type]


def test_a_data_directory_this_user_may_not_write_is_one_line_saying_how_to_fix_its_owner(tmp_path: Path) -> None:
    """As a container's user meets a bind-mounted directory of another owner: one line naming
    the directory and the fix, exit 1, no traceback. Root may write anywhere (and the test's
    Python may live in root's home, which no other user enters), so as root the command runs
    without the capabilities that let root ignore a directory's owner and mode (setpriv),
    beside a directory of nobody's; as another user the directory is made read-only."""
    data = tmp_path / "data"
    data.mkdir()
    command = [sys.executable, "-m", "bot", "--data-dir", str(data), "ask", "--channel", "c", "q"]
    if os.getuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("as root, this test needs util-linux's setpriv to drop the capability to write anywhere")
        os.chown(data, 65534, 65534)
        drop = "-dac_override,-dac_read_search,-fowner"
        command = ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", "--", *command]
    else:
        data.chmod(0o555)
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300, check=False,
                          env={**ENV, "XDG_CACHE_HOME": str(data / ".cache")})
    data.chmod(0o755)
    uid = os.getuid()
    assert done.returncode == 1 and done.stdout == "", done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        f"error: Cannot write the data directory {data.resolve()}: this process runs as user {uid}: make that user "
        f"its owner (chown -R {uid} {data.resolve()}), or run as a user who may write it (docker run --user)."]
