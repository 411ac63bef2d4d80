"""The little CSS the HTML loader reads: whether a style hides an element.

Contract: :func:`css_hides` reads one element's inline declarations;
:class:`CssRules` collects a page's ``<style>`` rules and answers whether they
hide an element. Both err on the side of showing text (hiding text a reader
sees would lose it), and both are bounded: the number of selectors kept is
capped, and nothing here is worse than linear in the stylesheet's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CSS_MAX_SELECTORS = 10_000

_CSS_COMPOUND_RE = re.compile(r"([a-zA-Z][a-zA-Z0-9-]*)?((?:[.#][\w-]+)*)")
_CSS_PART_RE = re.compile(r"([.#])([\w-]+)")
_CSS_COMBINATOR_RE = re.compile(r"\s*[\s>+~]\s*")
_CSS_PSEUDO_RE = re.compile(r"::?[\w-]+(?:\([^)]*\))?|\[[^\]]*\]")


def css_hides(declarations: str) -> bool | None:
    """True when CSS ``declarations`` hide the element, False when they set
    ``display`` / ``visibility`` to something that shows it, None when silent."""
    display = visibility = None
    for declaration in declarations.split(";"):
        name, colon, value = declaration.partition(":")
        if not colon:
            continue
        name = name.strip().lower()
        value = value.lower().replace("!important", "").strip()
        if name == "display":
            display = value
        elif name == "visibility":
            visibility = value
    if display == "none" or visibility in ("hidden", "collapse"):
        return True
    if display is None and visibility is None:
        return None
    return False


@dataclass(frozen=True, slots=True)
class _Selector:
    """A compound selector: optional tag, optional id, classes (``div#menu.a.b``)."""

    tag: str
    id: str
    classes: frozenset[str]

    @property
    def key(self) -> str:
        """The most selective part, under which the selector is indexed."""
        if self.id:
            return "#" + self.id
        if self.classes:
            return "." + min(self.classes)
        return self.tag

    def matches(self, tag: str, id_: str, classes: frozenset[str]) -> bool:
        return (
            (not self.tag or self.tag == tag)
            and (not self.id or self.id == id_)
            and self.classes <= classes
        )


def _compound_selector(text: str) -> _Selector | None:
    """``text`` as a :class:`_Selector`; None unless it is a plain compound selector."""
    match = _CSS_COMPOUND_RE.fullmatch(text.strip())
    if match is None or not match.group(0):
        return None
    parts = _CSS_PART_RE.findall(match.group(2) or "")
    ids = [name for kind, name in parts if kind == "#"]
    if len(ids) > 1:
        return None
    classes = frozenset(name for kind, name in parts if kind == ".")
    return _Selector((match.group(1) or "").lower(), ids[0] if ids else "", classes)


@dataclass(slots=True)
class _CssBlock:
    """An open ``{`` of a stylesheet: what precedes it, and whether blocks nest inside."""

    prelude: str
    nested: bool = False


class CssRules:
    """The rules of a page's ``<style>`` elements that decide whether an element shows.

    Deliberately cautious, since hiding text that a reader sees would lose it:
    an element is hidden only when a plain compound selector (``.ad``,
    ``#banner``, ``div.note``), outside any ``@media``-like block, sets
    ``display: none`` or ``visibility: hidden``, and no rule anywhere (in any
    block, any selector whose last part could match it) shows it. Rules with
    combinators or pseudo-classes never hide. Only styles that come before an
    element in the page apply to it.
    """

    def __init__(self) -> None:
        self._hide: dict[str, list[_Selector]] = {}
        self._show: dict[str, list[_Selector]] = {}
        self._count = 0

    def hides(self, tag: str, id_: str, class_attr: str) -> bool:
        if not self._hide:
            return False
        classes = frozenset(class_attr.split())
        keys = [tag, *(("#" + id_,) if id_ else ()), *("." + name for name in classes)]
        if not any(s.matches(tag, id_, classes) for k in keys for s in self._hide.get(k, ())):
            return False
        return not any(s.matches(tag, id_, classes) for k in keys for s in self._show.get(k, ()))

    def add_sheet(self, css: str) -> None:
        """Reads the rules of one stylesheet's text."""
        css = _strip_css_comments(css)
        open_blocks: list[_CssBlock] = []
        start = 0
        for brace in re.finditer(r"[{}]", css):
            position = brace.start()
            if css[position] == "{":
                if open_blocks:
                    open_blocks[-1].nested = True
                open_blocks.append(_CssBlock(css[start:position].strip()))
            elif open_blocks:
                block = open_blocks.pop()
                if not block.nested and not block.prelude.startswith("@"):
                    conditional = any(outer.prelude.startswith("@") for outer in open_blocks)
                    self._add_rule(block.prelude, css[start:position], conditional)
            start = position + 1

    def _add_rule(self, prelude: str, declarations: str, conditional: bool) -> None:
        hides = css_hides(declarations)
        if hides is None:
            return
        for text in prelude.split(","):
            if self._count >= _CSS_MAX_SELECTORS:
                return
            if hides and not conditional:
                # A print-only or narrow-screen rule does not hide what a reader sees.
                selector = _compound_selector(text)
                target = self._hide
            elif not hides:
                # The subject (last part), pseudo-classes dropped: it may show the element.
                subject = _CSS_COMBINATOR_RE.split(text.strip())[-1]
                selector = _compound_selector(_CSS_PSEUDO_RE.sub("", subject))
                target = self._show
            else:
                continue
            if selector is not None:
                target.setdefault(selector.key, []).append(selector)
                self._count += 1


def _strip_css_comments(css: str) -> str:
    """``css`` without ``/* ... */`` comments (an unclosed one runs to the end)."""
    pieces: list[str] = []
    position = 0
    while (opening := css.find("/*", position)) >= 0:
        pieces.append(css[position:opening])
        closing = css.find("*/", opening + 2)
        if closing < 0:
            return "".join(pieces)
        position = closing + 2
    pieces.append(css[position:])
    return "".join(pieces)
