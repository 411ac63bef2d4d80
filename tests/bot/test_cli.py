"""The command line, in-process through ``bot.cli.main`` and as a real process."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.cli import main
from tests.conftest import REPO, SAMPLE, quality_articles

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}


def run(*argv: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def bot_process(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot", *argv], capture_output=True, text=True, env=ENV,
                          cwd=REPO, timeout=300, **kwargs)  # type: ignore[call-overload]


def test_ingest_rebuild_ask_inspect(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    code, out = run("--data-dir", data, "ingest", "--channel", "team", str(SAMPLE))
    assert code == 0 and "stored" in out and "The Aurora Team Handbook" in out
    code, out = run("--data-dir", data, "ingest", "--channel", "team", str(SAMPLE))
    assert code == 0 and "already stored" in out
    code, out = run("--data-dir", data, "rebuild", "--channel", "team")
    assert code == 0 and "Rebuilt: tree v1" in out
    code, out = run("--data-dir", data, "ask", "--channel", "team", "Who may roll back a deployment?")
    assert code == 0 and "[1] " in out and "excerpt" in out and "(node " in out
    code, out = run("--data-dir", data, "inspect", "--channel", "team")
    assert code == 0 and "tree v1" in out and "(layer 0)" in out
    root_id = out.split("Top of the tree", 1)[1].splitlines()[1].split()[0]
    code, out = run("--data-dir", data, "inspect", "--channel", "team", "--node", root_id)
    assert code == 0 and "Summarises (" in out
    code, out = run("--data-dir", data, "sources", "--channel", "team")
    assert code == 0 and "aurora" in out.lower()


def test_a_rebuild_with_nothing_changed_says_so_and_writes_nothing(tmp_path: Path) -> None:
    """Issue 31: the served tree is what a rebuild would build (same sources, same settings):
    no new version is written; ``--force`` rebuilds anyway; a new source or another chunk size
    makes a rebuild worth its while again."""
    data = str(tmp_path / "data")
    run("--data-dir", data, "ingest", "--channel", "c", str(SAMPLE))
    assert "Rebuilt: tree v1" in run("--data-dir", data, "rebuild", "--channel", "c")[1]
    code, out = run("--data-dir", data, "rebuild", "--channel", "c")
    assert code == 0 and "Nothing changed since tree v1" in out and "`rebuild --force` rebuilds anyway" in out
    assert "tree v1" in run("--data-dir", data, "inspect", "--channel", "c")[1]
    assert "Rebuilt: tree v2" in run("--data-dir", data, "rebuild", "--channel", "c", "--force")[1]
    config = tmp_path / "chunks.yaml"
    config.write_text("chunking:\n  tokens: 60\n")
    assert "Rebuilt: tree v3" in run("--config", str(config), "--data-dir", data, "rebuild", "--channel", "c")[1]
    extra = tmp_path / "extra.md"
    extra.write_text("# Release train\n\nThe release train leaves every Thursday at noon from the main branch.\n")
    run("--data-dir", data, "ingest", "--channel", "c", str(extra))
    assert "Rebuilt: tree v4" in run("--data-dir", data, "rebuild", "--channel", "c")[1]


def test_retrieve_json_shape_and_stdin_mode(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    run("--data-dir", data, "ingest", "--channel", "c", str(SAMPLE))
    run("--data-dir", data, "rebuild", "--channel", "c")
    code, out = run("--data-dir", data, "retrieve", "--channel", "c", "--json", "--budget", "500", "How do we deploy?")
    assert code == 0
    payload = json.loads(out)
    assert list(payload) == ["hits"] and payload["hits"]
    for hit in payload["hits"]:
        assert list(hit) == ["id", "layer", "score", "text", "tokens", "source"]
        assert list(hit["source"]) == ["title", "link"]
    assert sum(h["tokens"] for h in payload["hits"]) <= 500
    questions = "How do we deploy?\nWho is on call?\n\nWhat is the ledger?\n"
    code, out = run("--data-dir", data, "retrieve", "--channel", "c", "--json", "--mode", "leaves", stdin=questions)
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 4  # one line per input line, the blank one included
    assert json.loads(lines[2]) == {"hits": []}
    assert all(h["layer"] == 0 for line in lines for h in json.loads(line)["hits"])


def test_user_mistakes_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    bad = tmp_path / "photo.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    code, _ = run("--data-dir", data, "ingest", "--channel", "c", str(bad), str(tmp_path / "missing.txt"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 2 and all(line.startswith("error: ") for line in err)
    assert "photo.png" in err[0] and "missing.txt" in err[1]
    config = tmp_path / "c.yaml"
    config.write_text("retrieval:\n  budgett: 10\n")
    code, _ = run("--config", str(config), "sources", "--channel", "c")
    assert code == 1 and "retrieval.budgett: unknown key" in capsys.readouterr().err
    code, _ = run("--data-dir", data, "rebuild", "--channel", "empty")
    assert code == 1 and "no sources" in capsys.readouterr().err


def one_error_line(capsys: pytest.CaptureFixture[str], code: int, out: str) -> str:
    """The single ``error: ...`` line a refused command wrote on stderr (exit 1, nothing on stdout)."""
    err = capsys.readouterr().err.splitlines()
    assert code == 1 and out == "" and len(err) == 1 and err[0].startswith("error: "), (code, out, err)
    return err[0]


def test_a_question_about_an_unknown_channel_is_one_line_naming_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    for asked in (("ask", "--channel", "no-such-channel", "Who is on call?"),
                  ("retrieve", "--channel", "no-such-channel", "--json", "Who is on call?")):
        line = one_error_line(capsys, *run("--data-dir", data, *asked))  # not {"hits": []}, not "could not find"
        assert "no channel 'no-such-channel' is known" in line and "nor any other" in line
        assert "python -m bot ingest --channel no-such-channel FILE" in line
    assert run("--data-dir", data, "ingest", "--channel", "team", str(SAMPLE))[0] == 0
    capsys.readouterr()
    for _ in range(2):  # asking did not make the typo a channel: the second time is the same
        line = one_error_line(capsys, *run("--data-dir", data, "retrieve", "--channel", "tema", "Who is on call?"))
        assert "no channel 'tema' is known" in line and line.endswith("the known ones: team")


def test_a_question_about_a_channel_with_no_source_left_is_one_line_saying_what_to_add(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    assert run("--data-dir", data, "ingest", "--channel", "team", str(SAMPLE))[0] == 0
    source_id = run("--data-dir", data, "sources", "--channel", "team")[1].split("\n")[1].split()[0]
    assert run("--data-dir", data, "forget", "--channel", "team", source_id)[0] == 0
    capsys.readouterr()
    # Its last source forgotten, the store dropped the channel: it is not known any more.
    line = one_error_line(capsys, *run("--data-dir", data, "ask", "--channel", "team", "Who is on call?"))
    assert "no channel 'team' is known here (it never held a source, or its last one was forgotten)" in line
    # Known (listed once) but holding no source: nothing was searched, and the line says what to add.
    # (A question drops the empty channel again, so each is listed anew before it is asked.)
    for channel, pins in (("team", False), ("slack/T1/C9", True)):
        for asked in (("ask", "--channel", channel, "Who is on call?"),
                      ("retrieve", "--channel", channel, "--json", "Who is on call?")):
            code, out = run("--data-dir", data, "sources", "--channel", channel)
            assert code == 0 and out.startswith("No sources yet")
            capsys.readouterr()
            line = one_error_line(capsys, *run("--data-dir", data, *asked))
            assert line.startswith(f"error: the channel '{channel}' has no material yet: add a file "
                                   f"(python -m bot ingest --channel {channel} FILE)")
            assert line.endswith(", then ask again") and ("pin a message" in line) == pins


@pytest.mark.timeout(120)  # opening the pipe used to block for ever
def test_ingest_refuses_a_named_pipe_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pipe = tmp_path / "notes.txt"
    os.mkfifo(pipe)
    code, _ = run("--data-dir", str(tmp_path / "data"), "ingest", "--channel", "c", str(pipe))
    assert code == 1 and "notes.txt" in (err := capsys.readouterr().err) and "named pipe" in err


def test_process_exit_codes_and_no_traceback(tmp_path: Path) -> None:
    result = bot_process("--data-dir", str(tmp_path), "forget", "--channel", "c", "abcdef123")
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error: ") and "Traceback" not in result.stderr
    assert bot_process("nonsense").returncode == 2


@pytest.mark.slow
def test_sigkill_mid_rebuild_keeps_previous_tree_and_sources(tmp_path: Path) -> None:
    articles = quality_articles(3)
    files = []
    for index, article in enumerate(articles):
        path = tmp_path / f"article{index}.txt"
        path.write_text(article)
        files.append(str(path))
    data = str(tmp_path / "data")
    assert bot_process("--data-dir", data, "ingest", "--channel", "c", files[0]).returncode == 0
    assert bot_process("--data-dir", data, "rebuild", "--channel", "c").returncode == 0
    assert bot_process("--data-dir", data, "ingest", "--channel", "c", *files[1:]).returncode == 0

    process = subprocess.Popen([sys.executable, "-m", "bot", "--data-dir", data, "rebuild", "--channel", "c"],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=ENV, cwd=REPO)
    assert process.stderr is not None
    deadline = time.monotonic() + 240
    for line in process.stderr:
        if "subtrees" in line or time.monotonic() > deadline:  # the build proper has begun
            break
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL

    inspect = bot_process("--data-dir", data, "inspect", "--channel", "c")
    assert inspect.returncode == 0, inspect.stderr
    assert "tree v1" in inspect.stdout and "3 sources" in inspect.stdout
    ask = bot_process("--data-dir", data, "ask", "--channel", "c", "Who is Korvin?")
    assert ask.returncode == 0 and "[1]" in ask.stdout
    rebuilt = bot_process("--data-dir", data, "rebuild", "--channel", "c")
    assert rebuilt.returncode == 0 and "from 3 sources" in rebuilt.stdout


def test_config_points_the_cli_at_a_chroma_server(tmp_path: Path, chroma_server: tuple[str, int]) -> None:
    host, port = chroma_server
    config = tmp_path / "server.yaml"
    config.write_text(f"chroma:\n  host: {host}\n  port: {port}\n")
    channel = f"server-{tmp_path.name}"
    common = ("--config", str(config), "--data-dir", str(tmp_path / "data"))
    assert run(*common, "ingest", "--channel", channel, str(SAMPLE))[0] == 0
    assert run(*common, "rebuild", "--channel", channel)[0] == 0
    code, out = run(*common, "ask", "--channel", channel, "Who may roll back a deployment?")
    assert code == 0 and "[1]" in out
    assert not (tmp_path / "data").exists()  # nothing was written to an embedded store


def test_the_configured_summary_length_bounds_an_overview_answer(tmp_path: Path) -> None:
    """``retrieval.summary_chars`` reaches the offline answerer: the summary leading an overview
    answer is cut to it (the root summary itself is several times longer)."""
    data = str(tmp_path / "data")
    assert run("--data-dir", data, "ingest", "--channel", "c", str(SAMPLE))[0] == 0
    assert run("--data-dir", data, "rebuild", "--channel", "c")[0] == 0
    question = "What is this handbook about? Summarize its main points."
    lengths = {}
    for chars in (120, 900):
        config = tmp_path / f"summary-{chars}.yaml"
        config.write_text(f"retrieval:\n  summary_chars: {chars}\n")
        code, out = run("--config", str(config), "--data-dir", data, "ask", "--channel", "c", question)
        assert code == 0 and "summary (layer" in out, out
        lead = out.split("\n\n")[0].rsplit(" [1]", 1)[0]
        assert len(lead) <= chars
        lengths[chars] = len(lead)
    assert lengths[120] < lengths[900]


class _Writes(io.StringIO):
    """stdout that keeps each write apart: a streamed answer arrives in many."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_the_console_chat_prints_a_model_answer_as_it_is_written(tmp_path: Path) -> None:
    from testkit.openai_stub import running_stub

    data = tmp_path / "data"
    assert run("--data-dir", str(data), "ingest", "--channel", "team", str(SAMPLE))[0] == 0
    with running_stub() as stub:
        stub.answer_text = "The on-call engineer carries the pager for a week and watches the alerts channel [1]."
        stub.tokens_per_s = 50.0
        config = tmp_path / "config.yaml"
        config.write_text(f"data_dir: {data}\nconsole:\n  channel: team\n"
                          f"llm:\n  base_url: {stub.base_url}\n  model: stub-model\n")
        out = _Writes()
        code = main(["--config", str(config), "serve"], stdin=io.StringIO("What does on-call do?\n/quit\n"),
                    stdout=out)
    assert code == 0
    printed = out.getvalue()
    assert "carries the pager for a week and watches the alerts channel [1]." in printed
    pieces = [w for w in out.writes if w and w in stub.answer_text]
    assert len(pieces) >= 3, out.writes  # word by word, not one finished line


def test_the_question_set_holds_the_answers_people_found_right(tmp_path: Path) -> None:
    from bot.cli import channel_key, question_set
    from raptor_engine import AnswerRecord, ChannelKey

    def record(answer_id: str, votes: dict[str, int], found: bool = True) -> AnswerRecord:
        return AnswerRecord(answer_id, f"question {answer_id}?", f"answer {answer_id}", "Ana", "2026-12-04T10:00:00Z",
                            ("s1",), votes, found=found)

    kept = [record("a", {"u1": 1}), record("b", {"u1": 1, "u2": -1}), record("c", {"u1": -1}),
            record("d", {"u1": 1}, found=False), record("e", {"u1": 1, "u2": 1, "u3": -1})]
    lines = [json.loads(line) for line in question_set(kept)]
    assert [line["answer_id"] for line in lines] == ["a", "e"]
    assert lines[0] == {"question": "question a?", "answer": "answer a", "source_ids": ["s1"], "answer_id": "a",
                        "answered_at": "2026-12-04T10:00:00Z", "ups": 1, "downs": 0, "changed": False}
    assert channel_key("slack/T1/C9") == ChannelKey("slack", "T1", "C9")
    assert channel_key("team") == ChannelKey("cli", "local", "team")
    code, out = run("--data-dir", str(tmp_path / "data"), "questions", "--channel", "slack/T1/C9")
    assert code == 0 and out == ""  # no answers kept there: an empty set, not an error


def test_check_and_a_held_back_rebuild_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    from bot.composition import build_engine
    from bot.config import Config
    from raptor_engine import ChannelKey
    from tests.faults import half_the_leaves_lost

    data = str(tmp_path / "data")
    question = "What happens when the on-call engineer cannot be reached?"
    assert run("--data-dir", data, "ingest", "--channel", "team", str(SAMPLE))[0] == 0
    assert run("--data-dir", data, "rebuild", "--channel", "team")[0] == 0
    code, out = run("--data-dir", data, "check", "--channel", "team")
    assert code == 0 and out.startswith("No approved questions yet")
    engine = build_engine(Config(data_dir=tmp_path / "data"))
    key = ChannelKey("cli", "local", "team")
    engine.keep_answer(key, "a1", question, asyncio.run(engine.answer(key, question)), "Ana")
    engine.vote(key, "a1", "U1", up=True)

    code, out = run("--data-dir", data, "check", "--channel", "team")
    assert code == 0 and "1 of 1 approved question finds its sources" in out and f"✓ {question}" in out
    code, out = run("--data-dir", data, "rebuild", "--channel", "team", "--force")  # nothing changed: forced
    assert code == 0 and "Rebuilt: tree v2" in out and "1 of 1 approved question finds its sources" in out
    code, out = run("--data-dir", data, "inspect", "--channel", "team")
    assert "Check: 1 of 1 approved question finds its sources." in out

    extra = tmp_path / "rota.md"
    extra.write_text("# Rota\n\nThe on-call rota is published every Friday for the next four weeks.\n")
    assert run("--data-dir", data, "ingest", "--channel", "team", str(extra))[0] == 0  # something to rebuild
    half_the_leaves_lost(monkeypatch)  # a broken leaf cache
    capsys.readouterr()
    code, out = run("--data-dir", data, "rebuild", "--channel", "team")
    error = capsys.readouterr().err
    held = re.search(r"\nRebuild held back: it holds (\d+) of the (\d+) excerpts", error)  # after progress
    assert code == 1 and out == "" and held and 2 * int(held[1]) <= int(held[2]) + 1, error
    assert "`rebuild --force` serves the new one anyway" in error
    code, out = run("--data-dir", data, "inspect", "--channel", "team")
    assert "tree v2" in out and f"The last rebuild was held back: it holds {held[1]} of the {held[2]} excerpts" in out
    code, out = run("--data-dir", data, "rebuild", "--channel", "team", "--force")
    assert code == 0 and f"Served although the check would have held it back: it holds {held[1]} of the {held[2]}" in out


def test_the_demo_suggests_the_command_that_runs_where_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The image has no .venv: its Dockerfile names its own command in RAPTOR_COMMAND."""
    from bot.cli import COMMAND_ENV_VAR, own_command
    from bot.replies import ask_your_own_text

    monkeypatch.delenv(COMMAND_ENV_VAR, raising=False)
    assert ask_your_own_text("demo", own_command()).endswith('.venv/bin/python -m bot ask --channel demo "..."')
    dockerfile = (REPO / "Dockerfile").read_text()
    image_command = re.search(rf'{COMMAND_ENV_VAR}="([^"]+)"', dockerfile)
    assert image_command and image_command[1].startswith("docker run") and "raptor-chat" in image_command[1]
    monkeypatch.setenv(COMMAND_ENV_VAR, image_command[1])
    assert ask_your_own_text("demo", own_command()) == f'\nAsk your own: {image_command[1]} ask --channel demo "..."'
