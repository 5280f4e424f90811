"""Export of a sandbox's files to the daemon's object store (a real S3
server, versitygw, that the Go test starts: AIRLOCK_TEST_S3)."""

from __future__ import annotations

import hashlib
import unittest
import urllib.request

import airlock

from . import daemon

CSV = b"name,count\nalpha,1\nbeta,2\n"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89" + bytes(64)
ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(120)


@unittest.skipUnless(len(daemon.S3) == 5, "no S3 server (AIRLOCK_TEST_S3 unset: the Go test sets it where the s3 capability works)")
class ExportTest(daemon.DaemonTest):
    def test_export_file_and_tree(self) -> None:
        bucket = daemon.S3[4]
        sb = self.sandbox(template="exports")
        sb.mkdir("/workspace/out/img")
        sb.write_file("/workspace/out/table.txt", CSV)
        sb.write_file("/workspace/out/img/dot.png", PNG)
        r = sb.export("out/table.txt", f"s3://{bucket}/py/one/", exec_id="ex-1")
        self.assertEqual(len(r.objects), 1)
        o = r.objects[0]
        self.assertEqual(o.object, f"s3://{bucket}/py/one/table.txt")
        self.assertTrue(o.content_type.startswith("text/csv"), o.content_type)
        self.assertEqual(o.sha256, hashlib.sha256(CSV).hexdigest())
        self.assertIsNotNone(o.url)
        self.assertIsNotNone(o.expires)
        with urllib.request.urlopen(o.url or "", timeout=30) as resp:
            self.assertEqual(resp.read(), CSV)
        tree = sb.export("/workspace/out", f"s3://{bucket}/py/tree/")
        self.assertEqual(sorted(x.object for x in tree.objects), [f"s3://{bucket}/py/tree/img/dot.png", f"s3://{bucket}/py/tree/table.txt"])
        self.assertEqual(tree.bytes, len(CSV) + len(PNG))

    def test_refused(self) -> None:
        bucket = daemon.S3[4]
        sb = self.sandbox(template="exports")
        sb.write_file("/workspace/pic.png", ELF)
        with self.assertRaises(airlock.TypeRefused) as cm:
            sb.export("pic.png", f"s3://{bucket}/py/refused/")
        self.assertIn("application/x-executable", str(cm.exception))
        sb.write_file("/workspace/big.png", PNG + bytes(64 << 10))
        with self.assertRaises(airlock.TooLarge):
            sb.export("big.png", f"s3://{bucket}/py/refused/")
        sb.write_file("/workspace/a.csv", CSV)
        with self.assertRaises(airlock.Forbidden):
            sb.export("a.csv", "s3://not-this-bucket/x/")
        with self.assertRaises(ValueError):
            sb.export("a.csv", "https://example.com/x")
        # A template without export_types exports nothing.
        other = self.sandbox()
        other.write_file("/workspace/a.csv", CSV)
        with self.assertRaises(airlock.Forbidden):
            other.export("a.csv", f"s3://{bucket}/py/refused/")


if __name__ == "__main__":
    unittest.main()
