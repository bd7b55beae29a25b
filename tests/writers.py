"""Writers of the documents and mail the tests (and scripts/eval_archive.py) read: real files made by the
libraries that make them (reportlab, python-docx, ebooklib), or by the format's own few parts (ODT, RTF)."""

from __future__ import annotations

import zipfile
from email.message import EmailMessage
from pathlib import Path
from xml.sax.saxutils import escape


def paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.split("\n\n") if p.strip()] or [text]


def _is_chinese(text: str) -> bool:
    return sum("\u4e00" <= c <= "\u9fff" for c in text) > len(text) / 10


def make_pdf(path: Path, text: str, password: str | None = None) -> Path:
    """A PDF with a text layer (Chinese set in the Adobe-GB1 font every reader knows); with password, one that
    needs it to be opened."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.platypus import Paragraph, SimpleDocTemplate

    chinese = _is_chinese(text)
    if chinese:
        pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
    style = ParagraphStyle("body", fontName="STSong-Light" if chinese else "Helvetica", fontSize=11, leading=15,
                           wordWrap="CJK" if chinese else None)
    encrypt = None
    if password is not None:
        from reportlab.lib import pdfencrypt

        encrypt = pdfencrypt.StandardEncryption(password, ownerPassword="owner-" + password)
    document = SimpleDocTemplate(str(path), pagesize=A4, encrypt=encrypt, invariant=1)
    document.build([Paragraph(escape(p), style) for p in paragraphs(text)])
    return path


def make_scanned_pdf(path: Path) -> Path:
    """A PDF with pages but no text layer, as a scanner makes them."""
    from reportlab.pdfgen import canvas

    drawing = canvas.Canvas(str(path), invariant=1)
    for _ in range(2):
        drawing.rect(100, 100, 300, 400, fill=1)
        drawing.showPage()
    drawing.save()
    return path


def make_docx(path: Path, text: str) -> Path:
    import docx

    document = docx.Document()
    for paragraph in paragraphs(text):
        document.add_paragraph(paragraph)
    document.save(str(path))
    return path


def make_odt(path: Path, text: str) -> Path:
    """An ODF text document: its mimetype first and stored, its content, its manifest."""
    body = "".join(f"<text:p>{escape(p)}</text:p>" for p in paragraphs(text))
    content = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2">'
        f"<office:body><office:text>{body}</office:text></office:body></office:document-content>"
    )
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.2">'
        '<manifest:file-entry manifest:full-path="/" manifest:media-type="application/vnd.oasis.opendocument.text"/>'
        '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
        "</manifest:manifest>"
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.text")
        archive.writestr("content.xml", content, compress_type=zipfile.ZIP_DEFLATED)
        archive.writestr("META-INF/manifest.xml", manifest, compress_type=zipfile.ZIP_DEFLATED)
    return path


def make_epub(path: Path, text: str, title: str = "A book") -> Path:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier(f"id-{path.stem}")
    book.set_title(title)
    book.set_language("zh" if _is_chinese(text) else "en")
    chapters = []
    for number, paragraph in enumerate(paragraphs(text), 1):
        chapter = epub.EpubHtml(title=f"Part {number}", file_name=f"part{number}.xhtml")
        chapter.content = f"<html><body><p>{escape(paragraph)}</p></body></html>"
        book.add_item(chapter)
        chapters.append(chapter)
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = chapters  # the navigation page is not part of the reading order
    epub.write_epub(str(path), book)
    return path


def make_rtf(path: Path, text: str) -> Path:
    """RTF is 7-bit: every other character is written as a \\uN escape (N a signed 16-bit number)."""

    def escaped(paragraph: str) -> str:
        out = []
        for char in paragraph:
            code = ord(char)
            if char in "\\{}":
                out.append("\\" + char)
            elif code < 128:
                out.append(char)
            else:
                out.append(f"\\u{code if code < 32768 else code - 65536}?")
        return "".join(out)

    body = "\\par\n".join(escaped(p) for p in paragraphs(text))
    path.write_bytes(("{\\rtf1\\ansi\\ansicpg1252\\deff0{\\fonttbl{\\f0 Times;}}\\f0 " + body + "}").encode("ascii"))
    return path


def make_message(
    text: str, subject: str, message_id: str | None = None, charset: str = "utf-8", cte: str = "base64",
    html: bool = False, attachments: tuple[tuple[str, bytes], ...] = (), headers: dict[str, str] | None = None,
) -> EmailMessage:
    """A message whose body is text, in the charset and transfer encoding given; with html, a
    multipart/alternative whose plain part is missing (HTML only) — or, with html='both', present."""
    message = EmailMessage()
    message["Subject"] = subject
    message["From"] = "Someone <someone@example.org>"
    message["To"] = "someone.else@example.org"
    if message_id:
        message["Message-ID"] = f"<{message_id}>"
    for name, value in (headers or {}).items():
        message[name] = value
    if html:
        markup = "<html><head><style>p {color: red}</style></head><body>" + "".join(
            f"<p>{escape(p)}</p>" for p in paragraphs(text)
        ) + "</body></html>"
        if html == "both":
            message.set_content(text, charset=charset, cte=cte)
            message.add_alternative(markup, subtype="html", charset=charset, cte=cte)
        else:
            message.set_content(markup, subtype="html", charset=charset, cte=cte)
    else:
        message.set_content(text, charset=charset, cte=cte)
    for name, data in attachments:
        maintype, subtype = ("application", "pdf") if name.endswith(".pdf") else ("application", "octet-stream")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return message


def forwarded(original: EmailMessage, note: str, message_id: str | None = None) -> EmailMessage:
    """The message forwarded inline, as mail programs do: a note, the original's header block, its body."""
    body = original.get_body(preferencelist=("plain", "html")).get_content()
    text = (
        f"{note}\n\n---------- Forwarded message ---------\nFrom: {original['From']}\n"
        f"Date: Mon, 2 Mar 2026 10:00:00 +0000\nSubject: {original['Subject']}\nTo: {original['To']}\n\n{body}"
    )
    return make_message(text, f"Fwd: {original['Subject']}", message_id, cte="quoted-printable")


def write_mbox(path: Path, messages: list[EmailMessage]) -> Path:
    import mailbox

    box = mailbox.mbox(str(path))
    try:
        for message in messages:
            box.add(message)
        box.flush()
    finally:
        box.close()
    return path
