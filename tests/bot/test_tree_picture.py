"""The tree picture and outline: built from a real tree on embedded Chroma, rendered with Pillow."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator

import pytest
from PIL import Image, ImageFont

from bot import tree_picture
from bot.replies import outline_text as render_outline_text
from bot.tree_outline import Branch, TreeOutline, tree_outline
from bot.tree_picture import PICTURE_SIZE, render_png
from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey, Document
from tests.conftest import SAMPLE

HANDBOOK = "The Aurora Team Handbook"
LONG = ("Ünïcödé é 日本語 😀 and a very long run of words that keeps going and going " * 40).strip()


def assert_picture(png: bytes) -> None:
    """``png`` is a valid PNG of exactly PICTURE_SIZE."""
    with Image.open(io.BytesIO(png)) as image:
        image.verify()
    with Image.open(io.BytesIO(png)) as image:
        assert image.format == "PNG"
        assert image.size == PICTURE_SIZE


def long_outline(branches: int = 8) -> TreeOutline:
    """A hand-made outline with overlong titles, ids, summaries and source titles."""
    made = tuple(
        Branch(f"s1.{'x' * (10 + 20 * i)}", 1, LONG[: 160 + 300 * i],
               tuple(f"{LONG[: 40 * (i + 1)]} {j}" for j in range(5)), i * 1000)
        for i in range(branches)
    )
    return TreeOutline(
        title="#" + "a-very-long-channel-name-" * 30 + " 日本語 é",
        version=12345,
        built_at="2026-01-02T03:04:05+00:00",
        sources=987654,
        pending_sources=4321,
        nodes_per_layer={layer: 10 ** (8 - layer) for layer in range(9)},
        top=(Branch("s8." + "z" * 300, 8, LONG, (LONG,) * 5, 10),),
        branches=made,
    )


def test_outline_and_picture_of_a_real_tree(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    asyncio.run(engine.rebuild(channel))

    outline = tree_outline(engine, channel, "#handbook")

    stats = engine.stats(channel)
    assert outline.version == stats.version >= 1
    assert outline.nodes_per_layer == stats.nodes_per_layer
    assert (outline.sources, outline.pending_sources, outline.built_at) == (1, 0, stats.built_at)
    top_layer = max(stats.nodes_per_layer)
    assert top_layer >= 1, "the handbook is long enough for at least one layer of summaries"
    assert outline.top and all(b.layer == top_layer for b in outline.top)
    root = engine.node(channel, outline.top[0].node_id)
    assert outline.top[0].children == len(root.node.children)
    assert outline.branches, "a root above the leaves has children"
    assert {b.node_id for b in outline.branches} <= {child.id for child in root.children}
    assert all(b.layer == top_layer - 1 for b in outline.branches)
    assert [b.children for b in outline.branches] == sorted((b.children for b in outline.branches), reverse=True)
    for branch in outline.top + outline.branches:
        assert HANDBOOK in branch.source_titles
        assert 0 < len(branch.summary) <= 161

    assert_picture(render_png(outline))
    text = render_outline_text(outline)
    assert outline.top[0].node_id in text and all(b.node_id in text for b in outline.branches)
    assert f"{stats.nodes_per_layer[0]:,} excerpts (layer 0)" in text
    assert HANDBOOK in text and "#handbook" in text

    only_one = tree_outline(engine, channel, "#handbook", max_branches=1)
    assert only_one.branches == outline.branches[:1]


def test_a_single_leaf_tree(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest(channel, Document("Lunch is at noon on Fridays.", "Lunch note"))
    asyncio.run(engine.rebuild(channel))

    outline = tree_outline(engine, channel, "#tiny")

    assert outline.nodes_per_layer == engine.stats(channel).nodes_per_layer
    top_layer = max(outline.nodes_per_layer)
    assert outline.top and outline.top[0].layer == top_layer
    assert outline.top[0].source_titles == ("Lunch note",)
    assert_picture(render_png(outline))
    assert outline.top[0].node_id in render_outline_text(outline)


def test_no_tree_yet(engine: Engine, channel: ChannelKey) -> None:
    empty = tree_outline(engine, channel, "#new")
    assert (empty.version, empty.top, empty.branches, empty.nodes_per_layer) == (0, (), (), {})
    assert_picture(render_png(empty))
    assert "no tree built yet" in render_outline_text(empty).lower()

    engine.ingest(channel, Document("Deploys happen on Tuesdays.", "Deploy note"))
    waiting = tree_outline(engine, channel, "#new")
    assert (waiting.version, waiting.sources, waiting.pending_sources) == (0, 1, 1)
    assert_picture(render_png(waiting))
    text = render_outline_text(waiting)
    assert "no tree built yet" in text.lower() and "1 source added" in text


@pytest.mark.parametrize("branches", [0, 1, 3, 5, 8, 20])
def test_long_hand_made_outlines_render(branches: int) -> None:
    outline = long_outline(branches)
    assert_picture(render_png(outline))
    text = render_outline_text(outline)
    assert all(b.node_id in text for b in outline.branches)
    assert len(text.splitlines()) == 4 + len(outline.branches) + (1 if outline.branches else 0)
    longest_id = max(len(b.node_id) for b in outline.top + outline.branches)  # ids are never cut
    assert all(len(line) <= 600 + longest_id for line in text.splitlines()), "long summaries and titles are cut"


def test_a_single_leaf_outline_and_many_layers() -> None:
    leaf = Branch("s0.abc", 0, "only one excerpt", ("Doc",), 0)
    outline = TreeOutline("#one", 1, "not a date", 1, 0, {0: 1}, (leaf,), ())
    assert_picture(render_png(outline))
    text = render_outline_text(outline)
    assert "s0.abc" in text and "single layer" in text

    tall = TreeOutline("#tall", 3, "", 2, 0, {layer: 40 - layer for layer in range(40)}, (leaf,), ())
    assert_picture(render_png(tall))


@pytest.fixture
def bitmap_font(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Pillow without FreeType: only the fixed bitmap font, which cannot draw beyond Latin-1."""
    def load_default(size: float | None = None) -> ImageFont.ImageFont:
        if size is not None:
            raise ImportError("The _imagingft C module is not installed")
        return ImageFont.load_default_imagefont()

    monkeypatch.setattr(tree_picture.ImageFont, "load_default", load_default)
    tree_picture._font.cache_clear()
    yield
    tree_picture._font.cache_clear()


@pytest.mark.usefixtures("bitmap_font")
def test_falls_back_to_the_bitmap_font() -> None:
    assert isinstance(tree_picture._font(20), ImageFont.ImageFont)
    assert_picture(render_png(long_outline()))
    assert_picture(render_png(TreeOutline("#日本語", 0, "", 0, 0, {}, (), ())))


@pytest.mark.parametrize("width", [1, 30, 180, 800])
def test_wrapped_and_fitted_text_stays_inside_its_width(width: int) -> None:
    font = tree_picture._font(14)
    lines = tree_picture._wrap(LONG + " " + "w" * 500, font, width, 4)
    assert 1 <= len(lines) <= 4
    assert lines[-1].endswith("…") or lines[-1] == ""
    assert all(font.getlength(line) <= width for line in lines if len(line) > 1)
    fitted = tree_picture._fit(LONG, font, width)
    assert font.getlength(fitted) <= width
    assert tree_picture._wrap("short words", font, 800, 3) == ["short words"]
