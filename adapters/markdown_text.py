"""Pure Markdown handling shared by the adapters: fenced code and tables found in a text,
tables laid out in aligned columns, and long Markdown cut into pieces that each render
on their own.

A model (or the extractive answerer) writes standard Markdown: paragraphs, lists,
headings, fenced code, pipe tables. Platforms differ in what they render, so each
adapter picks what it needs here:

* :func:`split_markdown` cuts a text into pieces within a size limit, at paragraph,
  line, sentence or word boundaries, never inside a fenced code block or a table when
  the block fits in a piece of its own; a block too large for any piece is cut inside,
  a code block closed at the end of one piece and reopened (with its info string) at
  the start of the next, a table's header repeated above its remaining rows;
* :func:`align_tables` lays every pipe table out in aligned columns, as plain text or
  inside a fenced code block (for a platform that does not render tables).

Only lines outside fenced code count as Markdown structure: a table or a fence
written inside a code block is code. Nothing here does input/output.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Weight = Callable[[str], int]
"""How much one character counts towards a limit (1 for plain characters, more for one
that a platform escapes into several)."""

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_DELIMITER_CELL = re.compile(r"^\s*:?-+:?\s*$")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")
# Where a piece may end, best first: a paragraph, a line, a sentence, a clause, a word.
SEPARATORS = ("\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " ")


def one(_: str) -> int:
    """The weight of a character counted as itself."""
    return 1


@dataclass(frozen=True, slots=True)
class Block:
    """A fenced code block or a table in a text, as offsets into it.

    ``start`` is where its first line begins; ``end`` where its last line ends (before
    that line's newline; the text's length for a code block never closed). ``head`` is
    what a continuation repeats: a code block's opening line, or a table's header and
    delimiter lines; ``body`` is where the lines after the head begin. ``close`` is the
    line that ends a code block cut short (empty for a table); ``closed`` is False for
    a code block the text never closes.
    """

    start: int
    end: int
    head: str
    body: int
    close: str
    closed: bool = True

    def holds(self, cut: int) -> bool:
        """True when cutting the text at ``cut`` would fall inside this block."""
        return self.start < cut < self.end


def _lines(text: str) -> list[tuple[int, str]]:
    """Each line of ``text`` with the offset it starts at (newlines not included)."""
    out = []
    offset = 0
    for line in text.split("\n"):
        out.append((offset, line))
        offset += len(line) + 1
    return out


def fences(text: str) -> list[Block]:
    """The fenced code blocks of ``text``, in order (CommonMark's rule: a fence of three or
    more backticks or tildes, closed by a run of the same character at least as long)."""
    blocks = []
    lines = _lines(text)
    index = 0
    while index < len(lines):
        offset, line = lines[index]
        opening = _FENCE.match(line)
        index += 1
        if opening is None or (opening.group(2)[0] == "`" and "`" in opening.group(3)):
            continue
        indent, marker = opening.group(1), opening.group(2)
        end, body, closed = len(text), offset + len(line) + 1, False
        while index < len(lines):
            close_offset, close_line = lines[index]
            index += 1
            closing = _FENCE.match(close_line)
            if closing and closing.group(2)[0] == marker[0] and len(closing.group(2)) >= len(marker) \
                    and not closing.group(3).strip():
                end, closed = close_offset + len(close_line), True
                break
        blocks.append(Block(offset, end, line, min(body, len(text)), f"{indent}{marker}", closed))
    return blocks


def _cells(line: str) -> list[str]:
    """A table row's cells, the outer pipes dropped and ``\\|`` kept inside its cell."""
    row = line.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return [cell.strip() for cell in _UNESCAPED_PIPE.split(row)]


def _is_delimiter(line: str) -> bool:
    return "-" in line and all(_DELIMITER_CELL.match(cell) for cell in _cells(line))


def tables(text: str) -> list[Block]:
    """The pipe tables of ``text`` outside fenced code, in order: a header row, a delimiter
    row with as many cells (``---``, ``:--``, ``--:``, ``:-:``), then every following
    non-blank line that has a pipe."""
    code = fences(text)
    lines = _lines(text)
    blocks = []
    index = 0
    while index + 1 < len(lines):
        (offset, header), (_, delimiter) = lines[index], lines[index + 1]
        if any(block.start <= offset <= block.end for block in code) or "|" not in header \
                or not _is_delimiter(delimiter) or len(_cells(header)) != len(_cells(delimiter)):
            index += 1
            continue
        last = index + 1
        while last + 1 < len(lines) and lines[last + 1][1].strip() and "|" in lines[last + 1][1] \
                and not any(block.start <= lines[last + 1][0] <= block.end for block in code):
            last += 1
        end = lines[last][0] + len(lines[last][1])
        body = min(lines[index + 1][0] + len(delimiter) + 1, len(text))
        blocks.append(Block(offset, end, f"{header}\n{delimiter}", body, ""))
        index = last + 1
    return blocks


# -- tables in aligned columns ----------------------------------------------------------------


def display_width(text: str) -> int:
    """Columns ``text`` takes in a fixed-width font: wide (East Asian) characters take two,
    combining marks none."""
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def _plain_cell(cell: str) -> str:
    """A cell as fixed-width text shows it: emphasis and code markers dropped (they would
    show literally), an escaped pipe as a pipe."""
    return cell.replace("\\|", "|").replace("**", "").replace("__", "").replace("`", "")


def _pad(cell: str, width: int, align: str) -> str:
    room = width - display_width(cell)
    if align == "right":
        return " " * room + cell
    if align == "center":
        return " " * (room // 2) + cell + " " * (room - room // 2)
    return cell + " " * room


def _alignment(cell: str) -> str:
    cell = cell.strip()
    if cell.startswith(":") and cell.endswith(":"):
        return "center"
    return "right" if cell.endswith(":") else "left"


def aligned_table(lines: Sequence[str]) -> list[str]:
    """A pipe table's lines (header, delimiter, rows) as fixed-width lines: cells padded to
    their column's width (as the delimiter row aligns them), columns separated by `` | ``,
    the header underlined with ``-`` and ``+``. Rows with fewer cells are padded, extra
    cells dropped, as Markdown renders them."""
    header, delimiter, *rows = lines
    aligns = [_alignment(cell) for cell in _cells(delimiter)]
    count = len(aligns)
    grid = [[_plain_cell(cell) for cell in _cells(line)][:count] for line in (header, *rows)]
    grid = [row + [""] * (count - len(row)) for row in grid]
    widths = [max(display_width(row[column]) for row in grid) for column in range(count)]
    shown = [" | ".join(_pad(cell, widths[c], aligns[c]) for c, cell in enumerate(row)).rstrip() for row in grid]
    rule = "-+-".join("-" * width for width in widths)
    return [shown[0], rule, *shown[1:]]


def align_tables(text: str, fenced: bool = False) -> str:
    """``text`` with every pipe table (outside fenced code) laid out by :func:`aligned_table`,
    inside a fenced code block when ``fenced``; everything else as written."""
    out = []
    done = 0
    for table in tables(text):
        layout = "\n".join(aligned_table(text[table.start : table.end].split("\n")))
        if fenced:
            layout = f"```\n{layout}\n```"
        out.append(text[done : table.start])
        out.append(layout)
        done = table.end
    out.append(text[done:])
    return "".join(out)


def close_open_fence(text: str) -> str:
    """``text`` with a code block left open at its end closed, so what follows it (a
    warning, another message) is not taken for code."""
    blocks = fences(text)
    if blocks and not blocks[-1].closed:
        return f"{text.rstrip()}\n{blocks[-1].close}"
    return text


# -- cutting into pieces ---------------------------------------------------------------------


def size_of(text: str, weight: Weight = one) -> int:
    """What ``text`` counts towards a limit."""
    return len(text) if weight is one else sum(weight(char) for char in text)


def fitting(text: str, limit: int, weight: Weight = one) -> int:
    """How many characters of ``text`` fit in ``limit`` (at least one)."""
    if weight is one:
        return max(min(len(text), limit), 1)
    used = 0
    for index, char in enumerate(text):
        used += weight(char)
        if used > limit:
            return max(index, 1)
    return len(text)


def split_markdown(text: str, limit: int, weight: Weight = one) -> list[str]:
    """``text`` in pieces that each count at most ``limit`` (by ``weight``), in order; see the
    module docstring for where they are cut. Blank pieces are dropped; whitespace is
    dropped only where a piece ends or the next begins, and a cut code block or table
    gains only its closing fence or repeated header. ``limit`` must leave room for a code
    block's opening line and closing fence (any platform's limit does)."""
    pieces: list[str] = []
    rest = text.strip()
    while rest and size_of(rest, weight) > limit:
        piece, rest = _cut(rest, limit, weight)
        pieces.append(piece)
        rest = rest.lstrip("\n").rstrip()
    if rest:
        pieces.append(rest)
    return [piece for piece in pieces if piece.strip()]


def _cut(text: str, limit: int, weight: Weight) -> tuple[str, str]:
    """The first piece of ``text`` (over ``limit``) and what is left to cut."""
    room = fitting(text, limit, weight)
    blocks = sorted(fences(text) + tables(text), key=lambda block: block.start)
    straddling = next((block for block in blocks if block.holds(room)), None)
    if straddling is not None and straddling.start > 0 and text[: straddling.start].strip() \
            and size_of(text[straddling.start : straddling.end], weight) <= limit:
        return text[: straddling.start].rstrip(), text[straddling.start :]  # the block moves whole
    if straddling is None or size_of(text[straddling.start : straddling.end], weight) <= limit:
        cut = _boundary(text, room, blocks)
        return text[:cut].rstrip(), text[cut:]
    return _cut_inside(text, straddling, limit, weight)


def _boundary(text: str, room: int, blocks: Sequence[Block]) -> int:
    """The best place to end a piece of at most ``room`` characters: the last separator (by
    :data:`SEPARATORS` order) in the second half that is outside every block; ``room``
    itself when there is none."""
    window = text[:room]
    half = room // 2
    for separator in SEPARATORS:
        at = window.rfind(separator)
        while at >= half:
            cut = at + len(separator)
            if not any(block.holds(cut) for block in blocks):
                return cut
            at = window.rfind(separator, 0, at)
    return room


def _cut_inside(text: str, block: Block, limit: int, weight: Weight) -> tuple[str, str]:
    """Cuts ``text`` inside ``block`` (too large for any piece): at a line end within it
    (else a space, else anywhere), the piece closing a code block and the rest reopening
    it, or repeating a table's header."""
    closing = f"\n{block.close}" if block.close else ""
    room = fitting(text, limit - size_of(closing, weight), weight)
    head = f"{block.head}\n"
    lowest = block.body + 1  # at least one character of the block's own lines goes in the piece
    window = text[:room]
    cut = window.rfind("\n", lowest) + 1 or window.rfind(" ", lowest) + 1 or room
    if cut <= lowest or cut - block.body <= len(head):
        if block.start > 0 and text[: block.start].strip():
            return text[: block.start].rstrip(), text[block.start :]
        cut = _boundary(text, room, ())  # a block too large even to start: cut as plain text
        return text[:cut].rstrip(), text[cut:]
    piece = text[:cut].rstrip("\n")
    return piece + closing, head + text[cut:]
