"""Turn an uploaded file into plain text, or refuse it with a reason.

The one entry point is :func:`load_bytes` (and :func:`load_file`, which reads
a path with the same checks). Accepted types are those of the one suffix
table, :data:`raptor_engine.loaders.formats.FORMATS`: plain text, Markdown,
PDF, HTML and Word (.docx). Anything else, and any file that is empty, too
large, binary, corrupt, encrypted or without text, is refused with
:class:`~raptor_engine.errors.DocumentRejected`, whose ``detail`` is written
for the person who sent the file. No exception of pypdf, lxml, zipfile or
expat escapes this package.

Every extraction is bounded in time and memory, whatever the file: what is
decompressed and parsed is capped and streamed, the text extracted is capped
(``max_text_chars``, refused past it), and the work is stopped past a time
budget. A small file built to unpack into gigabytes is refused early.

Extracted text is normalised the same way for every format: ``'\\n'``
newlines, no trailing spaces on a line, paragraphs separated by one blank
line, no stray control characters.

The modules, each stating its own contract: ``entry`` (the entry points),
``formats`` (the suffix table), ``common`` (limits, result type, checks and
text helpers), and one per format: ``text`` (.txt, .md), ``html`` (with
``html_css``), ``pdf``, ``docx`` (with ``docx_xml`` and ``docx_body``). Only
the names below are the package's interface.
"""

from raptor_engine.loaders.common import DEFAULT_MAX_BYTES, DEFAULT_MAX_TEXT_CHARS, LoadedText
from raptor_engine.loaders.entry import load_bytes, load_file
from raptor_engine.loaders.formats import SUPPORTED_SUFFIXES

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_TEXT_CHARS",
    "SUPPORTED_SUFFIXES",
    "LoadedText",
    "load_bytes",
    "load_file",
]
