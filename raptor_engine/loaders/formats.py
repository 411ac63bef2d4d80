"""The one table of accepted file types: suffix -> format name and loader.

Contract: :data:`FORMATS` is the only place the accepted types are written.
Everything else derives from it: :data:`SUPPORTED_SUFFIXES`, the list of
accepted types in refusals (:data:`ACCEPTED`), the format a file is read as,
and the loader that reads it. Suffixes are matched lower-cased, and listed in
the table's order. Adding a format is one row here and one loader module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from types import MappingProxyType

from raptor_engine.errors import DocumentRejected, RejectReason
from raptor_engine.loaders.common import Loader
from raptor_engine.loaders.docx import load_docx
from raptor_engine.loaders.html import load_html
from raptor_engine.loaders.pdf import load_pdf
from raptor_engine.loaders.text import load_text


@dataclass(frozen=True, slots=True)
class Format:
    """One accepted type: its name (``LoadedText.format``) and its loader."""

    name: str
    load: Loader


# Read-only: a module-level dict could be changed by any importer at run time.
FORMATS = MappingProxyType(
    {
        ".txt": Format("txt", load_text),
        ".md": Format("md", load_text),
        ".pdf": Format("pdf", load_pdf),
        ".html": Format("html", load_html),
        ".htm": Format("html", load_html),
        ".docx": Format("docx", load_docx),
    }
)
SUPPORTED_SUFFIXES = tuple(FORMATS)
# As refusals name them: ".txt, .md, .pdf, .html, .htm or .docx".
ACCEPTED = ", ".join(SUPPORTED_SUFFIXES[:-1]) + " or " + SUPPORTED_SUFFIXES[-1]


def format_for(filename: str) -> Format:
    """The format of ``filename``'s suffix; refuses unsupported types."""
    suffix = PurePath(filename).suffix.lower()
    fmt = FORMATS.get(suffix)
    if fmt is not None:
        return fmt
    if suffix:
        found = f"'{suffix}' files are not supported"
    else:
        found = "the file name has no extension, so its type is unknown"
    raise DocumentRejected(
        RejectReason.UNSUPPORTED_TYPE, filename, f"{found}; accepted types are {ACCEPTED}"
    )
