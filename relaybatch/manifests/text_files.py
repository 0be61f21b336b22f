"""Text files (YAML, CSV, JSONL) opened in the encoding their first bytes declare, or refused with a line.

Accepted: UTF-8 with or without a byte-order mark (Excel's "CSV UTF-8" writes one; without
`utf-8-sig` it would become part of the first column's name), and UTF-16 with a byte-order mark
(Notepad's "Unicode"). Anything else (Latin-1, UTF-32, random bytes) is refused with the first line
that does not decode, found by a second, incremental pass that runs only when decoding failed, so
the fast path reads the file once.
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from relaybatch.manifests.limits import MAX_REQUEST_BYTES, megabytes

_UTF32_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)  # checked first: UTF-32 LE starts like UTF-16 LE
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_SCAN_CHUNK = 64 * 1024
_NUL = (
    "holds a NUL byte: UTF-16 without a byte-order mark, or not a text file? "
    "save it as UTF-8 (Excel: 'CSV UTF-8') and try again"
)


class TextFileError(ValueError):
    """A text file that cannot be read as text from `line` on; the message says what to do."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def encoding_of(path: Path) -> str:
    """The codec for this file: from its byte-order mark, else UTF-8; raise TextFileError for UTF-32."""
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head.startswith(_UTF32_BOMS):
        raise TextFileError(1, "is UTF-32 text; save it as UTF-8 and try again")
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding
    return "utf-8"


def open_text(path: Path, newline: str | None = None, offset: int = 0) -> tuple[TextIO, str]:
    """The file opened as text in its encoding, and that encoding's name (for `decode_failure`).

    With ``offset`` (a byte position after the byte-order mark, at the start of a line of a UTF-8
    file), reading starts there: the rows appended since a plan are read without the ones before.
    """
    encoding = encoding_of(path)
    if not offset:
        return open(path, encoding=encoding, newline=newline), encoding
    if encoding not in ("utf-8", "utf-8-sig"):
        raise ValueError(f"{path}: reading from a byte offset needs UTF-8, not {encoding}")
    raw = open(path, "rb")  # noqa: SIM115 - the text wrapper owns it and closes it
    raw.seek(offset)
    return io.TextIOWrapper(raw, encoding="utf-8", newline=newline), encoding


def decode_failure(path: Path, encoding: str) -> TextFileError:
    """The error for a file that failed to decode: it names the first line that does not decode."""
    line = first_bad_line(path, encoding)
    if encoding == "utf-16":
        how = "is not valid UTF-16 text"
    else:
        how = "is not UTF-8 text (Latin-1 or another legacy encoding?)"
    return TextFileError(line, f"{how}; save the file as UTF-8 (Excel: 'CSV UTF-8') and try again")


def first_bad_line(path: Path, encoding: str) -> int:
    """The 1-based line holding the first bytes that do not decode (the last line if none fails)."""
    if encoding == "utf-16":
        return _first_bad_utf16_line(path)
    decoder = codecs.getincrementaldecoder("utf-8-sig")("strict")
    line = 1
    with open(path, "rb") as handle:
        # Pieces end at a newline or after _SCAN_CHUNK bytes, so one endless line stays bounded; a
        # UTF-8 sequence never holds byte 0x0A, so counting newline bytes counts lines exactly.
        while piece := handle.readline(_SCAN_CHUNK):
            try:
                decoder.decode(piece)
            except UnicodeDecodeError:
                return line
            line += piece.endswith(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return line
    return line


def _first_bad_utf16_line(path: Path) -> int:
    # UTF-16 splits newlines across bytes, so decode in chunks, replacing what fails, and count the
    # newlines before the first replacement character.
    decoder = codecs.getincrementaldecoder("utf-16")("replace")
    newlines = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_SCAN_CHUNK):
            text = decoder.decode(chunk)
            bad = text.find("\ufffd")
            if bad >= 0:
                return newlines + text.count("\n", 0, bad) + 1
            newlines += text.count("\n")
    return newlines + 1


def bounded_lines(handle: TextIO, limit: int = MAX_REQUEST_BYTES, lines_before: int = 0) -> Iterator[str]:
    """The handle's lines; a line longer than `limit` characters raises TextFileError at its number
    (counted after ``lines_before``, the lines of the file before where the handle starts)."""
    number = lines_before
    while line := handle.readline(limit + 1):
        number += 1
        if len(line) > limit and not line.endswith("\n"):
            raise TextFileError(
                number, f"has a line longer than {megabytes(limit)}; one row or request is at most that"
            )
        if "\x00" in line:  # text never holds NUL; UTF-16 without a byte-order mark is full of them
            raise TextFileError(number, _NUL)
        yield line
