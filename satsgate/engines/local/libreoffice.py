"""LibreOffice headless, for the formats pandoc cannot read (legacy office documents,
spreadsheets, presentations) and for DOCX/ODT/RTF to PDF with their layout: a document
that links or embeds an external file is refused before payment
(:func:`external_reference`), and LibreOffice runs with no network where the kernel lets
it (:func:`_can_unshare`).
"""

from __future__ import annotations

import asyncio
import functools
import io
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from satsgate.engines.local.convert import ToolFailed, run_tool, soffice

# What in an office file makes LibreOffice load something from outside it: linked (not
# embedded) images and objects, external workbook links, DDE, web queries, included files.
# Hyperlinks are only followed by a reader who clicks them, and are kept.
_OOXML_RELATIONSHIP = re.compile(rb"<Relationship\b[^>]*>", re.I)
_ODF_LINKED = re.compile(
    rb"<draw:(?:image|object|object-ole|plugin|applet|floating-frame)\b[^>]*?"
    rb'xlink:href="([^"]*)"',
    re.I,
)
_ODF_EXTERNAL = re.compile(
    rb"table:table-source|text:section-source|office:dde-source|text:dde-connection|"
    rb"WEBSERVICE\s*\(|FILTERXML\s*\(",
    re.I,
)


def _utf16_or_8(*words: bytes) -> re.Pattern[bytes]:
    """Words in an OLE file, stored as 8-bit or UTF-16 text."""
    forms = []
    for word in words:
        forms.append(re.escape(word))
        forms.append(b"".join(re.escape(bytes([c])) + b"\x00" for c in word))
    return re.compile(b"|".join(forms), re.I)


_LEGACY_EXTERNAL = _utf16_or_8(
    b"INCLUDEPICTURE", b"INCLUDETEXT", b"file:/", b"WEBSERVICE(", b"DDEAUTO"
)
_LINKED = "the file links content from outside it, which is not converted here"


def external_reference(data: bytes, kind: str) -> str | None:
    """Why this office file is refused for LibreOffice (it links something outside it:
    a file, a URL, another workbook), or None. Checked before payment."""
    if kind in ("doc", "xls", "ppt"):
        return _LINKED if _LEGACY_EXTERNAL.search(data) else None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                name = info.filename
                if name.startswith("xl/externalLinks/"):
                    return _LINKED
                if not name.endswith((".xml", ".rels")):
                    continue
                part = archive.read(info)
                if name.endswith(".rels"):
                    for tag in _OOXML_RELATIONSHIP.findall(part):
                        external = re.search(rb'TargetMode\s*=\s*"External"', tag, re.I)
                        if external and not re.search(rb'Type="[^"]*/hyperlink"', tag):
                            return _LINKED
                elif kind in ("odt", "ods", "odp"):
                    if _ODF_EXTERNAL.search(part):
                        return _LINKED
                    for href in _ODF_LINKED.findall(part):
                        if b":" in href or href.startswith((b"/", b"../")):
                            return _LINKED
                elif re.search(rb"WEBSERVICE\s*\(", part, re.I):
                    return _LINKED
    except zipfile.BadZipFile:
        return "a damaged office file"
    return None


@functools.cache
def _can_unshare() -> bool:
    """Whether LibreOffice can run without network (a network namespace of its own)."""
    if shutil.which("unshare") is None:
        return False
    try:
        return (
            subprocess.run(
                ["unshare", "-rn", "true"], capture_output=True, timeout=10, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False


_LO_FILTERS = {
    "pdf": "pdf",
    "docx": "docx:MS Word 2007 XML",
    "odt": "odt",
    "rtf": "rtf",
    "txt": "txt:Text (encoded):UTF8",
    "xlsx": "xlsx:Calc MS Excel 2007 XML",
    "ods": "ods",
    "csv": "csv:Text - txt - csv (StarCalc):44,34,76,1",
    "pptx": "pptx:Impress MS PowerPoint 2007 XML",
    "odp": "odp",
}


async def libreoffice_convert(data: bytes, kind: str, target: str, timeout_s: float) -> bytes:
    office = soffice()
    if office is None:
        raise ToolFailed("LibreOffice is not installed")
    with tempfile.TemporaryDirectory(prefix="satsgate-office-") as tmp:
        src = Path(tmp) / f"input.{kind}"
        await asyncio.to_thread(src.write_bytes, data)
        outdir = Path(tmp) / "out"
        # A profile of its own per call: two conversions at once never share one.
        # No network where the kernel allows it: whatever a document links stays unloaded.
        jail = ["unshare", "-rn"] if _can_unshare() else []
        await run_tool(
            [
                *jail,
                office,
                "--headless",
                "--norestore",
                "--nolockcheck",
                "--nodefault",
                f"-env:UserInstallation=file://{tmp}/profile",
                "--convert-to",
                _LO_FILTERS[target],
                "--outdir",
                str(outdir),
                str(src),
            ],
            timeout_s,
            cwd=tmp,
        )
        produced = list(outdir.glob("input.*")) if outdir.exists() else []
        if not produced:
            raise ToolFailed("LibreOffice wrote no output for this file")
        return await asyncio.to_thread(produced[0].read_bytes)
