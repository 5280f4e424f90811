"""Files against a real daemon, including 50 MiB each way."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import time
import unittest

import airlock

from .daemon import DaemonTest

MiB = 1 << 20


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(MiB), b""):
            h.update(b)
    return h.hexdigest()


class FilesTest(DaemonTest):
    def setUp(self) -> None:
        self.sb = self.sandbox()
        self.tmp = tempfile.mkdtemp(prefix="airlock-pysdk-files-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_read_write(self) -> None:
        sb = self.sb
        sb.write_file("/workspace/a.bin", b"\x00\x01\xff", mode=0o600)
        self.assertEqual(sb.read_file("a.bin"), b"\x00\x01\xff")
        sb.write_file("t.txt", "grüße\n")
        self.assertEqual(sb.read_text("/workspace/t.txt"), "grüße\n")
        sb.write_text("t.txt", "replaced")
        self.assertEqual(sb.read_file("t.txt", offset=2, limit=3), b"pla")
        sb.write_file("empty", b"")
        self.assertEqual(sb.read_file("empty"), b"")
        sb.write_file("streamed", io.BytesIO(b"from a file object"))
        self.assertEqual(sb.read_file("streamed"), b"from a file object")
        # A stream of unknown length (a pipe) goes chunked.
        r, w = os.pipe()
        with os.fdopen(w, "wb") as wf:
            wf.write(b"through a pipe " * 1000)
        with os.fdopen(r, "rb") as rf:
            self.assertFalse(rf.seekable())
            sb.write_file("piped", rf)
        self.assertEqual(sb.read_file("piped"), b"through a pipe " * 1000)
        # Commands see what the file API wrote, and the other way round.
        self.assertEqual(sb.exec(["cat", "t.txt"]).stdout, b"replaced")
        sb.exec("echo made by a command > /workspace/cmd.txt")
        self.assertEqual(sb.read_text("cmd.txt"), "made by a command\n")

        fi = sb.stat("a.bin")
        self.assertEqual((fi.name, fi.path, fi.size, fi.mode, fi.type, fi.is_file), ("a.bin", "/workspace/a.bin", 3, 0o600, "file", True))
        self.assertIsNotNone(fi.mod_time)

    def test_directories(self) -> None:
        sb = self.sb
        sb.mkdir("/workspace/d/e/f", mode=0o700)
        self.assertTrue(sb.stat("d/e/f").is_dir)
        self.assertEqual(sb.stat("d/e/f").mode, 0o700)
        sb.write_file("d/e/f/x", b"x")
        sb.write_file("d/y", b"yy")
        self.assertEqual(sorted((e.name, e.type) for e in sb.list_files("/workspace/d")), [("e", "dir"), ("y", "file")])
        sb.move("d/y", "d/e/z")
        self.assertFalse(sb.exists("d/y"))
        self.assertEqual(sb.read_file("d/e/z"), b"yy")
        sb.remove("/workspace/d")
        self.assertFalse(sb.exists("/workspace/d"))
        with self.assertRaises(airlock.NotFound):
            sb.write_file("new/dir/file.txt", "x")
        sb.write_file("new/dir/file.txt", "x", parents=True)
        self.assertEqual(sb.read_text("new/dir/file.txt"), "x")
        self.assertNotIn("d", [e.name for e in sb.list_files()])

    def test_file_transfer_50_mib(self) -> None:
        src = os.path.join(self.tmp, "big.bin")
        with open(src, "wb") as f:
            f.write(os.urandom(50 * MiB))
        want = _sha256(src)
        t0 = time.monotonic()
        self.sb.upload_file(src, "/workspace/big.bin")
        t1 = time.monotonic()
        self.assertEqual(self.sb.stat("big.bin").size, 50 * MiB)
        self.assertEqual(self.sb.exec(["sha256sum", "big.bin"]).stdout_text.split()[0], want)
        back = os.path.join(self.tmp, "back.bin")
        self.assertEqual(self.sb.download_file("big.bin", back), 50 * MiB)
        t2 = time.monotonic()
        self.assertEqual(_sha256(back), want)
        print(f"50 MiB file: upload {t1 - t0:.2f} s, download {t2 - t1:.2f} s")

    def test_directory_tree_50_mib(self) -> None:
        src = os.path.join(self.tmp, "project")
        os.makedirs(os.path.join(src, "data", "nested"))
        with open(os.path.join(src, "data", "big.bin"), "wb") as f:
            f.write(os.urandom(50 * MiB))
        for i in range(20):
            with open(os.path.join(src, "data", "nested", f"f{i}.txt"), "w") as f:
                f.write(f"file {i}\n")
        with open(os.path.join(src, "run.sh"), "w") as f:
            f.write("#!/bin/sh\necho ran\n")
        os.chmod(os.path.join(src, "run.sh"), 0o755)
        os.symlink("data/big.bin", os.path.join(src, "latest"))
        want = _sha256(os.path.join(src, "data", "big.bin"))

        t0 = time.monotonic()
        res = self.sb.upload_dir(src, "/workspace/project")
        t1 = time.monotonic()
        self.assertEqual(res.entries, 2 + 20 + 3)  # data, nested, 20 files, big.bin, run.sh, latest
        self.assertEqual(res.bytes, 50 * MiB + sum(len(f"file {i}\n") for i in range(20)) + len("#!/bin/sh\necho ran\n"))
        self.assertEqual(self.sb.exec(["./run.sh"], cwd="/workspace/project").stdout_text, "ran\n")
        self.assertEqual(self.sb.exec(["sha256sum", "latest"], cwd="/workspace/project").stdout_text.split()[0], want)
        self.assertEqual(self.sb.stat("project/latest").target, "data/big.bin")

        self.sb.write_file("project/made-inside.txt", "new")
        dest = os.path.join(self.tmp, "out")
        n = self.sb.download_dir("/workspace/project", dest)
        t2 = time.monotonic()
        self.assertEqual(n, 26)
        self.assertEqual(_sha256(os.path.join(dest, "data", "big.bin")), want)
        self.assertEqual(os.readlink(os.path.join(dest, "latest")), "data/big.bin")
        self.assertEqual(os.stat(os.path.join(dest, "run.sh")).st_mode & 0o777, 0o755)
        with open(os.path.join(dest, "made-inside.txt")) as f:
            self.assertEqual(f.read(), "new")
        with open(os.path.join(dest, "data", "nested", "f7.txt")) as f:
            self.assertEqual(f.read(), "file 7\n")
        print(f"50 MiB tree: upload {t1 - t0:.2f} s, download {t2 - t1:.2f} s")

        # One file comes down under its base name.
        self.assertEqual(self.sb.download_dir("/workspace/project/run.sh", os.path.join(self.tmp, "one")), 1)
        self.assertTrue(os.path.isfile(os.path.join(self.tmp, "one", "run.sh")))

    def test_raw_archives(self) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            ti = tarfile.TarInfo("hello.txt")
            ti.size = 5
            tf.addfile(ti, io.BytesIO(b"hello"))
        self.assertEqual(self.sb.upload_archive(buf.getvalue(), "/tmp/in").entries, 1)
        self.assertEqual(self.sb.read_file("/tmp/in/hello.txt"), b"hello")
        data = self.sb.download_archive("/tmp/in")
        assert isinstance(data, bytes)
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            self.assertEqual(sorted(tf.getnames()), [".", "hello.txt"])
        out = io.BytesIO()
        self.assertEqual(self.sb.download_archive("/tmp/in", out), len(data))


if __name__ == "__main__":
    unittest.main()
