"""The tree picture: a PNG of a channel's RAPTOR tree, drawn from a :class:`TreeOutline`.

Only drawing and fitting text into boxes live here: the outline is read from the
engine by :func:`bot.tree_outline.tree_outline`, and every word drawn comes from
:mod:`bot.texts.outline` (which also writes the text outline sent beside the picture).

The picture is always exactly :data:`PICTURE_SIZE`. Every piece of text in it
is wrapped and cut with an ellipsis to fit its box, so no title or summary,
however long, runs off the canvas. Only Pillow's bundled font is used; glyphs
it lacks (CJK, emoji) come out as boxes rather than errors.
"""

from __future__ import annotations

import io
import logging
import unicodedata
from functools import lru_cache
from typing import TypeAlias

from PIL import Image, ImageDraw, ImageFont

from bot.texts import outline as words
from bot.tree_outline import Branch, TreeOutline

log = logging.getLogger(__name__)

PICTURE_SIZE = (1200, 800)
MAX_DRAWN_BRANCHES = 8  # more would not be readable at PICTURE_SIZE
MAX_LAYER_ROWS = 16

Font: TypeAlias = ImageFont.FreeTypeFont | ImageFont.ImageFont
Box: TypeAlias = tuple[int, int, int, int]  # left, top, right, bottom

# Colours.
BACKGROUND = "#f6f7f9"
INK = "#1f2937"
MUTED = "#6b7280"
RULE = "#d1d5db"
ROOT_FILL = "#e8f0fe"
ROOT_EDGE = "#3b6fd8"
BRANCH_FILL = "#ffffff"
BRANCH_EDGE = "#9ca3af"
SUMMARY_BAR = "#3b6fd8"
EXCERPT_BAR = "#9ca3af"
LINK = "#94a3b8"

# Layout (pixels) of the PICTURE_SIZE canvas.
MARGIN = 32
HEADER_BOTTOM = 100
LEFT_RIGHT = 316  # right edge of the layer panel
PANEL_LEFT = 352  # left edge of the root and branch panel
CONTENT_TOP = 116
FOOTER_TOP = 770
ROOT_BOTTOM = 292
GAP = 16
LINK_INSET = GAP // 2  # the links' trunk runs this far right of the panel's left edge


# -- the picture -------------------------------------------------------------------


def render_png(outline: TreeOutline) -> bytes:
    """A PNG of exactly :data:`PICTURE_SIZE`.

    It shows a header (title, version, when built, sources, pending changes), a
    bar per layer with its node count (layer 0 = excerpts at the bottom,
    summaries above), the top summary in a box, and the branches as boxes under
    it, each with its node id, children count, shortened summary and the titles
    of the sources feeding it. A channel with no tree yet gets a picture saying so.
    """
    image = Image.new("RGB", PICTURE_SIZE, BACKGROUND)
    draw = ImageDraw.Draw(image)
    _draw_header(draw, outline)
    if outline.version == 0:
        _draw_no_tree(draw, outline)
    else:
        _draw_layers(draw, outline.nodes_per_layer)
        _draw_top(draw, outline.top)
        _draw_branches(draw, outline)
        _draw_footer(draw)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _draw_header(draw: ImageDraw.ImageDraw, outline: TreeOutline) -> None:
    width = PICTURE_SIZE[0] - 2 * MARGIN
    title, meta = words.picture_header(outline)
    _draw_lines(draw, (MARGIN, 20), [title], _font(32), width, INK)
    _draw_lines(draw, (MARGIN, 64), [meta], _font(18), width, MUTED)
    draw.line((MARGIN, HEADER_BOTTOM, PICTURE_SIZE[0] - MARGIN, HEADER_BOTTOM), fill=RULE, width=2)


def _draw_no_tree(draw: ImageDraw.ImageDraw, outline: TreeOutline) -> None:
    width = PICTURE_SIZE[0] - 2 * MARGIN
    centre = PICTURE_SIZE[0] // 2
    _draw_centred(draw, centre, 330, words.NO_TREE_HEADLINE, _font(44), width, INK)
    _draw_centred(draw, centre, 400, words.no_tree_hint(outline.sources), _font(22), width, MUTED)


def _draw_layers(draw: ImageDraw.ImageDraw, nodes_per_layer: dict[int, int]) -> None:
    """One centred bar per layer, highest on top, so the tree reads as a pyramid."""
    width = LEFT_RIGHT - MARGIN
    _draw_lines(draw, (MARGIN, CONTENT_TOP), [words.LAYERS_HEADING], _font(20), width, INK)
    layers = sorted(nodes_per_layer, reverse=True)
    hidden = max(0, len(layers) - MAX_LAYER_ROWS)
    if hidden:
        layers = layers[: MAX_LAYER_ROWS - 1] + layers[-1:]
    if not layers:
        return
    top, bottom = CONTENT_TOP + 36, FOOTER_TOP - 12
    row = min(84, (bottom - top) // len(layers))
    label_font = _font(max(9, min(16, row * 3 // 10)))
    bar_height = max(3, row * 4 // 10)
    biggest = max(1, max(nodes_per_layer.values()))
    for index, layer in enumerate(layers):
        y = top + index * row
        count = nodes_per_layer[layer]
        label = _fit(words.layer_label(layer), label_font, width * 2 // 3)
        draw.text((MARGIN, y), label, font=label_font, fill=INK)
        number = _fit(f"{count:,}", label_font, width // 3)
        draw.text((LEFT_RIGHT - _length(number, label_font), y), number, font=label_font, fill=INK)
        bar = max(6, round(width * count / biggest))
        left = MARGIN + (width - bar) // 2
        bar_top = y + _line_height(label_font) + 2
        draw.rectangle((left, bar_top, left + bar, bar_top + bar_height),
                       fill=EXCERPT_BAR if layer == 0 else SUMMARY_BAR)
    if hidden:
        note = _fit(words.hidden_layers_note(hidden), _font(12), width)
        draw.text((MARGIN, bottom), note, font=_font(12), fill=MUTED)


def _draw_top(draw: ImageDraw.ImageDraw, top: tuple[Branch, ...]) -> None:
    box = (PANEL_LEFT, CONTENT_TOP, PICTURE_SIZE[0] - MARGIN, ROOT_BOTTOM)
    draw.rounded_rectangle(box, radius=12, fill=ROOT_FILL, outline=ROOT_EDGE, width=2)
    if not top:
        _draw_in_box(draw, box, words.NO_NODES, "", "", (), text_size=18)
        return
    root = top[0]
    heading, note = words.top_heading(top)
    _draw_in_box(draw, box, heading, note, root.summary, root.source_titles, text_size=18)


def _draw_branches(draw: ImageDraw.ImageDraw, outline: TreeOutline) -> None:
    right = PICTURE_SIZE[0] - MARGIN
    heading_y = ROOT_BOTTOM + 10
    heading_left = PANEL_LEFT + LINK_INSET + GAP
    branches = outline.branches[:MAX_DRAWN_BRANCHES]
    if not branches:
        text = words.no_branches_text(outline)
        _draw_lines(draw, (PANEL_LEFT, heading_y + 40), [text], _font(18), right - PANEL_LEFT, MUTED)
        return
    layer = branches[0].layer
    in_layer = max(outline.nodes_per_layer.get(layer, 0), len(outline.branches))
    heading = words.branches_heading(layer, len(branches), in_layer)
    _draw_lines(draw, (heading_left, heading_y), [heading], _font(16), right - heading_left, MUTED)
    boxes = _branch_boxes(len(branches), heading_y + 44, FOOTER_TOP - 8)
    _draw_links(draw, boxes, heading_y + 30)
    for branch, box in zip(branches, boxes):
        draw.rounded_rectangle(box, radius=10, fill=BRANCH_FILL, outline=BRANCH_EDGE, width=2)
        _draw_in_box(draw, box, branch.node_id, words.branch_note(branch), branch.summary, branch.source_titles, text_size=14)


def _branch_boxes(count: int, top: int, bottom: int) -> list[Box]:
    """A centred grid of ``count`` boxes (at most four per row, each at most 400 x 260 px)
    in the panel between ``top`` and ``bottom``, leaving a gutter on the left for the links."""
    columns = min(4, count)
    rows = -(-count // columns)
    panel = PICTURE_SIZE[0] - MARGIN - PANEL_LEFT - GAP
    width = min(400, (panel - GAP * (columns - 1)) // columns)
    height = min(260, (bottom - top - GAP * (rows - 1)) // rows)
    left0 = PANEL_LEFT + GAP + (panel - columns * width - GAP * (columns - 1)) // 2
    boxes: list[Box] = []
    for index in range(count):
        row, column = divmod(index, columns)
        left = left0 + column * (width + GAP)
        y = top + row * (height + GAP)
        boxes.append((left, y, left + width, y + height))
    return boxes


def _draw_links(draw: ImageDraw.ImageDraw, boxes: list[Box], bus_y: int) -> None:
    """A trunk from the root box down to a bus, and from the bus into each branch box's left side."""
    trunk = PANEL_LEFT + LINK_INSET
    lefts = [box[0] - GAP // 2 for box in boxes]
    draw.line((trunk, ROOT_BOTTOM, trunk, bus_y), fill=LINK, width=2)
    draw.line((trunk, bus_y, max(lefts + [trunk]), bus_y), fill=LINK, width=2)
    for x, box in zip(lefts, boxes):
        join = box[1] + 18
        draw.line((x, bus_y, x, join), fill=LINK, width=2)
        draw.line((x, join, box[0], join), fill=LINK, width=2)


def _draw_in_box(draw: ImageDraw.ImageDraw, box: Box, heading: str, note: str, text: str,
                 sources: tuple[str, ...], text_size: int) -> None:
    """Inside ``box``, clipped to it: a heading (a node id), a muted note, the wrapped
    ``text`` and, at the bottom, a "from" line of source titles."""
    pad = 12
    left, top, right, bottom = box[0] + pad, box[1] + pad - 2, box[2] - pad, box[3] - pad
    width = right - left
    heading_font, text_font, small_font = _font(text_size + 2), _font(text_size), _font(max(10, text_size - 2))
    y = _draw_lines(draw, (left, top), [heading], heading_font, width, ROOT_EDGE)
    if note:
        y = _draw_lines(draw, (left, y), [note], small_font, width, MUTED)
    titles = "; ".join(" ".join(title.split()) for title in sources)
    from_lines = _wrap("from " + titles, small_font, width, 2) if titles else []
    from_top = bottom - len(from_lines) * _line_height(small_font)
    room = (from_top - y - 6) // _line_height(text_font)
    if room > 0 and text:
        _draw_lines(draw, (left, y + 4), _wrap(text, text_font, width, room), text_font, width, INK)
    if from_lines and from_top >= y:
        _draw_lines(draw, (left, from_top), from_lines, small_font, width, MUTED)


def _draw_footer(draw: ImageDraw.ImageDraw) -> None:
    _draw_lines(draw, (MARGIN, FOOTER_TOP + 4), [words.PICTURE_FOOTER], _font(14), PICTURE_SIZE[0] - 2 * MARGIN, MUTED)


def _draw_centred(draw: ImageDraw.ImageDraw, centre: int, y: int, text: str, font: Font, width: int,
                  fill: str) -> None:
    line = _fit(_clean(text, font), font, width)
    draw.text((centre - _length(line, font) / 2, y), line, font=font, fill=fill)


def _draw_lines(draw: ImageDraw.ImageDraw, origin: tuple[int, int], lines: list[str], font: Font, width: int,
                fill: str) -> int:
    """Draws ``lines`` one under another from ``origin``, each cut to ``width``; returns the y below them."""
    x, y = origin
    for line in lines:
        draw.text((x, y), _fit(_clean(line, font), font, width), font=font, fill=fill)
        y += _line_height(font)
    return y


# -- fonts and fitting text -----------------------------------------------------------


@lru_cache(maxsize=32)
def _font(size: int) -> Font:
    """Pillow's bundled scalable font at ``size`` px, or its fixed bitmap font without FreeType."""
    try:
        return ImageFont.load_default(size=size)
    except (ImportError, OSError, TypeError, AttributeError) as error:
        log.debug("scalable default font unavailable (%s); using the bitmap font", error)
        return ImageFont.load_default()


def _line_height(font: Font) -> int:
    bbox = font.getbbox("ÅÉgjy|")
    return int(bbox[3]) + max(2, int(bbox[3]) // 4)


def _length(text: str, font: Font) -> float:
    return float(font.getlength(text))


def _clean(text: str, font: Font) -> str:
    """``text`` on one line without control or format characters; Latin-1 only for a bitmap font."""
    flat = " ".join(text.split())
    flat = "".join(ch for ch in flat if unicodedata.category(ch)[0] != "C")
    if not isinstance(font, ImageFont.FreeTypeFont):
        flat = flat.replace("…", "...").encode("latin-1", "replace").decode("latin-1")
    return flat


def _fit(text: str, font: Font, width: int) -> str:
    """``text`` if it fits in ``width`` px, else its longest prefix that fits with "…" (possibly "")."""
    if _length(text, font) <= width:
        return text
    return _with_ellipsis(text, font, width)


def _with_ellipsis(text: str, font: Font, width: int) -> str:
    """The longest prefix of ``text`` that fits in ``width`` px followed by "…" ("..." in a
    bitmap font, which has only Latin-1), or "" if even the ellipsis does not fit."""
    ellipsis = "…" if isinstance(font, ImageFont.FreeTypeFont) else "..."
    k = _fitting_prefix(text, font, width, ellipsis)
    return "" if k < 0 else text[:k].rstrip() + ellipsis


def _fitting_prefix(text: str, font: Font, width: int, suffix: str = "") -> int:
    """The largest ``k`` with ``text[:k].rstrip() + suffix`` at most ``width`` px wide, or -1 if none."""
    def fits(k: int) -> bool:
        return _length(text[:k].rstrip() + suffix, font) <= width

    low, high = 0, len(text)
    while low < high:  # widths grow with k, so search for the last k that fits
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low if fits(low) else -1


def _wrap(text: str, font: Font, width: int, max_lines: int) -> list[str]:
    """``text`` broken into at most ``max_lines`` lines of ``width`` px; the last ends in "…" if cut.

    Words wider than a line are split between characters.
    """
    if max_lines <= 0:
        return []
    budget = max_lines * max(40, width // 2)  # no line holds more characters than this
    flat = _clean(text, font)
    cut = len(flat) > budget
    lines: list[str] = []
    current = ""
    for word in flat[:budget].split(" "):
        for piece in _pieces(word, font, width):
            candidate = f"{current} {piece}" if current else piece
            if _length(candidate, font) <= width or not current:
                current = candidate
                continue
            lines.append(current)
            current = piece
            if len(lines) > max_lines:
                break
        if len(lines) > max_lines:
            break
    if current and len(lines) <= max_lines:
        lines.append(current)
    if len(lines) > max_lines:
        lines, cut = lines[:max_lines], True
    if cut and lines:
        lines[-1] = _with_ellipsis(lines[-1] + " ", font, width)
    return lines


def _pieces(word: str, font: Font, width: int) -> list[str]:
    """``word`` itself if it fits in ``width`` px, else consecutive slices of it that each fit
    (a single character wider than ``width`` is a slice of its own)."""
    pieces: list[str] = []
    while word:
        size = max(1, _fitting_prefix(word, font, width))
        pieces.append(word[:size])
        word = word[size:]
    return pieces
