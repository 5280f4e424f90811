"""Directory trees to and from tar archives, for Sandbox.upload_dir and
Sandbox.download_dir.

Packing takes regular files, directories and symlinks (as links, never
followed) and refuses anything else. Unpacking treats the archive as
untrusted, because the sandbox chose its names and links: it refuses
absolute names, ``..`` components, hard links, devices and FIFOs, never
writes through a symlink (neither one the archive made nor one already in
the destination), and makes the archive's symlinks last, and only those
whose target stays inside the destination.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
from typing import IO

from .errors import UnsafeArchive

__all__ = ["pack_dir", "unpack"]


def _tarinfo(name: str, st: os.stat_result) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.mode = stat.S_IMODE(st.st_mode) & 0o777
    ti.mtime = int(st.st_mtime)
    # Host user names and ids mean nothing in the sandbox; leave them out.
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def pack_dir(local_dir: str | os.PathLike[str], out: IO[bytes]) -> int:
    """Writes the contents of local_dir (not the directory itself) to out as
    a tar archive, and returns the number of entries."""
    root = os.fspath(local_dir)
    if not os.path.isdir(root):
        raise NotADirectoryError(f"{root}: not a directory; upload a single file with write_file or upload_file")
    n = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tf:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in dirnames + sorted(filenames):
                full = os.path.join(dirpath, name)
                st = os.lstat(full)
                ti = _tarinfo(prefix + name, st)
                if stat.S_ISLNK(st.st_mode):
                    ti.type, ti.linkname = tarfile.SYMTYPE, os.readlink(full)
                    tf.addfile(ti)
                elif stat.S_ISDIR(st.st_mode):
                    ti.type = tarfile.DIRTYPE
                    tf.addfile(ti)
                elif stat.S_ISREG(st.st_mode):
                    ti.type, ti.size = tarfile.REGTYPE, st.st_size
                    with open(full, "rb") as f:
                        tf.addfile(ti, f)
                else:
                    raise ValueError(f"{full}: not a regular file, directory or symlink (a socket, FIFO or device); move it out of the tree first")
                n += 1
    return n


def _clean(name: str) -> str:
    """The archive name as a clean relative path, or raises UnsafeArchive."""
    if "\x00" in name or name.startswith("/") or "\\" in name:
        raise UnsafeArchive(f"archive entry {name!r}: absolute or malformed name")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"archive entry {name!r}: '..' would leave the destination")
    return "/".join(parts)


class _Unpacker:
    def __init__(self, dest: str) -> None:
        self.dest = os.path.realpath(dest)
        self.safe_dirs = {self.dest}
        self.links: list[tuple[str, str]] = []
        self.link_names: set[str] = set()

    def _dir(self, rel: str, mode: int = 0o755) -> str:
        """Makes the directory rel (and its parents) inside dest, refusing to
        pass through a symlink; returns its path."""
        path = self.dest
        for part in rel.split("/") if rel else ():
            path = os.path.join(path, part)
            if path in self.safe_dirs:
                continue
            try:
                os.mkdir(path, mode | 0o700)
            except FileExistsError:
                st = os.lstat(path)
                if not stat.S_ISDIR(st.st_mode):
                    kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
                    raise UnsafeArchive(f"{path}: {kind} in the way of the archive's entries; download into an empty directory") from None
            self.safe_dirs.add(path)
        return path

    def file(self, rel: str, src: IO[bytes], mode: int, mtime: float) -> None:
        parent = self._dir(posixpath.dirname(rel))
        path = os.path.join(parent, posixpath.basename(rel))
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as e:
            if os.path.islink(path):
                raise UnsafeArchive(f"{path}: a symlink in the way of the archive's file {rel!r}") from None
            raise e
        with os.fdopen(fd, "wb") as f:
            while True:
                b = src.read(1 << 20)
                if not b:
                    break
                f.write(b)
            os.fchmod(f.fileno(), mode & 0o777)
        os.utime(path, (mtime, mtime), follow_symlinks=False)

    def symlink(self, rel: str, target: str) -> None:
        if not target or target.startswith("/") or "\x00" in target:
            raise UnsafeArchive(f"archive entry {rel!r}: symlink to an absolute path {target!r}")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
        if resolved == ".." or resolved.startswith("../"):
            raise UnsafeArchive(f"archive entry {rel!r}: symlink {target!r} points outside the destination")
        # A target through another of the archive's links could resolve
        # elsewhere than it reads; refuse it as the daemon does.
        parts = resolved.split("/")
        for i in range(1, len(parts) + 1):
            if "/".join(parts[:i]) in self.link_names:
                raise UnsafeArchive(f"archive entry {rel!r}: symlink target goes through another symlink of the archive")
        self.link_names.add(rel)
        self.links.append((rel, target))

    def finish(self) -> None:
        for rel, target in self.links:
            parent = self._dir(posixpath.dirname(rel))
            path = os.path.join(parent, posixpath.basename(rel))
            try:
                os.symlink(target, path)
            except FileExistsError:
                raise UnsafeArchive(f"{path}: exists; the archive's symlink {rel!r} would replace it") from None


def unpack(src: IO[bytes], dest: str | os.PathLike[str]) -> int:
    """Extracts the tar archive read from src into the directory dest (made
    if missing) and returns the number of entries made. Raises
    UnsafeArchive for an entry that would land outside dest."""
    d = os.fspath(dest)
    os.makedirs(d, exist_ok=True)
    u = _Unpacker(d)
    n = 0
    try:
        with tarfile.open(fileobj=src, mode="r|") as tf:
            for m in tf:
                rel = _clean(m.name)
                if m.isdir():
                    u._dir(rel, m.mode & 0o777)
                elif m.isreg():
                    if not rel:
                        raise UnsafeArchive(f"archive entry {m.name!r}: a file with no name")
                    f = tf.extractfile(m)
                    assert f is not None
                    u.file(rel, f, m.mode, m.mtime)
                elif m.issym():
                    u.symlink(rel, m.linkname)
                else:
                    kind = "hard link" if m.islnk() else "device or FIFO"
                    raise UnsafeArchive(f"archive entry {m.name!r}: a {kind}, which downloads do not make")
                if rel:
                    n += 1
    except tarfile.TarError as e:
        raise UnsafeArchive(f"not a valid tar archive: {e}") from None
    u.finish()
    return n
