"""The agent's file operations and its view of paths, inside each local sandbox.

``FileOps`` is the part of the agent (``_agent.py``) that reads, writes, lists, stats,
makes, removes and renames files, as the sandbox user, and resolves the paths the host
sends. Like ``_agent.py`` and ``_procs.py``, this module is copied into the sandbox
beside the agent, which imports it from its own directory, and imports only the standard
library. It must not trust anything the sandbox can change.
"""

from __future__ import annotations

import errno
import os
import stat
import threading

# Only the type checker reads these: importing ``typing`` (and ``collections.abc``) would
# only slow the agent's start inside the sandbox (annotations are not evaluated).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol

    class Frames(Protocol):
        """The framed connection of one operation (the agent's ``Conn``)."""

        def send(self, kind: bytes, payload: bytes) -> None: ...

        def recv(self) -> tuple[bytes, bytes] | None: ...


class OpError(Exception):
    """An error reported to the client as ``{"error": {"type", "message"}}``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class FileOps:
    """The agent's paths and file operations; the agent sets ``root`` and ``workdir``."""

    root: str
    """Where the sandbox's ``/`` is on this process's file system; empty when isolated."""
    workdir: str
    """The sandbox's working directory, against which relative paths resolve."""

    # ------------------------------------------------------------------ paths

    def path(self, path: str) -> str:
        """A client path as this process must open it."""
        if "\0" in path or not path:
            raise OpError("InvalidInput", f"invalid path {path!r}")
        full = os.path.normpath(os.path.join(self.workdir, path))
        if full.startswith("//"):
            full = full[1:]
        return self.root + full if self.root else full

    def shown(self, real: str) -> str:
        """A path as the sandbox sees it."""
        if self.root and real.startswith(self.root):
            return real[len(self.root):] or "/"
        return real

    # ------------------------------------------------------------------ files

    def op_read(self, conn: Frames, req: dict[str, Any]) -> None:
        path = self.path(req["path"])
        check_regular(os.stat(path).st_mode, self.shown(path))  # before any open
        # O_NONBLOCK: a FIFO swapped in after the check must not block the open.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            check_regular(os.fstat(fd).st_mode, self.shown(path))
            os.set_blocking(fd, True)
            while data := os.read(fd, 1 << 20):
                conn.send(b"D", data)
        finally:
            os.close(fd)

    def op_write(self, conn: Frames, req: dict[str, Any]) -> None:
        """Replace or create a file whole, through a temporary file renamed over it: a
        write that fails leaves the old file as it was. An existing file keeps its mode,
        and one the sandbox user may not write is refused, as an open for writing is."""
        path = self.path(req["path"])
        try:
            mode = writable_mode(path, self.shown(path))
            make_parents(path)
            tmp = os.path.join(os.path.dirname(path),
                               f".psdk-write-{os.getpid()}-{threading.get_ident()}")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            except OSError as exc:  # named by the user's path, not the temporary file's
                raise OSError(exc.errno, exc.strerror, path) from None
        except (OSError, OpError):
            drain_client(conn)
            raise
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            while True:
                frame = conn.recv()
                if frame is None:
                    raise ConnectionResetError("client closed during write")
                if frame[0] == b"Z":
                    break
                view = memoryview(frame[1])
                while view:
                    view = view[os.write(fd, view):]
            os.close(fd)
            fd = -1
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, path) from None
        finally:
            if fd >= 0:
                os.close(fd)
            if os.path.lexists(tmp):
                os.unlink(tmp)

    def entry(self, path: str, st: os.stat_result | None = None) -> dict[str, Any]:
        st = st or os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            kind, target = "symlink", os.readlink(path)
        else:
            kind = "directory" if stat.S_ISDIR(st.st_mode) else \
                "file" if stat.S_ISREG(st.st_mode) else "other"
            target = None
        return {"path": self.shown(path), "type": kind, "size": st.st_size,
                "mode": stat.S_IMODE(st.st_mode), "mtime": st.st_mtime, "target": target}

    def op_stat(self, conn: Frames, req: dict[str, Any]) -> dict[str, Any]:
        return self.entry(self.path(req["path"]))

    def op_list(self, conn: Frames, req: dict[str, Any]) -> list[dict[str, Any]]:
        path = self.path(req["path"])
        out = []
        with os.scandir(path) as it:
            for e in it:
                try:
                    out.append(self.entry(e.path, e.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    continue  # removed while listing
        return out

    def op_mkdir(self, conn: Frames, req: dict[str, Any]) -> None:
        path = self.path(req["path"])
        if req.get("parents"):
            os.makedirs(path, exist_ok=bool(req.get("exist_ok")))
        else:
            try:
                os.mkdir(path)
            except FileExistsError:
                if not (req.get("exist_ok") and os.path.isdir(path)):
                    raise

    def op_remove(self, conn: Frames, req: dict[str, Any]) -> None:
        path = self.path(req["path"])
        st = os.lstat(path)
        if path in ("/", self.root or "/"):
            raise OpError("InvalidInput", "refusing to remove the root directory")
        if stat.S_ISDIR(st.st_mode):
            if req.get("recursive"):
                import shutil  # only here: its import is most of a millisecond

                shutil.rmtree(path)
            else:
                os.rmdir(path)
        else:
            os.unlink(path)

    def op_rename(self, conn: Frames, req: dict[str, Any]) -> None:
        src, dst = self.path(req["src"]), self.path(req["dst"])
        os.lstat(src)
        make_parents(dst)
        os.replace(src, dst)


def make_parents(path: str) -> None:
    """Create ``path``'s missing parent directories. Errors name ``path``, the one the
    caller gave, and a parent that is a file is ENOTDIR (``makedirs`` says EEXIST)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path) from None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None


def drain_client(conn: Frames) -> None:
    """Read and drop the client's data frames up to its end marker."""
    while True:
        frame = conn.recv()
        if frame is None or frame[0] == b"Z":
            return


def writable_mode(path: str, shown: str) -> int | None:
    """The permission bits of the regular file at ``path``, once an open for writing
    (with the sandbox user's file-system ids) shows that it may be written; None where
    nothing is there yet. A directory is refused."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise OpError("IsADirectory", f"{shown} is a directory")
    if not stat.S_ISREG(st.st_mode):
        return None  # a FIFO or device is replaced, never opened
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOCTTY))
    except OSError as exc:
        if exc.errno != errno.ETXTBSY:  # a running program: writable, and replaced whole
            raise
    return stat.S_IMODE(st.st_mode)


def check_regular(mode: int, shown: str) -> None:
    """Refuse anything but a regular file to be read: a device, FIFO or socket can give
    endless data or block forever."""
    if stat.S_ISDIR(mode):
        raise OpError("IsADirectory", f"{shown} is a directory")
    if not stat.S_ISREG(mode):
        raise OpError("NotARegularFile", f"{shown} is not a regular file (a device, FIFO "
                                         "or socket): it cannot be read")
