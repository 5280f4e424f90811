"""Directory trees to and from tar archives, for Sandbox.upload_dir and
Sandbox.download_dir.

Packing takes regular files, directories and symlinks (as links, never
followed) and refuses anything else. Unpacking treats the archive as
untrusted, because the sandbox chose its names and links: it refuses
absolute names, ``..`` components, hard links, devices and FIFOs, never
writes through a symlink (neither one the archive made nor one already in
the destination), and makes the archive's symlinks last, and only those
whose target stays inside the destination: each target is walked component
by component against the tree as it will be (the archive's links and those
already in the destination substituted), by resolve_symlink, the same walk
as the daemon's (Go package internal/symlink, same test vectors).
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
from typing import IO, Callable, Optional

from .errors import UnsafeArchive

__all__ = ["pack_dir", "unpack", "resolve_symlink", "SymlinkEscapes", "MAX_HOPS"]

#: How many symlinks one walk may follow, the checked link included.
MAX_HOPS = 40
#: How many path components one walk may take, links' targets included.
MAX_STEPS = 1 << 13
#: How many bytes of paths one walk may look up (many deep links stay cheap).
MAX_COST = 1 << 18


class SymlinkEscapes(ValueError):
    """A symlink's target leaves the root (resolve_symlink)."""


def resolve_symlink(name: str, target: str, lookup: Callable[[str], Optional[str]]) -> str:
    """Walks target, the raw target of the symlink at name (a clean path
    relative to the root), component by component in the tree lookup
    describes, and returns where it lands relative to the root ("." for the
    root). lookup(rel) is the target of the symlink at rel in the tree as it
    will be, or None when rel is not a symlink. ".." pops, a name pushes, a
    name that is a symlink is replaced by its target (at most MAX_HOPS
    links). Raises SymlinkEscapes for an absolute target (of the link or
    one it passes through), ".." above the root, or too many links.
    """

    def refuse(reason: str) -> SymlinkEscapes:
        return SymlinkEscapes(f"symlink {name!r} -> {target!r}: {reason}")

    if not target:
        raise refuse("empty target")
    if target.startswith("/"):
        raise refuse("an absolute target")
    cur = [c for c in name.split("/")[:-1] if c not in ("", ".")]
    todo = list(reversed(target.split("/")))
    hops = 1  # the link itself
    steps = cost = 0
    while todo:
        if steps == MAX_STEPS or cost > MAX_COST:
            raise refuse("too long a walk (too many or too deep links)")
        steps += 1
        c = todo.pop()
        if c in ("", "."):
            continue
        if c == "..":
            if not cur:
                raise refuse("it climbs above the directory")
            cur.pop()
            continue
        p = "/".join(cur + [c])
        cost += len(p)
        t = lookup(p)
        if t is None:
            cur.append(c)
            continue
        hops += 1
        if hops > MAX_HOPS:
            raise refuse(f"more than {MAX_HOPS} symlinks in a row (a loop?)")
        if not t:
            raise refuse(f"it goes through {p!r}, a symlink with an empty target")
        if t.startswith("/"):
            raise refuse(f"it goes through {p!r}, a symlink to the absolute path {t!r}")
        todo.extend(reversed(t.split("/")))
    return "/".join(cur) if cur else "."


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
        self.links: dict[str, str] = {}

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
        if not rel:
            raise UnsafeArchive("archive entry: a symlink cannot replace the destination")
        if not target or "\x00" in target:
            raise UnsafeArchive(f"archive entry {rel!r}: symlink with an empty or malformed target")
        if rel in self.links:
            raise UnsafeArchive(f"archive entry {rel!r}: a second symlink at the same path")
        # Checked in finish, once every link of the archive is known: a
        # link later in the archive can change where this one leads.
        self.links[rel] = target

    def _lookup(self, rel: str) -> Optional[str]:
        """The target of the symlink at rel once the archive is unpacked:
        one of the archive's, or one already in dest; None otherwise."""
        if rel in self.links:
            return self.links[rel]
        path = os.path.join(self.dest, *rel.split("/"))
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(st.st_mode):
            return os.readlink(path)
        return None

    def finish(self) -> None:
        for rel, target in self.links.items():
            try:
                resolve_symlink(rel, target, self._lookup)
            except SymlinkEscapes as e:
                raise UnsafeArchive(f"archive entry {rel!r}: {e}, which points outside the destination") from None
        for rel, target in self.links.items():
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
