"""The symlink walk of airlock.archive against the vectors the daemon's Go
package internal/symlink is tested with (testdata/symlink-vectors.json at
the repository's root), and download_dir's unpacker on them (N2 of the
second security review)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import unittest
from pathlib import Path

import airlock
from airlock.archive import MAX_HOPS, SymlinkEscapes, resolve_symlink, unpack

VECTORS = Path(__file__).resolve().parents[3] / "testdata" / "symlink-vectors.json"


def _vectors() -> list[dict]:
    doc = json.loads(VECTORS.read_text())
    assert doc["max_hops"] == MAX_HOPS, (doc["max_hops"], MAX_HOPS)
    out = []
    for v in doc["cases"]:
        if v.get("chain"):
            n = v["chain"]
            v = dict(v, links={f"l{j}": (f"l{j + 1}" if j < n - 1 else "end") for j in range(n)}, check="l0")
        out.append(v)
    return out


def _link(name: str, target: str) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, target, 0o777
    return ti


def _archive(links: dict[str, str], first: str) -> io.BytesIO:
    """The links as a tar archive, first before the others (a link the
    archive makes later must count too)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name in [first] + sorted(n for n in links if n != first):
            tf.addfile(_link(name, links[name]))
    buf.seek(0)
    return buf


class SymlinkVectorTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_vectors(self) -> None:
        vs = _vectors()
        self.assertGreaterEqual(len(vs), 20)
        for v in vs:
            with self.subTest(v["name"]):
                links = v["links"]
                if v["ok"]:
                    self.assertEqual(resolve_symlink(v["check"], links[v["check"]], links.get), v["resolved"])
                else:
                    with self.assertRaises(SymlinkEscapes):
                        resolve_symlink(v["check"], links[v["check"]], links.get)

    def test_unpack_vectors(self) -> None:
        for i, v in enumerate(_vectors()):
            with self.subTest(v["name"]):
                dest = os.path.join(self.tmp, f"d{i}")
                if v["ok"]:
                    unpack(_archive(v["links"], v["check"]), dest)
                    self.assertEqual(os.readlink(os.path.join(dest, *v["check"].split("/"))), v["links"][v["check"]])
                else:
                    with self.assertRaises(airlock.UnsafeArchive):
                        unpack(_archive(v["links"], v["check"]), dest)
                    self.assertFalse(any(os.path.islink(os.path.join(r, n)) for r, ds, fs in os.walk(dest) for n in ds + fs))

    def test_review_reproduction(self) -> None:
        # N2: x -> y/.../../etc/passwd comes before y -> . in the archive
        # (the daemon lists a directory sorted), so a check of the links
        # made so far never saw y.
        links = {"x": "y/" * 10 + "../" * 10 + "etc/passwd", "y": "."}
        dest = os.path.join(self.tmp, "out")
        with self.assertRaisesRegex(airlock.UnsafeArchive, "outside"):
            unpack(_archive(links, "x"), dest)
        self.assertFalse(os.path.lexists(os.path.join(dest, "x")))

    def test_link_already_in_dest(self) -> None:
        # A link already in the destination is part of the tree too.
        os.makedirs(os.path.join(self.tmp, "out"))
        os.symlink(".", os.path.join(self.tmp, "out", "y"))
        with self.assertRaises(airlock.UnsafeArchive):
            unpack(_archive({"x": "y/y/../../outside"}, "x"), os.path.join(self.tmp, "out"))
        unpack(_archive({"ok": "y/y/inside"}, "ok"), os.path.join(self.tmp, "out"))
        self.assertEqual(os.readlink(os.path.join(self.tmp, "out", "ok")), "y/y/inside")


if __name__ == "__main__":
    unittest.main()
