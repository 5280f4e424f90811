"""Every error class the daemon can be made to answer with, for real.
(InternalError, Unsupported and AuditUnavailable need a broken host; their
decoding is in test_unit.)"""

from __future__ import annotations

import io
import tarfile
import unittest
from typing import Any

import airlock

from .daemon import DaemonTest


class ErrorsTest(DaemonTest):
    sb: airlock.Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.sb = cls.create()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sb.kill()
        super().tearDownClass()

    def check(self, ctx: "unittest.case._AssertRaisesContext[Any]", cls: type, code: str, status: int) -> airlock.APIError:
        """Checks the raised error's exact class, code and status."""
        e = ctx.exception
        self.assertIs(type(e), cls)
        self.assertEqual((e.code, e.status), (code, status))
        self.assertTrue(e.message)
        return e

    def test_not_found(self) -> None:
        with self.assertRaises(airlock.NotFound) as cm:
            self.agent.get_sandbox("sb-000000000000")
        self.check(cm, airlock.NotFound, "not_found", 404)
        with self.assertRaises(airlock.NotFound) as cm:
            self.sb.read_file("/workspace/no-such-file")
        self.check(cm, airlock.NotFound, "not_found", 404)

    def test_unauthorized(self) -> None:
        with airlock.Client(self.daemon.url, "airlock_not-a-real-key") as c:
            with self.assertRaises(airlock.Unauthorized) as cm:
                c.list_sandboxes()
        self.check(cm, airlock.Unauthorized, "unauthorized", 401)
        self.assertIn("unknown or revoked", cm.exception.message)

    def test_forbidden(self) -> None:
        with self.assertRaises(airlock.Forbidden) as cm:
            self.agent.list_approvals()
        self.check(cm, airlock.Forbidden, "forbidden", 403)
        self.assertIn("operator", cm.exception.message)
        with self.assertRaises(airlock.Forbidden) as cm:
            self.agent.create_key("nope")
        self.check(cm, airlock.Forbidden, "forbidden", 403)

    def test_invalid_and_path_errors(self) -> None:
        with self.assertRaises(airlock.InvalidRequest) as cm:
            self.agent.list_sandboxes(state="sleeping")
        self.check(cm, airlock.InvalidRequest, "invalid", 400)
        with self.assertRaises(airlock.PathOutside) as cm2:
            self.sb.read_file("../../etc/passwd")
        self.check(cm2, airlock.PathOutside, "path_outside", 400)
        with self.assertRaises(airlock.IsADirectory) as cm3:
            self.sb.read_file("/workspace")
        self.check(cm3, airlock.IsADirectory, "is_directory", 400)
        with self.assertRaises(airlock.MethodNotAllowed) as cm4:
            self.agent._transport.request("PUT", "/v1/sandboxes")
        self.check(cm4, airlock.MethodNotAllowed, "method_not_allowed", 405)

    def test_permission_denied(self) -> None:
        with self.assertRaises(airlock.PermissionDenied) as cm:
            self.sb.write_file("/etc/motd", "hi")
        self.check(cm, airlock.PermissionDenied, "permission_denied", 403)
        self.assertIn("read-only", cm.exception.message)

    def test_exists(self) -> None:
        self.sb.write_file("plain-file", b"x")
        with self.assertRaises(airlock.Exists) as cm:
            self.sb.mkdir("/workspace/plain-file")
        self.check(cm, airlock.Exists, "exists", 409)

    def test_not_running(self) -> None:
        sb = self.create()
        sb.kill()
        with self.assertRaises(airlock.NotRunning) as cm:
            sb.exec(["true"])
        self.check(cm, airlock.NotRunning, "not_running", 409)

    def test_limit_exceeded(self) -> None:
        sb = self.sandbox(limits=airlock.Limits(disk_bytes=1 << 20))
        with self.assertRaises(airlock.LimitExceeded) as cm:
            sb.write_file("big", b"\x00" * (3 << 20))
        self.check(cm, airlock.LimitExceeded, "limit", 507)
        self.assertIn("disk", cm.exception.message)

    def test_too_large(self) -> None:
        with self.assertRaises(airlock.TooLarge) as cm:
            self.sb.exec(["cat"], stdin=b"\x00" * (9 << 20))
        self.check(cm, airlock.TooLarge, "too_large", 413)

    def test_archives(self) -> None:
        with self.assertRaises(airlock.BadArchive) as cm:
            self.sb.upload_archive(b"this is no tar archive" * 100)
        self.check(cm, airlock.BadArchive, "bad_archive", 400)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            ti = tarfile.TarInfo("../escape.txt")
            ti.size = 1
            tf.addfile(ti, io.BytesIO(b"x"))
        with self.assertRaises(airlock.ArchiveRefused) as cm2:
            self.sb.upload_archive(buf.getvalue(), "/workspace/in")
        self.check(cm2, airlock.ArchiveRefused, "archive_refused", 400)
        self.assertIn("escape.txt", cm2.exception.message)

    def test_quota_and_capacity(self) -> None:
        # The "huge" template asks for 100 TiB of memory: past the agent
        # key's 8 GiB quota, and past the host for a key with a larger one.
        with self.assertRaises(airlock.QuotaExceeded) as cm:
            self.paced(lambda: self.agent.create_sandbox("huge"))
        self.check(cm, airlock.QuotaExceeded, "quota_exceeded", 429)
        key = self.operator.create_key("big-quota", quota=airlock.Quota(max_memory_bytes=1 << 50))
        self.addCleanup(self.operator.delete_key, key.id)
        self.assertEqual(key.quota.max_memory_bytes, 1 << 50)
        with airlock.Client(self.daemon.url, key.secret) as c:
            with self.assertRaises(airlock.InsufficientCapacity) as cm2:
                self.paced(lambda: c.create_sandbox("huge"))
        self.check(cm2, airlock.InsufficientCapacity, "insufficient_capacity", 503)

    def test_rate_limited(self) -> None:
        key = self.operator.create_key("slow", rate=airlock.RateLimits(creates_per_second=0.01, create_burst=1))
        self.addCleanup(self.operator.delete_key, key.id)
        self.assertIn(key.id, [k.id for k in self.operator.list_keys()])
        with airlock.Client(self.daemon.url, key.secret) as c:
            with c.create_sandbox():
                with self.assertRaises(airlock.RateLimited) as cm:
                    c.create_sandbox()
        e = self.check(cm, airlock.RateLimited, "rate_limited", 429)
        assert e.retry_after is not None
        self.assertGreater(e.retry_after, 10)
        self.assertIn("retry after", e.message)

    def test_denied(self) -> None:
        with self.assertRaises(airlock.Denied) as cm:
            self.sb.exec(["curl", "https://example.com/"])
        e = self.check(cm, airlock.Denied, "denied", 403)
        assert isinstance(e, airlock.Denied)
        self.assertEqual(e.rule, "rule:no-curl")
        self.assertEqual(e.reason, "curl is not allowed here; use python's urllib instead")


if __name__ == "__main__":
    unittest.main()
