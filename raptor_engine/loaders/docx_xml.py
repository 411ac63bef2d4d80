"""Reading one XML part of a Word (.docx) zip safely: streamed, capped, no tree.

Contract: :func:`parse_part` streams one zip member through expat into the
given :class:`XmlHandlers`, in chunks, never holding the part or a tree. It
refuses (with the Word refusals defined here) a member that is compressed
other than stored/deflated, that declares or actually unpacks to more than
its limit, that has a DTD or entity declarations (the classic XML bomb), that
nests too deeply, or that has a run of bytes too long without a ``>``; the
time budget is checked after every chunk. Other exceptions (BadZipFile,
zlib.error, ExpatError, KeyError for a missing part) are left to the caller.
"""

from __future__ import annotations

import pyexpat
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from raptor_engine.errors import DocumentRejected, RejectReason
from raptor_engine.loaders.common import Budget, human_size

_XML_CHUNK = 256 * 1024  # must stay below _XML_MAX_TOKEN_BYTES (see _TagSpacing)
_XML_MAX_DEPTH = 1000  # Word nests a few dozen levels
# expat re-scans an unfinished tag on every chunk (quadratic before expat 2.6),
# and a tag with millions of attributes costs it hundreds of MB: no real tag
# comes near this many bytes without a '>'.
_XML_MAX_TOKEN_BYTES = 1024 * 1024


def docx_corrupt(filename: str) -> DocumentRejected:
    """The refusal of a file that is not a readable Word document."""
    return DocumentRejected(
        RejectReason.CORRUPT,
        filename,
        "the file is not a valid Word document (.docx) or is damaged; "
        "open it in Word and save it again as .docx",
    )


def docx_too_complex(filename: str) -> DocumentRejected:
    """The refusal of a Word document whose XML is too large or too deep to read safely."""
    return DocumentRejected(
        RejectReason.TOO_LARGE,
        filename,
        "the Word document has parts too large or too deeply nested to read safely; "
        "open it in Word and save it again as .docx",
    )


def docx_unpacks_too_far(filename: str, limit: int, declared: int | None = None) -> DocumentRejected:
    """The refusal of a Word document that unpacks past ``limit`` (``declared`` when known)."""
    size = human_size(declared) if declared is not None else f"more than {human_size(limit)}"
    return DocumentRejected(
        RejectReason.TOO_LARGE,
        filename,
        f"the Word document unpacks to {size}, over the limit of {human_size(limit)}",
    )


@dataclass(frozen=True, slots=True)
class XmlHandlers:
    """expat callbacks (element names are ``"namespace local"``)."""

    start: Callable[[str, dict[str, str]], None]
    end: Callable[[str], None] | None = None
    data: Callable[[str], None] | None = None


def has_member(archive: zipfile.ZipFile, name: str) -> bool:
    """True when the archive holds a member called ``name``."""
    try:
        archive.getinfo(name)
    except KeyError:
        return False
    return True


def parse_part(
    archive: zipfile.ZipFile, name: str, filename: str, limit: int, budget: Budget, handlers: XmlHandlers
) -> None:
    """Stream the XML of member ``name`` through expat into ``handlers``.

    No tree is built. A DTD is refused (Word never writes one, and entities are
    the classic XML bomb), as are nesting past :data:`_XML_MAX_DEPTH` and any
    run of :data:`_XML_MAX_TOKEN_BYTES` bytes without a ``>``.
    """
    parser = pyexpat.ParserCreate(namespace_separator=" ")
    parser.buffer_text = True

    def refuse_dtd(*_: object) -> None:
        raise docx_corrupt(filename)

    depth = 0

    def start(element: str, attributes: dict[str, str]) -> None:
        nonlocal depth
        depth += 1
        if depth > _XML_MAX_DEPTH:
            raise docx_too_complex(filename)
        handlers.start(element, attributes)

    def end(element: str) -> None:
        nonlocal depth
        depth -= 1
        if handlers.end is not None:
            handlers.end(element)

    parser.StartDoctypeDeclHandler = refuse_dtd
    parser.EntityDeclHandler = refuse_dtd
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    if handlers.data is not None:
        parser.CharacterDataHandler = handlers.data
    tags = _TagSpacing(filename)
    for chunk in zip_chunks(archive, name, filename, limit):
        tags.check(chunk)
        parser.Parse(chunk, False)
        budget.check_time()
    parser.Parse(b"", True)


def zip_chunks(archive: zipfile.ZipFile, name: str, filename: str, limit: int) -> Iterator[bytes]:
    """The unpacked bytes of member ``name``, in chunks, refused past ``limit`` bytes.

    The declared size is checked first, then the bytes actually produced are
    counted while reading. Only stored and deflated members are read: Word
    writes nothing else, and bzip2/lzma chunks could unpack without bound.
    """
    info = archive.getinfo(name)  # KeyError: the part is missing, so the file is corrupt
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise docx_corrupt(filename)
    if info.file_size > limit:
        raise docx_unpacks_too_far(filename, limit, info.file_size)
    produced = 0
    with archive.open(info) as member:
        while chunk := member.read(_XML_CHUNK):
            produced += len(chunk)
            if produced > limit:
                raise docx_unpacks_too_far(filename, limit)
            yield chunk


class _TagSpacing:
    """Refuses XML with a run of more than :data:`_XML_MAX_TOKEN_BYTES` bytes
    without a ``>``, counted across the chunks fed to the parser."""

    def __init__(self, filename: str) -> None:
        self._filename = filename
        self._since_last = 0  # bytes since the last '>' of the previous chunks

    def check(self, chunk: bytes) -> None:
        # A run inside one chunk is shorter than the chunk, hence than the cap.
        first = chunk.find(b">")
        if first < 0:
            self._since_last += len(chunk)
        else:
            if self._since_last + first > _XML_MAX_TOKEN_BYTES:
                raise docx_too_complex(self._filename)
            self._since_last = len(chunk) - chunk.rfind(b">") - 1
        if self._since_last > _XML_MAX_TOKEN_BYTES:
            raise docx_too_complex(self._filename)
