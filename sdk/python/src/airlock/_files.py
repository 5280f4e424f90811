"""Files in a sandbox: read, write, list, stat, mkdir, move, remove, and
directory trees to and from the host as tar archives."""

from __future__ import annotations

import os
import posixpath
import tempfile
from typing import IO, TYPE_CHECKING, Any, Union

from .archive import pack_dir, unpack
from .errors import NotFound
from .models import ArchiveResult, FileInfo, _obj

__all__ = ["FilesMixin"]

#: What write_file takes: bytes, text (written as UTF-8) or a binary file.
Data = Union[bytes, bytearray, memoryview, str, IO[bytes]]

_CHUNK = 1 << 20


def _length(f: IO[bytes]) -> int | None:
    """The bytes left in f, when it is a seekable file."""
    try:
        if f.seekable():
            pos = f.tell()
            end = f.seek(0, os.SEEK_END)
            f.seek(pos)
            return end - pos
    except (OSError, AttributeError, ValueError):
        pass
    return None


def _chunks(f: IO[bytes]) -> Any:
    while True:
        b = f.read(_CHUNK)
        if not b:
            return
        yield b


class FilesMixin:
    """Sandbox methods for files. Paths are absolute inside the sandbox, or
    relative to /workspace; ``..`` is refused (PathOutside). Writes go
    through the daemon's policy (Denied) and may wait for a person."""

    if TYPE_CHECKING:
        from ._transport import Transport

        _t: Transport

        def _path(self, *rest: str) -> str: ...

    def read_file(self, path: str, *, offset: int = 0, limit: int | None = None) -> bytes:
        """The file's bytes (from offset, at most limit of them). Raises
        NotFound, IsADirectory."""
        q: dict[str, Any] = {"path": path}
        if offset:
            q["offset"] = offset
        if limit is not None:
            q["limit"] = limit
        with self._t.request("GET", self._path("files"), query=q, accept="application/octet-stream") as r:
            return r.read()

    def read_text(self, path: str, *, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The file decoded as text."""
        return self.read_file(path).decode(encoding, errors)

    def write_file(self, path: str, data: Data, *, mode: int = 0o644, parents: bool = False) -> None:
        """Creates or replaces the file at path. data is bytes, a str
        (written as UTF-8) or a binary file object, which is streamed.

        The parent directory must exist (NotFound otherwise) unless
        ``parents=True``, which makes it first. Raises LimitExceeded when
        the file does not fit the sandbox's disk.
        """
        if parents:
            parent = posixpath.dirname(path)
            if parent not in ("", "/"):
                self.mkdir(parent)
        q = {"path": path, "mode": format(mode & 0o777, "o")}
        body: Any
        length: int | None = None
        if isinstance(data, str):
            body = data.encode()
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = bytes(data)
        elif hasattr(data, "read"):
            length = _length(data)
            body = data if length is not None else _chunks(data)
        else:
            raise TypeError(f"data: give bytes, str or a binary file, not {type(data).__name__}")
        self._t.request(
            "PUT", self._path("files"), query=q, body=body, length=length, content_type="application/octet-stream", read_timeout=None
        ).discard()

    def write_text(self, path: str, text: str, *, encoding: str = "utf-8", mode: int = 0o644, parents: bool = False) -> None:
        """Writes text to the file at path (see write_file)."""
        self.write_file(path, text.encode(encoding), mode=mode, parents=parents)

    def upload_file(self, local_path: str | os.PathLike[str], path: str, *, mode: int | None = None) -> None:
        """Streams the host file local_path to path in the sandbox (mode:
        the local file's permissions unless given)."""
        with open(local_path, "rb") as f:
            m = mode if mode is not None else os.fstat(f.fileno()).st_mode & 0o777
            self.write_file(path, f, mode=m)

    def download_file(self, path: str, local_path: str | os.PathLike[str]) -> int:
        """Streams the sandbox's file at path to the host file local_path
        (replaced if it exists) and returns the bytes written."""
        n = 0
        with self._t.request("GET", self._path("files"), query={"path": path}, accept="application/octet-stream") as r:
            with open(local_path, "wb") as f:
                while True:
                    b = r.read1(_CHUNK)
                    if not b:
                        break
                    f.write(b)
                    n += len(b)
        return n

    def list_files(self, path: str = "/workspace") -> list[FileInfo]:
        """The entries of the directory at path."""
        d = _obj(self._t.request("GET", self._path("files", "list"), query={"path": path}).json())
        ents = d.get("entries")
        return [FileInfo.from_json(e) for e in ents] if isinstance(ents, list) else []

    def stat(self, path: str) -> FileInfo:
        """Describes the file at path, without following a final symlink.
        Raises NotFound."""
        return FileInfo.from_json(self._t.request("GET", self._path("files", "stat"), query={"path": path}).json())

    def exists(self, path: str) -> bool:
        """Whether something exists at path."""
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def mkdir(self, path: str, *, mode: int = 0o755) -> None:
        """Creates the directory at path and its missing parents."""
        body = {"path": path, "mode": format(mode & 0o777, "o")}
        self._t.request("POST", self._path("files", "mkdir"), json_body=body, read_timeout=None).discard()

    def move(self, src: str, dst: str) -> None:
        """Renames src to dst."""
        self._t.request("POST", self._path("files", "move"), json_body={"from": src, "to": dst}, read_timeout=None).discard()

    def remove(self, path: str) -> None:
        """Removes the file, or the directory tree, at path."""
        self._t.request("DELETE", self._path("files"), query={"path": path}, read_timeout=None).discard()

    def upload_archive(self, data: bytes | IO[bytes], path: str | None = None) -> ArchiveResult:
        """Extracts a tar archive (bytes or a binary file) into the directory
        at path (default /workspace; made if missing). The daemon checks
        every entry: names leaving the directory, hard links, devices and
        files past its limits are refused (ArchiveRefused)."""
        length = len(data) if isinstance(data, (bytes, bytearray)) else _length(data)
        body: Any = data if isinstance(data, (bytes, bytearray)) or length is not None else _chunks(data)
        r = self._t.request(
            "PUT",
            self._path("archive"),
            query={"path": path} if path else None,
            body=body,
            length=length,
            content_type="application/x-tar",
            read_timeout=None,
        )
        return ArchiveResult.from_json(r.json())

    def download_archive(self, path: str | None = None, out: IO[bytes] | None = None) -> bytes | int:
        """The file or directory tree at path (default /workspace) as a tar
        archive: returned as bytes, or written to the binary file out (then
        the number of bytes is returned). A directory comes as ``.`` and its
        entries named relative to it; a file, under its base name."""
        with self._t.request(
            "GET", self._path("archive"), query={"path": path} if path else None, accept="application/x-tar", read_timeout=None
        ) as r:
            if out is None:
                return r.read()
            n = 0
            while True:
                b = r.read1(_CHUNK)
                if not b:
                    return n
                out.write(b)
                n += len(b)

    def upload_dir(self, local_dir: str | os.PathLike[str], path: str | None = None) -> ArchiveResult:
        """Copies the contents of the host directory local_dir into the
        directory at path (default /workspace; made if missing): files,
        directories and symlinks (as links). The archive is built in a
        temporary file first, so that it can be sent with its length."""
        with tempfile.TemporaryFile() as tmp:
            pack_dir(local_dir, tmp)
            tmp.seek(0)
            return self.upload_archive(tmp, path)

    def download_dir(self, path: str | None, local_dir: str | os.PathLike[str]) -> int:
        """Copies the directory tree at path (default /workspace) into the
        host directory local_dir (made if missing), or a file at path into
        local_dir under its base name; returns the number of entries made.

        The archive comes from the sandbox and is treated as untrusted:
        entries that would land outside local_dir, and writes through any
        symlink, are refused (UnsafeArchive).
        """
        with self._t.request(
            "GET", self._path("archive"), query={"path": path} if path else None, accept="application/x-tar", read_timeout=None
        ) as r:
            return unpack(r, local_dir)  # type: ignore[arg-type]
