"""Tests of raptor_engine.loaders: real files built in tmp_path or memory.

Every fixture is generated here (no binary files in the repository): PDFs are
written by hand with a real Helvetica text layer, or with pypdf's writer;
.docx files with python-docx; zips with zipfile.
"""

from __future__ import annotations

import codecs
import io
import os
import random
import zipfile
from pathlib import Path

import docx
import pytest
from pypdf import PageObject, PdfReader, PdfWriter
from pypdf.errors import DependencyError

from raptor_engine.errors import DocumentRejected, RejectReason
from raptor_engine.loaders import (
    DEFAULT_MAX_BYTES,
    SUPPORTED_SUFFIXES,
    LoadedText,
    common as loader_common,
    load_bytes,
    load_file,
    pdf as pdf_loader,
)

# --------------------------------------------------------------------------
# Fixture builders
# --------------------------------------------------------------------------


def _pdf_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[str], title: str | None = None) -> bytes:
    """A minimal valid PDF: one Helvetica line per page, correct xref table."""
    objects: list[bytes] = [b"", b""]  # 1: catalog, 2: page tree (filled in below)
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")  # 3
    kids: list[int] = []
    for text in pages:
        stream = f"BT /F1 12 Tf 72 720 Td ({_pdf_escape(text)}) Tj ET".encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        content_id = len(objects)
        objects.append(
            (
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                f"/Resources << /Font << /F1 3 0 R >> >> /Contents {content_id} 0 R >>"
            ).encode()
        )
        kids.append(len(objects))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>".encode()
    info = ""
    if title is not None:
        objects.append(f"<< /Title ({_pdf_escape(title)}) >>".encode("latin-1"))
        info = f" /Info {len(objects)} 0 R"
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets: list[int] = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R{info} >>\n".encode()
    out += b"startxref\n%d\n%%%%EOF\n" % xref_at
    return bytes(out)


def _write_pdf(writer: PdfWriter) -> bytes:
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def make_docx(paragraphs: list[str], title: str = "", table: list[list[str]] | None = None) -> bytes:
    """A real .docx: the paragraphs, then an optional table, then 'After table.'."""
    document = docx.Document()
    document.core_properties.title = title
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
        document.add_paragraph("After table.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def make_zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def reject(data: bytes, filename: str, reason: RejectReason, **kwargs: int) -> DocumentRejected:
    """Assert that loading is refused for ``reason`` with a message naming the file."""
    with pytest.raises(DocumentRejected) as info:
        load_bytes(data, filename, **kwargs)
    exc = info.value
    assert exc.reason is reason, str(exc)
    assert exc.filename == filename
    assert filename in str(exc)
    assert exc.detail and exc.detail in str(exc)
    return exc


@pytest.fixture(scope="module")
def good_pdf() -> bytes:
    return make_pdf(["Hello world on page one.", "Second (page) text."], title="Quarterly Report")


# --------------------------------------------------------------------------
# Good files
# --------------------------------------------------------------------------


def test_public_constants() -> None:
    assert DEFAULT_MAX_BYTES == 20 * 1024 * 1024
    assert SUPPORTED_SUFFIXES == (".txt", ".md", ".pdf", ".html", ".htm", ".docx")


def test_txt_loads_with_file_name_as_title_and_normalised_text() -> None:
    data = b"First line   \r\nsecond line\r\n\r\n\r\n\r\nNext paragraph\t \n\n"
    loaded = load_bytes(data, "notes.txt")
    assert loaded == LoadedText(
        title="notes.txt", text="First line\nsecond line\n\nNext paragraph", format="txt"
    )


def test_suffix_is_case_insensitive() -> None:
    assert load_bytes(b"hello", "NOTES.TXT").format == "txt"


def test_markdown_title_from_first_h1_and_text_kept() -> None:
    data = (
        b"Intro line\n\n```sh\n# not a heading\n```\n\n## Sub\n\n# Real Title #\n\nBody *text*.\n"
    )
    loaded = load_bytes(data, "readme.md")
    assert loaded.format == "md"
    assert loaded.title == "Real Title"
    assert loaded.text == data.decode().strip()


def test_markdown_without_heading_uses_file_name() -> None:
    assert load_bytes(b"just text", "dir/plain.md").title == "plain.md"


def test_pdf_loads_text_layer_and_metadata_title(good_pdf: bytes, tmp_path: Path) -> None:
    # The hand-written PDF really has a text layer pypdf can read.
    reader = PdfReader(io.BytesIO(good_pdf), strict=True)
    assert reader.pages[0].extract_text() == "Hello world on page one."
    path = tmp_path / "report.pdf"
    path.write_bytes(good_pdf)
    loaded = load_file(path)
    assert loaded == LoadedText(
        title="Quarterly Report",
        text="Hello world on page one.\n\nSecond (page) text.",
        format="pdf",
    )


def test_pdf_without_title_uses_file_name() -> None:
    assert load_bytes(make_pdf(["Text."]), "scan.PDF").title == "scan.PDF"


def test_pdf_encrypted_with_owner_password_only_loads(good_pdf: bytes) -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(good_pdf)))
    writer.encrypt(user_password="", owner_password="owner-secret")
    loaded = load_bytes(_write_pdf(writer), "protected.pdf")
    assert "Hello world on page one." in loaded.text


def test_html_title_entities_scripts_and_blocks() -> None:
    html = (
        b"<!DOCTYPE html><html><head><title> Caf&eacute; &amp; Bar </title>"
        b"<meta charset='utf-8'><style>p { color: red }</style>"
        b"<script>document.write('<p>hidden</p>');</script></head>"
        b"<body><h1>Menu</h1><p>Fish &amp; chips   for\n  &pound;5 &lt;today&gt;</p>"
        b"<noscript>Enable JavaScript</noscript>"
        b"<template><table><tr><td>tpl</td><td>cell</td></tr></table></template>"
        b"<ul><li>One</li><li>Two</li></ul>"
        b"<table><tr><th>Item</th><th>Price</th></tr><tr><td>Tea</td><td>2</td></tr></table>"
        b"<div>Line<br>break</div><script>var x = 1;</script></body></html>"
    )
    loaded = load_bytes(html, "menu.html")
    assert loaded.format == "html"
    assert loaded.title == "Café & Bar"
    assert loaded.text == (
        "Menu\n\nFish & chips for £5 <today>\n\nOne\nTwo\n\nItem | Price\nTea | 2\n\nLine\nbreak"
    )
    for hidden in ("hidden", "color", "Enable JavaScript", "tpl", "var x"):
        assert hidden not in loaded.text


def test_html_without_title_and_without_closing_head() -> None:
    loaded = load_bytes(b"<html><head><meta charset=utf-8><body><p>Visible</p>", "page.htm")
    assert loaded == LoadedText(title="page.htm", text="Visible", format="html")


def test_html_pre_keeps_indentation() -> None:
    loaded = load_bytes(b"<p>Code:</p><pre>def f():\n    return 1</pre>", "code.html")
    assert loaded.text == "Code:\n\ndef f():\n    return 1"


def test_html_declared_charset_used_when_not_utf8() -> None:
    html = '<meta charset="windows-1251"><p>Привет</p>'.encode("cp1251")
    assert load_bytes(html, "ru.html").text == "Привет"


def test_docx_paragraphs_and_tables_in_order() -> None:
    data = make_docx(
        ["First paragraph.", "", "Second paragraph."],
        title="Handbook",
        table=[["Name", "Role"], ["Ada", "Engineer"]],
    )
    loaded = load_bytes(data, "handbook.docx")
    assert loaded == LoadedText(
        title="Handbook",
        text="First paragraph.\n\nSecond paragraph.\n\nName | Role\nAda | Engineer\n\nAfter table.",
        format="docx",
    )


def test_docx_without_title_uses_file_name() -> None:
    assert load_bytes(make_docx(["Hi."]), "memo.docx").title == "memo.docx"


def test_utf8_bom_text() -> None:
    loaded = load_bytes(b"\xef\xbb\xbfna\xc3\xafve caf\xc3\xa9", "bom.txt")
    assert loaded.text == "naïve café"


@pytest.mark.parametrize(
    ("bom", "encoding"), [(codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")]
)
def test_utf16_text_with_bom(bom: bytes, encoding: str) -> None:
    data = bom + "Zürich – 東京\r\nline two".encode(encoding)
    assert load_bytes(data, "wide.txt").text == "Zürich – 東京\nline two"


def test_latin1_text() -> None:
    data = "Crème brûlée à la façon de Müller".encode("latin-1")
    assert load_bytes(data, "menu.txt").text == "Crème brûlée à la façon de Müller"


def test_cp1252_text_keeps_smart_quotes() -> None:
    data = "“Quoted” – dash".encode("cp1252")
    assert load_bytes(data, "quotes.txt").text == "“Quoted” – dash"


# --------------------------------------------------------------------------
# Refusals: type, size, emptiness, binary
# --------------------------------------------------------------------------


@pytest.mark.parametrize("filename", ["setup.exe", "photo.png", "Makefile", "archive.tar.gz"])
def test_unsupported_type(filename: str) -> None:
    exc = reject(b"whatever", filename, RejectReason.UNSUPPORTED_TYPE)
    assert ".docx" in exc.detail and ".pdf" in exc.detail  # says what is accepted


def test_unsupported_type_is_checked_before_reading_a_file(tmp_path: Path) -> None:
    path = tmp_path / "tool.exe"
    path.write_bytes(b"MZ\x00\x00")
    with pytest.raises(DocumentRejected) as info:
        load_file(path)
    assert info.value.reason is RejectReason.UNSUPPORTED_TYPE
    assert "'.exe'" in info.value.detail


@pytest.mark.parametrize("filename", ["a.txt", "a.md", "a.pdf", "a.html", "a.docx"])
def test_empty(filename: str) -> None:
    reject(b"", filename, RejectReason.EMPTY)


@pytest.mark.parametrize("filename", ["a.txt", "a.md", "a.pdf", "a.docx", "a.htm"])
def test_whitespace_only(filename: str) -> None:
    reject(b"  \n\t\r\n  ", filename, RejectReason.EMPTY)


def test_whitespace_only_after_decoding() -> None:
    reject("\u3000\n \u00a0".encode("utf-16"), "wide.txt", RejectReason.EMPTY)
    reject(b"\xef\xbb\xbf", "bom.md", RejectReason.EMPTY)


def test_too_large_bytes() -> None:
    exc = reject(b"x" * 3 * 1024 * 1024, "big.txt", RejectReason.TOO_LARGE, max_bytes=2 * 1024 * 1024)
    assert "3 MB" in exc.detail and "2 MB" in exc.detail


def test_too_large_file_is_refused_from_stat_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.pdf"
    path.write_bytes(b"%PDF-" + b"0" * 5000)

    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("file was opened")

    monkeypatch.setattr(Path, "open", no_read)
    monkeypatch.setattr(os, "open", no_read)
    with pytest.raises(DocumentRejected) as info:
        load_file(path, max_bytes=1000)
    assert info.value.reason is RejectReason.TOO_LARGE
    assert "big.pdf" in str(info.value)


def test_binary_txt_with_nul_bytes() -> None:
    rng = random.Random(7)
    data = bytes(rng.randrange(256) for _ in range(4096)) + b"\x00"
    exc = reject(data, "dump.txt", RejectReason.BINARY)
    assert "text" in exc.detail


def test_binary_md_with_many_control_chars_and_no_nul() -> None:
    data = bytes(range(1, 32)) * 20 + b"some text"
    reject(data, "weird.md", RejectReason.BINARY)


def test_binary_html() -> None:
    reject(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image.html", RejectReason.BINARY)


def test_undecodable_utf16() -> None:
    reject(b"\xff\xfe" + b"a\x00b", "odd.txt", RejectReason.BINARY)


# --------------------------------------------------------------------------
# Refusals: PDF
# --------------------------------------------------------------------------


def test_pdf_that_is_garbage() -> None:
    exc = reject(b"this is not a pdf at all " * 10, "fake.pdf", RejectReason.CORRUPT)
    assert "not a PDF" in exc.detail


def test_pdf_that_is_really_a_png() -> None:
    reject(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, "photo.pdf", RejectReason.CORRUPT)


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.97])
def test_truncated_pdf(good_pdf: bytes, fraction: float) -> None:
    reject(good_pdf[: int(len(good_pdf) * fraction)], "cut.pdf", RejectReason.CORRUPT)


def test_truncated_pdf_with_eof_marker_appended(good_pdf: bytes) -> None:
    # Passes the envelope check, so it is pypdf's own failure that is translated.
    reject(good_pdf[: len(good_pdf) // 2] + b"\n%%EOF\n", "cut.pdf", RejectReason.CORRUPT)


def test_pdf_with_broken_body(good_pdf: bytes) -> None:
    # Header and %%EOF are fine, everything between is noise.
    data = good_pdf[:15] + bytes(random.Random(1).randrange(256) for _ in range(800)) + b"\n%%EOF\n"
    reject(data, "noise.pdf", RejectReason.CORRUPT)


def test_pdf_page_cap_refuses_before_reading_pages(good_pdf: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdf_loader, "_PDF_MAX_PAGES", 1)
    exc = reject(good_pdf, "long.pdf", RejectReason.TOO_LARGE)
    assert "2 pages" in exc.detail and "limit of 1" in exc.detail


def test_pdf_text_limit_refuses_instead_of_cutting() -> None:
    pdf = make_pdf(["A" * 300, "B" * 300, "C" * 300])
    assert len(load_bytes(pdf, "wordy.pdf", max_text_chars=1000).text) == 904
    exc = reject(pdf, "wordy.pdf", RejectReason.TOO_LARGE, max_text_chars=500)
    assert "more than 500 bytes of text" in exc.detail


def test_encrypted_pdf(good_pdf: bytes) -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(good_pdf)))
    writer.encrypt("user-secret")
    exc = reject(_write_pdf(writer), "secret.pdf", RejectReason.ENCRYPTED)
    assert "password" in exc.detail


def test_pdf_needing_missing_crypto_library_is_encrypted(
    good_pdf: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AES-encrypted PDFs need the optional `cryptography` package; pypdf then
    # raises DependencyError while reading a page.
    def needs_crypto(*args: object, **kwargs: object) -> str:
        raise DependencyError("cryptography>=3.1 is required for AES algorithm")

    monkeypatch.setattr(PageObject, "extract_text", needs_crypto)
    reject(good_pdf, "aes.pdf", RejectReason.ENCRYPTED)


def test_blank_page_pdf_has_no_text() -> None:
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    exc = reject(_write_pdf(writer), "scan.pdf", RejectReason.NO_TEXT)
    assert "scanned" in exc.detail and "OCR" in exc.detail


# --------------------------------------------------------------------------
# Refusals: docx
# --------------------------------------------------------------------------


def test_docx_that_is_not_a_zip() -> None:
    exc = reject(b"plain text pretending to be Word", "letter.docx", RejectReason.CORRUPT)
    assert "Word" in exc.detail


def test_docx_zip_without_document_xml() -> None:
    reject(make_zip({"hello.txt": b"hi"}), "hollow.docx", RejectReason.CORRUPT)


def test_docx_zip_needing_unknown_zip_version() -> None:
    # zipfile raises NotImplementedError (not BadZipFile) for this one.
    data = bytearray(make_zip({"word/document.xml": b"<x/>"}))
    central = data.index(b"PK\x01\x02")
    data[central + 6 : central + 8] = (192).to_bytes(2, "little")
    reject(bytes(data), "future.docx", RejectReason.CORRUPT)


def test_docx_zip_missing_main_part_but_with_content_types() -> None:
    data = make_docx(["Hi."])
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        members = {n: source.read(n) for n in source.namelist() if n != "word/document.xml"}
    reject(make_zip(members), "broken.docx", RejectReason.CORRUPT)


def test_docx_with_malformed_xml() -> None:
    data = make_docx(["Hi."])
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        members = {n: source.read(n) for n in source.namelist()}
    members["word/document.xml"] = b"<w:document><unclosed"
    reject(make_zip(members), "mangled.docx", RejectReason.CORRUPT)


def test_password_protected_docx() -> None:
    # An encrypted OOXML file is an OLE compound file holding "EncryptedPackage".
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504
    ole += "EncryptedPackage".encode("utf-16-le") + b"\x00" * 512
    exc = reject(ole, "locked.docx", RejectReason.ENCRYPTED)
    assert "password-protected" in exc.detail


def test_old_doc_renamed_to_docx() -> None:
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504 + "WordDocument".encode("utf-16-le")
    exc = reject(ole, "old.docx", RejectReason.UNSUPPORTED_TYPE)
    assert ".doc" in exc.detail


def test_empty_docx_has_no_text() -> None:
    reject(make_docx([]), "blank.docx", RejectReason.NO_TEXT)


def test_docx_zip_bomb_is_too_large() -> None:
    # 40 MB of spaces packs to ~40 KB; unpacked it is over the 32 MB floor.
    data = make_zip({"[Content_Types].xml": b" " * (40 * 1024 * 1024)})
    assert len(data) < 200_000
    exc = reject(data, "bomb.docx", RejectReason.TOO_LARGE, max_bytes=200_000)
    assert "unpacks" in exc.detail


# --------------------------------------------------------------------------
# Refusals: HTML
# --------------------------------------------------------------------------


def test_script_only_html_has_no_text() -> None:
    html = b"<html><head><title>App</title><script>boot()</script></head><body><script>x()</script><style>a{}</style></body></html>"
    exc = reject(html, "app.html", RejectReason.NO_TEXT)
    assert "visible text" in exc.detail


# --------------------------------------------------------------------------
# No vendor exception escapes
# --------------------------------------------------------------------------


def _mutations(data: bytes, seed: int, count: int) -> list[bytes]:
    """``count`` copies of ``data`` with a few random bytes overwritten or cut."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        mutated = bytearray(data)
        for _ in range(rng.randrange(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        if rng.random() < 0.3:
            mutated = mutated[: rng.randrange(1, len(mutated))]
        out.append(bytes(mutated))
    return out


@pytest.mark.parametrize("filename", ["fuzz.pdf", "fuzz.docx", "fuzz.html", "fuzz.txt"])
def test_mutated_files_load_or_are_rejected(good_pdf: bytes, filename: str) -> None:
    seeds = {
        "fuzz.pdf": good_pdf,
        "fuzz.docx": make_docx(["Some text."], table=[["a", "b"]]),
        "fuzz.html": b"<html><head><title>T</title></head><body><p>Hi &amp; bye</p></body></html>",
        "fuzz.txt": "plain text with ünïcode".encode(),
    }
    for data in _mutations(seeds[filename], seed=len(filename), count=150):
        try:
            loaded = load_bytes(data, filename)
        except DocumentRejected:
            continue
        assert loaded.text.strip()


def test_missing_file_and_folder_are_refused_as_unreadable(tmp_path: Path) -> None:
    with pytest.raises(DocumentRejected) as missing:
        load_file(tmp_path / "gone.txt")
    assert missing.value.reason is RejectReason.UNREADABLE and "no such file" in str(missing.value)
    folder = tmp_path / "folder.md"
    folder.mkdir()
    with pytest.raises(DocumentRejected) as directory:
        load_file(folder)
    assert directory.value.reason is RejectReason.UNREADABLE and "folder" in str(directory.value)


# --------------------------------------------------------------------------
# Sizes, special files and limits (issue 11)
# --------------------------------------------------------------------------


def test_true_size_is_named_when_only_the_beginning_was_read() -> None:
    # Adapters read max_bytes + 1 bytes; the size they know is the one to show.
    exc = reject(b"x" * 11, "big.txt", RejectReason.TOO_LARGE, max_bytes=10, size=5 * 1024 * 1024)
    assert exc.detail == "the file is 5 MB, over the limit of 10 bytes"
    assert load_bytes(b"fits", "small.txt", max_bytes=10, size=4).text == "fits"


@pytest.mark.timeout(20)  # the old loader blocked forever on open()
def test_named_pipe_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "x.txt"
    os.mkfifo(fifo)
    with pytest.raises(DocumentRejected) as info:
        load_file(fifo)
    assert info.value.reason is RejectReason.UNREADABLE
    assert "named pipe" in info.value.detail and "not a regular file" in info.value.detail


def test_device_behind_a_link_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "zeros.md"
    link.symlink_to("/dev/zero")
    with pytest.raises(DocumentRejected) as info:
        load_file(link)
    assert info.value.reason is RejectReason.UNREADABLE and "a device" in info.value.detail


@pytest.mark.parametrize("filename", ["a.txt", "a.md"])
def test_plain_text_over_the_text_limit(filename: str) -> None:
    assert load_bytes(b"word " * 200, filename, max_text_chars=1000).text
    exc = reject(b"word " * 201, filename, RejectReason.TOO_LARGE, max_text_chars=1000)
    assert exc.detail == (
        "the file holds more than 1000 bytes of text, the limit; split it into smaller files "
        "and send them one by one"
    )


def test_html_and_docx_over_the_text_limit() -> None:
    html = b"<p>" + b"word " * 400 + b"</p>"
    assert load_bytes(html, "a.html", max_text_chars=2000).text
    reject(html, "a.html", RejectReason.TOO_LARGE, max_text_chars=1000)
    document = make_docx(["word " * 100] * 4)
    assert load_bytes(document, "a.docx", max_text_chars=2100).text
    reject(document, "a.docx", RejectReason.TOO_LARGE, max_text_chars=1000)


def test_time_budget_refuses(good_pdf: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader_common, "TIME_BUDGET_S", -1.0)
    for data, filename in [
        (good_pdf, "slow.pdf"),
        (make_docx(["Some text."]), "slow.docx"),
        (b"<p>x</p>" * 2000, "slow.html"),  # the clock is read every 1,024 elements
    ]:
        exc = reject(data, filename, RejectReason.TOO_LARGE)
        assert "took longer than" in exc.detail


def test_normalising_many_short_lines_keeps_the_text() -> None:
    data = b"ab  \t\r\n" * 50_000 + b"   \n\n\n\nend \xc2\xa0"
    text = load_bytes(data, "lines.txt").text
    assert text == "ab\n" * 49_999 + "ab\n\nend"


# --------------------------------------------------------------------------
# HTML: hidden text
# --------------------------------------------------------------------------


def test_html_hidden_text_is_left_out() -> None:
    html = b"""<html><head><style>
      /* rules that hide */
      .ad, #banner { display: none }
      div.note { visibility: hidden }
      .wide { display: none }
      @media print { .print-hidden { display: none } }
      @media (min-width: 800px) { .wide { display: block } }
      .menu li:hover .sub { display: block }
      .x .y { display: none }
    </style></head><body>
      <p>Visible one.</p>
      <p style="display:none">Inline none.</p>
      <p style="color: red; visibility : hidden !important">Inline hidden.</p>
      <div hidden><p>Hidden attribute.</p></div>
      <span aria-hidden="true">Aria hidden.</span>
      <p class="ad">Ad by class.</p>
      <p id="banner">Banner by id.</p>
      <div class="note">Note by tag and class.</div>
      <p class="note">A note paragraph shows.</p>
      <p class="wide">Shown on wide screens.</p>
      <p class="print-hidden">Hidden only in print.</p>
      <p class="ad" style="display: block">Inline style wins.</p>
      <p class="y">Complex selectors never hide.</p>
      <ul class="sub"><li class="sub">A shown sub-menu.</li></ul>
      <p hidden>Unclosed hidden<p>After the implied close.
      <p>Visible two.</p></body></html>"""
    assert load_bytes(html, "page.html").text == (
        "Visible one.\n\nA note paragraph shows.\n\nShown on wide screens.\n\nHidden only in print.\n\n"
        "Inline style wins.\n\nComplex selectors never hide.\n\nA shown sub-menu.\n\n"
        "After the implied close.\n\nVisible two."
    )


def test_html_page_with_only_hidden_text_has_no_text() -> None:
    html = b"<body><div style='display:none'><p>secret</p></div><p aria-hidden=true>icon</p></body>"
    exc = reject(html, "hidden.html", RejectReason.NO_TEXT)
    assert "hidden" in exc.detail


@pytest.mark.timeout(60)  # html.parser took quadratic time on these
@pytest.mark.parametrize("junk", [b"<", b"<a", b"</", b"<!", b"<![CDATA["])
def test_html_junk_is_read_in_linear_time(junk: bytes) -> None:
    data = junk * (2_000_000 // len(junk))
    try:
        load_bytes(data, "junk.html")
    except DocumentRejected:
        pass


# --------------------------------------------------------------------------
# Word: streaming reader
# --------------------------------------------------------------------------

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
MC_NS = "http://schemas.openxmlformats.org/markup-compatibility/2006"


def docx_members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def docx_with_body(body: str, namespace: str = W_NS, prolog: str = "") -> bytes:
    """A real python-docx package whose main part holds ``body`` inside ``w:body``."""
    members = docx_members(make_docx(["placeholder"]))
    members["word/document.xml"] = (
        f'<?xml version="1.0" encoding="UTF-8"?>{prolog}'
        f'<w:document xmlns:w="{namespace}" xmlns:mc="{MC_NS}"><w:body>{body}</w:body></w:document>'
    ).encode()
    return make_zip(members)


def python_docx_text(data: bytes) -> str:
    """The text as python-docx reads it (the loader's reference for tables and paragraphs)."""

    def blocks(container: object) -> list[str]:
        out = []
        for item in container.iter_inner_content():  # type: ignore[attr-defined]
            text = table_text(item) if isinstance(item, docx.table.Table) else item.text
            if text.strip():
                out.append(text)
        return out

    def table_text(table: docx.table.Table) -> str:
        rows = []
        for row in table.rows:
            seen: set[object] = set()
            cells = []
            for cell in row.cells:
                if cell._tc in seen:
                    continue
                seen.add(cell._tc)
                cells.append(" ".join(" ".join(blocks(cell)).split()))
            if any(cells):
                rows.append(" | ".join(cells))
        return "\n".join(rows)

    return "\n\n".join(blocks(docx.Document(io.BytesIO(data))))


def test_docx_tables_with_merged_and_nested_cells_read_as_python_docx_reads_them() -> None:
    document = docx.Document()
    document.add_paragraph("Intro\twith a tab.")
    grid = document.add_table(rows=4, cols=3)
    for r in range(4):
        for c in range(3):
            grid.cell(r, c).text = f"r{r}c{c}"
    grid.cell(0, 0).merge(grid.cell(0, 1))  # across
    grid.cell(1, 2).merge(grid.cell(3, 2))  # down three rows
    grid.cell(2, 0).add_paragraph("second line")
    grid.cell(2, 1).add_table(rows=2, cols=2).cell(1, 1).text = "nested"
    grid.cell(3, 0).text = ""
    document.add_paragraph("Line one")
    document.paragraphs[-1].add_run().add_break()
    document.paragraphs[-1].add_run("line two")
    buffer = io.BytesIO()
    document.save(buffer)
    data = buffer.getvalue()
    expected = python_docx_text(data)
    assert load_bytes(data, "tables.docx").text == expected
    assert "r0c0 r0c1 | r0c2" in expected and "nested" in expected  # the case is what it claims


def test_docx_runs_in_links_insertions_and_fields_count_deleted_text_does_not() -> None:
    body = (
        "<w:p><w:r><w:t>Start </w:t></w:r>"
        "<w:hyperlink><w:r><w:t>link</w:t></w:r></w:hyperlink>"
        "<w:ins><w:r><w:t> inserted</w:t></w:r></w:ins>"
        "<w:del><w:r><w:delText> deleted</w:delText></w:r></w:del>"
        "<w:moveFrom><w:r><w:t> moved away</w:t></w:r></w:moveFrom>"
        "<w:fldSimple><w:r><w:t> 42</w:t></w:r></w:fldSimple>"
        "<w:r><w:instrText> PAGE </w:instrText><w:tab/><w:t>end</w:t><w:noBreakHyphen/>"
        "<w:br w:type='page'/><w:br/><w:t>after break</w:t></w:r></w:p>"
        "<w:p><w:pPr><w:tabs><w:tab w:val='left' w:pos='720'/></w:tabs></w:pPr><w:r><w:t>Tabs kept</w:t></w:r></w:p>"
        "<w:sdt><w:sdtContent><w:p><w:r><w:t>In a content control</w:t></w:r></w:p></w:sdtContent></w:sdt>"
    )
    assert load_bytes(docx_with_body(body), "runs.docx").text == (
        "Start link inserted 42\tend-\nafter break\n\nTabs kept\n\nIn a content control"
    )


def test_docx_alternate_content_is_read_once() -> None:
    box = "<w:txbxContent><w:p><w:r><w:t>Text box</w:t></w:r></w:p></w:txbxContent>"
    body = (
        "<w:p><w:r><mc:AlternateContent>"
        f"<mc:Choice Requires='wps'><w:drawing>{box}</w:drawing></mc:Choice>"
        f"<mc:Fallback><w:pict>{box}</w:pict></mc:Fallback>"
        "</mc:AlternateContent></w:r><w:r><w:t>Anchor paragraph</w:t></w:r></w:p>"
    )
    assert load_bytes(docx_with_body(body), "box.docx").text == "Text box\n\nAnchor paragraph"


def test_docx_strict_open_xml_namespace() -> None:
    body = "<w:p><w:r><w:t>Strict</w:t></w:r></w:p>"
    data = docx_with_body(body, namespace="http://purl.oclc.org/ooxml/wordprocessingml/main")
    assert load_bytes(data, "strict.docx").text == "Strict"


def test_docx_main_part_is_found_through_the_relationships() -> None:
    members = docx_members(make_docx(["Moved main part."], title="Moved"))
    members["word/main.xml"] = members.pop("word/document.xml")
    members["_rels/.rels"] = members["_rels/.rels"].replace(b"word/document.xml", b"/word/main.xml")
    loaded = load_bytes(make_zip(members), "moved.docx")
    assert (loaded.title, loaded.text) == ("Moved", "Moved main part.")


def test_docx_whose_main_part_is_not_word_is_corrupt() -> None:
    members = docx_members(make_docx(["x"]))
    members["word/document.xml"] = b"<workbook xmlns='urn:spreadsheet'><sheet>Not Word</sheet></workbook>"
    reject(make_zip(members), "sheet.docx", RejectReason.CORRUPT)


def test_docx_with_a_dtd_is_refused() -> None:
    prolog = '<!DOCTYPE w:document [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
    reject(docx_with_body("<w:p><w:r><w:t>&b;</w:t></w:r></w:p>", prolog=prolog), "dtd.docx", RejectReason.CORRUPT)


def test_docx_nested_too_deeply_is_refused() -> None:
    body = "<w:sdt>" * 2000 + "</w:sdt>" * 2000
    exc = reject(docx_with_body(body), "deep.docx", RejectReason.TOO_LARGE)
    assert "too deeply nested" in exc.detail


def test_docx_tag_of_megabytes_is_refused() -> None:
    attributes = " ".join(f'a{i}="{i}"' for i in range(150_000))  # ~1.5 MB without a '>'
    exc = reject(docx_with_body(f"<w:p {attributes}/>"), "tag.docx", RejectReason.TOO_LARGE)
    assert "too large or too deeply nested" in exc.detail


def _with_declared_size(data: bytes, member: str, declared: int) -> bytes:
    """``data`` with the central directory's unpacked size of ``member`` set to ``declared``."""
    out = bytearray(data)
    position = 0
    while True:
        position = out.index(b"PK\x01\x02", position)
        name_length = int.from_bytes(out[position + 28 : position + 30], "little")
        if out[position + 46 : position + 46 + name_length] == member.encode():
            out[position + 24 : position + 28] = declared.to_bytes(4, "little")
            return bytes(out)
        position += 4


def test_docx_member_declaring_less_than_it_holds_is_corrupt() -> None:
    data = make_docx(["A paragraph of text. " * 50] * 20)
    reject(_with_declared_size(data, "word/document.xml", 100), "lies.docx", RejectReason.CORRUPT)


def test_docx_member_declaring_gigabytes_is_too_large() -> None:
    data = _with_declared_size(make_docx(["Small."]), "word/document.xml", 0xFFFF_FFF0)
    exc = reject(data, "lies.docx", RejectReason.TOO_LARGE)
    assert "unpacks to" in exc.detail


def test_docx_in_bzip2_is_corrupt() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_BZIP2) as archive:
        for name, content in docx_members(make_docx(["Hi."])).items():
            archive.writestr(name, content)
    reject(buffer.getvalue(), "bz.docx", RejectReason.CORRUPT)


# --------------------------------------------------------------------------
# PDF: operands
# --------------------------------------------------------------------------


def test_pdf_text_operator_of_a_huge_string_is_refused() -> None:
    exc = reject(make_pdf(["x" * 70_000]), "long-string.pdf", RejectReason.TOO_LARGE)
    assert "page 1 of the PDF is too large or too complex" in exc.detail
    assert load_bytes(make_pdf(["x" * 60_000]), "fine.pdf").text == "x" * 60_000
