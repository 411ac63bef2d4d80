"""The Markdown the adapters share (``adapters.markdown_text``) and the console's answers.

Pure functions: where a long text is cut, and how a table is laid out in columns.
"""

from __future__ import annotations

from adapters.console.translate import render_reply
from adapters.markdown_text import align_tables, fences, split_markdown, tables
from bot.neutral import CitationKind, CitationView, Reply, ReplyKind

TABLE = "| Name | Team | Pages |\n|:--|:-:|--:|\n| Ana | `infra` | 12 |\n| Bénédicte 漢字 | web \\| api | 3 |"


def test_a_table_is_laid_out_in_aligned_columns() -> None:
    text = f"Who was paged:\n\n{TABLE}\n\nAbove."
    assert align_tables(text) == (
        "Who was paged:\n\n"
        "Name           |   Team    | Pages\n"
        "---------------+-----------+------\n"
        "Ana            |   infra   |    12\n"
        "Bénédicte 漢字 | web | api |     3\n"  # the two wide characters take four columns
        "\nAbove."
    )
    code = f"```\n{TABLE}\n```"
    assert align_tables(code) == code  # a table written inside code is code
    assert not tables("a | b\nnot a delimiter\n")


def test_the_console_prints_an_answer_as_written_with_its_tables_aligned() -> None:
    answer = Reply(ReplyKind.ANSWER, f"## Pages [1]\n\n{TABLE}\n\n- **Ana** leads", warning="Not checked.",
                   citations=(CitationView(1, CitationKind.EXCERPT, 0, "l.1", "Rota", "", "| x | y |"),))
    printed = render_reply(answer)
    assert printed.startswith("## Pages [1]\n\nName           |   Team    | Pages\n")
    assert "\n\n- **Ana** leads\n⚠ Not checked.\n\n[1] excerpt · Rota — “| x | y |”" in printed


def test_split_markdown_keeps_blocks_whole_or_closes_and_reopens_them() -> None:
    code = "~~~~yaml\n" + "".join(f"key{n}: value\n" for n in range(80)) + "~~~~"
    text = "Intro. " * 30 + "\n\n" + code + "\n\nOutro."
    pieces = split_markdown(text, 400)
    # Too large for any piece, the block starts after the intro; each piece closes it, the next reopens it.
    assert len(pieces) >= 3 and all(len(fences(piece)) == 1 and fences(piece)[0].closed for piece in pieces)
    assert pieces[0].startswith("Intro.") and all(piece.startswith("~~~~yaml\nkey") for piece in pieces[1:])
    assert all(len(piece) <= 400 for piece in pieces)
    assert pieces[-1].endswith("~~~~\n\nOutro.")

    rows = "".join(f"| row {n} | {'x' * 20} |\n" for n in range(40))
    table = "| a | b |\n|---|---|\n" + rows
    cut = split_markdown("Intro.\n\n" + table, 300)
    # Too large for any piece, the table is cut between rows, its header repeated above the rest.
    assert cut[0].startswith("Intro.\n\n| a | b |\n|---|---|\n| row 0 |") and len(cut) >= 3
    assert all(piece.startswith("| a | b |\n|---|---|\n| row") for piece in cut[1:])
    assert "".join(piece.split("|---|---|\n", 1)[1] + "\n" for piece in cut) == rows
    assert split_markdown("x" * 450, 200) == ["x" * 200, "x" * 200, "x" * 50]
    assert split_markdown("  \n ", 10) == []
