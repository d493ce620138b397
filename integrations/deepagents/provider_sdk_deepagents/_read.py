"""``read()`` answered from a file's bytes, with the paging rules of deepagents' own
server-side read script: the empty-file reminder, binary files (by extension, or by
content that is not UTF-8) as base64 up to ``MAX_BINARY_BYTES``, text split on
universal newlines and paged by ``offset``/``limit``, each page capped at
``MAX_OUTPUT_BYTES`` with ``TRUNCATION_MSG`` appended.

This module owns only that transformation; it performs no I/O.
"""

from __future__ import annotations

import base64
import codecs

from deepagents.backends.protocol import FileData, ReadResult
from deepagents.backends.sandbox import MAX_BINARY_BYTES, MAX_OUTPUT_BYTES, TRUNCATION_MSG
from deepagents.backends.utils import _get_backend_read_file_type, normalize_read_bounds

__all__ = ["EMPTY_REMINDER", "binary_is_too_large", "is_text_path", "read_page"]

EMPTY_REMINDER = "System reminder: File exists but has empty contents"
_SNIFF = 8192  # bytes looked at to tell text from binary, as the read script does


def is_text_path(file_path: str) -> bool:
    """Whether deepagents reads this path as text (by its extension)."""
    return _get_backend_read_file_type(file_path) == "text"


def binary_is_too_large(file_path: str) -> ReadResult:
    """The error for a binary file past the preview size."""
    return ReadResult(error=f"File '{file_path}': Binary file exceeds maximum preview size "
                            f"of {MAX_BINARY_BYTES} bytes")


def _binary(file_path: str, raw: bytes) -> ReadResult:
    if len(raw) > MAX_BINARY_BYTES:
        return binary_is_too_large(file_path)
    return ReadResult(file_data=FileData(content=base64.b64encode(raw).decode("ascii"),
                                         encoding="base64"))


def read_page(file_path: str, raw: bytes, offset: int, limit: int) -> ReadResult:
    """The ``ReadResult`` for lines ``offset .. offset+limit`` of a file holding ``raw``."""
    if not raw:
        return ReadResult(file_data=FileData(content=EMPTY_REMINDER, encoding="utf-8"))
    if not is_text_path(file_path):
        return _binary(file_path, raw)
    try:
        codecs.getincrementaldecoder("utf-8")().decode(raw[:_SNIFF], final=False)
    except UnicodeDecodeError:
        return _binary(file_path, raw)
    offset, limit = normalize_read_bounds(offset, limit)
    if limit <= 0:
        return ReadResult(file_data=FileData(content="", encoding="utf-8"),
                          no_lines_requested=True)
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    total = len(lines)
    if offset >= total:
        return ReadResult(error=f"File '{file_path}': Line offset {offset} exceeds file "
                                f"length ({total} lines)")
    page = lines[offset:offset + limit]
    content = "\n".join(page)
    shown = len(page)
    budget = MAX_OUTPUT_BYTES - len(TRUNCATION_MSG.encode("utf-8"))
    encoded = content.encode("utf-8")
    if len(encoded) > budget:
        kept = encoded[:budget].decode("utf-8", errors="ignore")
        # Only whole lines count as shown, so the next page starts at the cut line;
        # at least one, so paging always moves forward.
        shown = kept.count("\n") or 1
        content = kept + TRUNCATION_MSG
    end = offset + shown
    return ReadResult(file_data=FileData(content=content, encoding="utf-8"),
                      total_lines=total, start_line=offset + 1, end_line=end,
                      next_offset=end if end < total else None)
