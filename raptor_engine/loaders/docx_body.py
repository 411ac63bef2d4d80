"""The text of a Word document's main part, built from expat events.

Contract: :class:`DocxText` is fed the events of ``word/document.xml`` (see
:func:`raptor_engine.loaders.docx_xml.parse_part`) and collects its blocks of
text in document order: non-blank paragraphs, and tables as one line per row.
It refuses as CORRUPT a part whose root is not a Word ``document`` (e.g. a
spreadsheet renamed .docx) or that has no root at all, and counts every
character against the text budget as it goes. It keeps only buffers, never a
tree, so memory does not grow with the document's markup.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raptor_engine.loaders.common import Budget
from raptor_engine.loaders.docx_xml import XmlHandlers, docx_corrupt

_W_NAMESPACES = frozenset(
    {
        "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
        "http://purl.oclc.org/ooxml/wordprocessingml/main",  # "Strict Open XML"
    }
)
_MC_NAMESPACE = "http://schemas.openxmlformats.org/markup-compatibility/2006"
# Deleted and moved-away text (tracked changes) is not in the document as read.
_DOCX_SKIPPED = frozenset({"del", "moveFrom"})
_DOCX_MAX_COLUMNS = 512  # Word allows 63; only used to remember merged cells


@dataclass(slots=True)
class _DocxCell:
    blocks: list[str] = field(default_factory=list)
    span: int = 1
    continues: bool = False  # a vertically merged cell below the first: shows the cell above


@dataclass(slots=True)
class _DocxRow:
    cells: list[str] = field(default_factory=list)
    column: int = 0  # layout-grid column of the next cell
    by_column: dict[int, str] = field(default_factory=dict)


@dataclass(slots=True)
class _DocxTable:
    rows: list[str] = field(default_factory=list)
    above: dict[int, str] = field(default_factory=dict)  # the previous row's text per grid column


class DocxText:
    """Turns the main part's expat events into blocks of text, in document order.

    A block is a non-blank paragraph, or a table as one line per row with
    cells joined by `` | ``; paragraphs and tables inside a cell become that
    cell's text, whitespace collapsed. A cell spanning columns counts once; a
    vertically merged cell repeats the text of the cell it continues (as
    python-docx reads tables). Text comes from ``w:t`` (runs anywhere in a
    paragraph: hyperlinks, insertions, fields, content controls, text boxes),
    plus tabs, line breaks and non-breaking hyphens. Deleted text and the
    fallback copy of alternate content are left out. Only buffers are kept:
    the text and time budgets bound them.
    """

    def __init__(self, budget: Budget) -> None:
        self.blocks: list[str] = []
        self._budget = budget
        self._paragraphs: list[list[str]] = []
        self._tables: list[_DocxTable] = []
        self._rows: list[_DocxRow] = []
        self._cells: list[_DocxCell] = []
        self._root_seen = False
        self._skip = 0
        self._in_text = 0
        self._in_run = 0
        self._in_tabs = 0

    def handlers(self) -> XmlHandlers:
        return XmlHandlers(self.start, self.end, self.data)

    def finish(self) -> None:
        """Refuses a part that had no ``w:document`` root at all."""
        if not self._root_seen:
            raise docx_corrupt(self._budget.filename)

    def start(self, element: str, attributes: dict[str, str]) -> None:
        namespace, _, local = element.rpartition(" ")
        if not self._root_seen:
            self._root_seen = True
            if namespace not in _W_NAMESPACES or local != "document":
                raise docx_corrupt(self._budget.filename)  # e.g. a spreadsheet renamed .docx
        if namespace == _MC_NAMESPACE:
            self._skip += local == "Fallback"
        elif namespace in _W_NAMESPACES:
            self._start_w(local, attributes, namespace)

    def _start_w(self, local: str, attributes: dict[str, str], namespace: str) -> None:
        if local in _DOCX_SKIPPED:
            self._skip += 1
        elif local == "p":
            self._paragraphs.append([])
        elif local == "t":
            self._in_text += 1
        elif local == "r":
            self._in_run += 1
        elif local == "tabs":
            self._in_tabs += 1
        elif local in ("tab", "ptab") and self._in_run and not self._in_tabs:
            self._add("\t")
        elif local == "br" and self._in_run:
            if attributes.get(f"{namespace} type", "textWrapping") == "textWrapping":
                self._add("\n")  # page and column breaks are layout, not text
        elif local == "cr" and self._in_run:
            self._add("\n")
        elif local == "noBreakHyphen" and self._in_run:
            self._add("-")
        elif local == "tbl":
            self._tables.append(_DocxTable())
        elif local == "tr":
            self._rows.append(_DocxRow())
        elif local == "tc":
            self._cells.append(_DocxCell())
        elif local == "gridSpan" and self._cells:
            self._cells[-1].span = _grid_count(attributes.get(f"{namespace} val"), 1)
        elif local == "vMerge" and self._cells:
            self._cells[-1].continues = attributes.get(f"{namespace} val", "continue") == "continue"
        elif local == "gridBefore" and self._rows:
            self._rows[-1].column += _grid_count(attributes.get(f"{namespace} val"), 0)

    def end(self, element: str) -> None:
        namespace, _, local = element.rpartition(" ")
        if namespace == _MC_NAMESPACE:
            self._skip -= local == "Fallback"
        elif namespace not in _W_NAMESPACES:
            return
        elif local in _DOCX_SKIPPED:
            self._skip -= 1
        elif local == "t":
            self._in_text -= 1
        elif local == "r":
            self._in_run -= 1
        elif local == "tabs":
            self._in_tabs -= 1
        elif local == "p":
            self._block("".join(self._paragraphs.pop()))
        elif local == "tc":
            self._end_cell()
        elif local == "tr":
            self._end_row()
        elif local == "tbl":
            self._block("\n".join(self._tables.pop().rows))

    def data(self, text: str) -> None:
        if self._in_text:
            self._add(text)

    def _add(self, text: str) -> None:
        if self._skip or not self._paragraphs:
            return
        self._budget.add_text(len(text))
        buffer = self._paragraphs[-1]
        buffer.append(text)
        if len(buffer) > 1024:  # a paragraph of a million runs: keep one string, not a million
            buffer[:] = ["".join(buffer)]

    def _block(self, text: str) -> None:
        if not text.strip():
            return
        if self._cells:
            self._cells[-1].blocks.append(text)
        else:
            self.blocks.append(text)

    def _end_cell(self) -> None:
        cell = self._cells.pop()
        text = " ".join(" ".join(cell.blocks).split())
        if not self._rows:  # a cell outside any row: damaged, but its text still counts
            self._block(text)
            return
        row = self._rows[-1]
        if cell.continues and self._tables:
            text = self._tables[-1].above.get(row.column, "")
        if row.cells:
            self._budget.add_text(3)  # the " | " between cells is text too
        row.cells.append(text)
        for column in range(row.column, min(row.column + cell.span, _DOCX_MAX_COLUMNS)):
            row.by_column[column] = text
        row.column += cell.span

    def _end_row(self) -> None:
        row = self._rows.pop()
        line = " | ".join(row.cells) if any(row.cells) else ""
        if not self._tables:
            self._block(line)
            return
        table = self._tables[-1]
        if line:
            table.rows.append(line)
        table.above = row.by_column


def _grid_count(value: str | None, default: int) -> int:
    """A ``w:val`` count of grid columns, within 0 .. :data:`_DOCX_MAX_COLUMNS`."""
    try:
        return min(max(int(value or default), 0), _DOCX_MAX_COLUMNS)
    except ValueError:
        return default
