"""What the MCP tools return: typed result models, and bytes made into text for them.

Each tool's result is one of the pydantic models here, so its output schema is published
with the tool. Bytes from a sandbox (a file's content, a command's output) are bounded
before they get here; this module turns them into JSON-safe text: UTF-8 text as it is,
anything else as base64, the result saying which. It must not reach a sandbox itself.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Literal

from pydantic import BaseModel, Field

from provider_sdk.errors import InvalidInput
from provider_sdk.interpreter import CodeResult
from provider_sdk.models import FileInfo, SandboxInfo

__all__ = [
    "CodeErrorOutput",
    "CodeOutput",
    "Encoding",
    "ExecOutput",
    "ExposedPortOutput",
    "FileContent",
    "FileEntry",
    "FileListing",
    "KillOutput",
    "SandboxList",
    "SandboxSummary",
    "WriteOutput",
    "decode_content",
    "code_output",
    "encode_content",
    "entry_of",
    "summary_of",
]

Encoding = Literal["utf-8", "base64"]
"""How content travels in a tool's arguments or result: UTF-8 text, or base64 of bytes."""

# The longest a UTF-8 sequence is: a cut through a character leaves at most this many
# bytes of it at the end of a truncated buffer.
_UTF8_TAIL = 3


class SandboxSummary(BaseModel):
    """A sandbox as the tools show it."""

    id: str = Field(description="The sandbox's id: what the other tools take.")
    provider: str = Field(description="The provider (backend) that runs it.")
    state: str = Field(description="starting, running, pausing, paused, stopped, killed, "
                                   "error or unknown.")
    template: str | None = Field(description="The template it was made from, if known.")
    labels: dict[str, str] = Field(description="Its labels (metadata).")
    created_at: str | None = Field(description="When it was created (ISO 8601), if known.")


class SandboxList(BaseModel):
    """The sandboxes this session can reach."""

    sandboxes: list[SandboxSummary]
    omitted: int = Field(description="Sandboxes past the listing limit, not shown.")


class ExecOutput(BaseModel):
    """The outcome of a command."""

    exit_code: int | None = Field(description="Its exit status (-N: killed by signal N); "
                                              "null when it timed out.")
    stdout: str = Field(description="Standard output (UTF-8; invalid bytes replaced).")
    stderr: str = Field(description="Standard error (UTF-8; invalid bytes replaced).")
    stdout_truncated_bytes: int = Field(
        description="Bytes of standard output past the output limit, not shown.")
    stderr_truncated_bytes: int = Field(
        description="Bytes of standard error past the output limit, not shown.")
    timed_out: bool = Field(description="The command ran past its timeout and was killed "
                                        "with every process it started; the output is what "
                                        "it wrote until then.")
    oom_killed: bool = Field(description="It was killed for exceeding the memory limit.")
    duration_seconds: float = Field(description="Wall-clock seconds it ran.")


class CodeErrorOutput(BaseModel):
    """An exception the code raised and did not catch."""

    name: str = Field(description="The exception's class name (ZeroDivisionError).")
    value: str = Field(description="Its message.")
    traceback: str = Field(description="The formatted traceback of the code's own frames.")


class CodeOutput(BaseModel):
    """The outcome of a run of code in the sandbox's interpreter."""

    text: str | None = Field(description="The plain-text value of the code's last "
                                         "expression (its repr); null when the code does "
                                         "not end in an expression, it is None, or the "
                                         "code raised.")
    stdout: str = Field(description="What the code printed.")
    stderr: str = Field(description="What the code wrote to standard error.")
    error: CodeErrorOutput | None = Field(description="The exception the code raised, if "
                                                      "any (a result, not a tool error).")
    execution_count: int = Field(description="How many runs the interpreter has started, "
                                             "this one included.")
    stdout_truncated_bytes: int = Field(
        description="Bytes of stdout past the output limit, not shown.")
    stderr_truncated_bytes: int = Field(
        description="Bytes of stderr past the output limit, not shown.")
    text_truncated_bytes: int = Field(
        description="Bytes of text past the output limit, not shown.")
    timed_out: bool = Field(description="The run passed its timeout and was interrupted "
                                        "(error is then KeyboardInterrupt).")
    state_kept: bool = Field(description="The interpreter still holds what earlier runs "
                                         "defined: false only when code that would not "
                                         "stop after a timeout had its interpreter ended.")
    duration_seconds: float = Field(description="Wall-clock seconds it ran.")


class FileContent(BaseModel):
    """A file's content (its head, when larger than the output limit)."""

    path: str
    content: str = Field(description="The bytes read, as text or base64 (see encoding).")
    encoding: Encoding = Field(description="utf-8: content is the file's text; base64: the "
                                           "file is not UTF-8 text, content is its bytes in "
                                           "base64.")
    size: int = Field(description="The file's size in bytes.")
    truncated_bytes: int = Field(description="Bytes past the output limit, not read.")


class WriteOutput(BaseModel):
    """A file written."""

    path: str
    size: int = Field(description="Bytes written.")


class FileEntry(BaseModel):
    """One entry of a directory."""

    name: str
    path: str = Field(description="Its absolute path in the sandbox.")
    type: str = Field(description="file, directory, symlink or other.")
    size: int
    mode: str = Field(description="Permission bits, in octal (0o644).")
    modified_at: str | None = Field(description="Last modification (ISO 8601), if known.")
    symlink_target: str | None = Field(description="Where a symlink points.")


class FileListing(BaseModel):
    """A directory's entries, sorted by name."""

    path: str
    entries: list[FileEntry]
    omitted: int = Field(description="Entries past the listing limit, not shown.")


class KillOutput(BaseModel):
    """A sandbox killed."""

    id: str
    killed: bool = Field(description="Always true: killing a sandbox twice is not an error.")


class ExposedPortOutput(BaseModel):
    """A port of a sandbox reachable from the server's machine."""

    port: int = Field(description="The port inside the sandbox.")
    url: str = Field(description="The address to open, access token included.")
    base_url: str = Field(description="The address without the token.")
    token: str = Field(description="The access token: whoever has it reaches the port.")
    token_header: str | None = Field(
        description="The request header in which base_url takes the token, if any.")


def code_output(result: CodeResult, *, timed_out: bool = False,
                state_kept: bool = True) -> CodeOutput:
    """A code run's ``result`` as the tools show it."""
    error = None if result.error is None else CodeErrorOutput(
        name=result.error.name, value=result.error.value, traceback=result.error.traceback)
    return CodeOutput(text=result.text, stdout=result.stdout, stderr=result.stderr,
                      error=error, execution_count=result.execution_count,
                      stdout_truncated_bytes=result.stdout_truncated,
                      stderr_truncated_bytes=result.stderr_truncated,
                      text_truncated_bytes=result.text_truncated, timed_out=timed_out,
                      state_kept=state_kept, duration_seconds=result.duration)


def _iso(when: dt.datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def summary_of(info: SandboxInfo) -> SandboxSummary:
    """``info`` as the tools show it."""
    return SandboxSummary(id=info.id, provider=info.provider, state=str(info.state),
                          template=info.template, labels=dict(info.metadata),
                          created_at=_iso(info.created_at))


def entry_of(info: FileInfo) -> FileEntry:
    """A directory entry as the tools show it."""
    return FileEntry(name=info.name, path=info.path, type=str(info.type), size=info.size,
                     mode=oct(info.mode), modified_at=_iso(info.modified_at),
                     symlink_target=info.symlink_target)


def encode_content(data: bytes, *, truncated: bool) -> tuple[str, Encoding]:
    """``data`` as text when it is UTF-8, else as base64; and which it is.

    When ``data`` is the head of something longer (``truncated``), a character the cut
    went through is dropped from its end rather than turning the whole into base64.
    """
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        cut_through = (truncated and exc.reason == "unexpected end of data"
                       and exc.start >= len(data) - _UTF8_TAIL)
        if cut_through:
            return data[:exc.start].decode("utf-8"), "utf-8"
    return base64.b64encode(data).decode("ascii"), "base64"


def decode_content(content: str, encoding: Encoding) -> bytes:
    """The bytes ``content`` holds in ``encoding``.

    Raises:
        InvalidInput: ``content`` is not valid base64 (with ``encoding="base64"``), or
            not encodable as UTF-8 (a lone surrogate).
    """
    if encoding == "utf-8":
        try:
            return content.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput("content holds a lone surrogate, which UTF-8 cannot encode; "
                               "send such bytes with encoding 'base64'") from None
    try:
        return base64.b64decode(content.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise InvalidInput("content is not valid base64 (encoding is 'base64')") from None
