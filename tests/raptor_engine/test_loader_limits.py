"""Crafted files that are small on disk and huge unpacked: each is refused or loaded
within bounded time and memory (issue 11).

Every file is generated here, streamed so the test process never holds the
unpacked size. Each load runs in a fresh Python process that reports its own
peak memory from ``/proc/self/status`` (``VmHWM``). ``getrusage`` is no use
here: on Linux a child started by ``exec`` inherits the parent's peak as its
``ru_maxrss``, and ``RUSAGE_CHILDREN`` is the largest of every child the test
process ever had, so both would report pytest's own size.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any

import docx
import pytest

from tests.conftest import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak memory is read from /proc"),
]

PEAK_MB = 600  # the whole bot's target is 2.5 GB; one upload must stay far below it
WALL_S = 60.0  # generous for a loaded 2-core machine; each case takes seconds
MB = 1_000_000
W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"

CHILD = r"""
import json, sys, time
from raptor_engine import loaders
from raptor_engine.errors import DocumentRejected

path, name = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
start = time.monotonic()
try:
    outcome = {"chars": len(loaders.load_bytes(data, name).text)}
except DocumentRejected as exc:
    outcome = {"reason": exc.reason.name, "detail": exc.detail}
outcome["seconds"] = time.monotonic() - start
with open("/proc/self/status") as status:
    peak = next(line for line in status if line.startswith("VmHWM:"))
outcome["peak_mb"] = int(peak.split()[1]) / 1024
print(json.dumps(outcome))
"""


def load_in_child(path: Path) -> dict[str, Any]:
    """Loads ``path`` in a fresh process: its outcome, load time and peak memory."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), path.name],
        cwd=REPO, capture_output=True, text=True, timeout=WALL_S * 3, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outcome: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["peak_mb"] < PEAK_MB, outcome
    assert outcome["seconds"] < WALL_S, outcome
    return outcome


# -- builders -----------------------------------------------------------------------------


def docx_streamed(path: Path, unit: bytes, unpacked: int) -> Path:
    """A real python-docx package whose main part repeats ``unit`` to ``unpacked`` bytes."""
    source = io.BytesIO()
    document = docx.Document()
    document.add_paragraph("placeholder")
    document.save(source)
    block = unit * (MB // len(unit))
    with zipfile.ZipFile(source) as template, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for name in template.namelist():
            if name != "word/document.xml":
                out.writestr(name, template.read(name))
                continue
            with out.open(name, "w") as member:
                member.write(f'<?xml version="1.0"?><w:document xmlns:w="{W_NS}"><w:body>'.encode())
                for _ in range(unpacked // len(block)):
                    member.write(block)
                member.write(b"</w:body></w:document>")
    return path


def pdf_bytes(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (object 1 is the catalog) with a correct xref table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def flate_stream(data: bytes, entries: bytes = b"") -> bytes:
    packed = zlib.compress(data, 9)
    return b"<< /Length %d /Filter /FlateDecode %s >>\nstream\n%s\nendstream" % (len(packed), entries, packed)


def one_page_pdf(content: bytes, resources: bytes = b"", extra: list[bytes] | None = None) -> bytes:
    """Catalog, pages, one page (content stream 4, Helvetica as /F1 in object 5), then ``extra``."""
    return pdf_bytes([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> %s >> /Contents 4 0 R >>" % resources,
        flate_stream(content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *(extra or []),
    ])


# -- Word ---------------------------------------------------------------------------------

PARAGRAPH = b"<w:p><w:r><w:t>Hello world paragraph</w:t></w:r></w:p>"


def test_docx_of_190_mb_of_paragraphs_is_refused(tmp_path: Path) -> None:
    # The tester's file: 0.6 MB on disk; the old loader took 221 s and 3.47 GB.
    path = docx_streamed(tmp_path / "paragraphs.docx", PARAGRAPH, 190 * MB)
    assert path.stat().st_size < 1 * MB
    outcome = load_in_child(path)
    assert outcome["reason"] == "TOO_LARGE" and "unpacks to" in outcome["detail"]


def test_docx_streamed_until_the_text_limit(tmp_path: Path) -> None:
    # Under the unpacked limit, so it is parsed: streaming stops at 5 MB of text.
    outcome = load_in_child(docx_streamed(tmp_path / "text.docx", PARAGRAPH, 90 * MB))
    assert outcome["reason"] == "TOO_LARGE" and "of text" in outcome["detail"]


def test_docx_of_markup_without_text_is_parsed_in_bounded_memory(tmp_path: Path) -> None:
    unit = b'<w:p><w:pPr><w:spacing w:after="0"/></w:pPr></w:p>'
    outcome = load_in_child(docx_streamed(tmp_path / "markup.docx", unit, 40 * MB))
    assert outcome["reason"] == "NO_TEXT"


def test_docx_member_whose_header_understates_it(tmp_path: Path) -> None:
    path = docx_streamed(tmp_path / "lying.docx", PARAGRAPH, 150 * MB)
    data = bytearray(path.read_bytes())
    position = 0
    while True:
        position = data.index(b"PK\x01\x02", position)
        length = int.from_bytes(data[position + 28 : position + 30], "little")
        if data[position + 46 : position + 46 + length] == b"word/document.xml":
            break
        position += 4
    data[position + 24 : position + 28] = (1000).to_bytes(4, "little")  # "1,000 bytes unpacked"
    path.write_bytes(bytes(data))
    outcome = load_in_child(path)
    assert outcome["reason"] == "CORRUPT"


# -- PDF ----------------------------------------------------------------------------------


def test_pdf_page_of_200_mb_content_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "page.pdf"
    path.write_bytes(one_page_pdf(b" " * (200 * MB)))
    assert path.stat().st_size < 1 * MB
    outcome = load_in_child(path)
    assert outcome["reason"] == "TOO_LARGE" and "page 1" in outcome["detail"]


def test_pdf_with_many_large_forms_stays_small(tmp_path: Path) -> None:
    # 60 forms of 16 MB each (a one-line inline image pypdf skips fast): pypdf caches
    # every decoded stream, ~1 GB here; the loader drops them as it goes.
    forms = 60
    image = b"BI /W 4000 /H 4000 /BPC 8 /CS /G ID " + b"\x00" * 16_000_000 + b" EI\n"
    form = flate_stream(image, b"/Type /XObject /Subtype /Form /BBox [0 0 1 1] /Resources << /Font << /F1 5 0 R >> >>")
    names = b" ".join(b"/X%d %d 0 R" % (i, 6 + i) for i in range(forms))
    content = b"BT /F1 12 Tf 72 720 Td (Forms page) Tj ET\n" + b"".join(b"/X%d Do\n" % i for i in range(forms))
    path = tmp_path / "forms.pdf"
    path.write_bytes(one_page_pdf(content, b"/XObject << %s >>" % names, [form] * forms))
    outcome = load_in_child(path)
    assert outcome.get("chars") == len("Forms page"), outcome


# -- HTML and text ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "unit", "reason"),
    [
        ("angles.html", b"<", "TOO_LARGE"),  # html.parser never finished this one
        ("nested.html", b"<div>", "NO_TEXT"),
        ("paragraphs.html", b"<p>Hello <b>world</b> and some text here.</p>\n", "TOO_LARGE"),
        ("lines.txt", b"ab\n", "TOO_LARGE"),
    ],
)
def test_html_and_text_of_19_mb(tmp_path: Path, name: str, unit: bytes, reason: str) -> None:
    path = tmp_path / name
    path.write_bytes(unit * (19 * MB // len(unit)))
    assert load_in_child(path)["reason"] == reason
