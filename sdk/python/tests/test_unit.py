"""Tests that need no daemon: error classes, decoding, URL and key checks,
and the archive unpacker's refusals."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import unittest
from datetime import datetime, timezone

import airlock
from airlock import errors
from airlock.archive import pack_dir, unpack
from airlock.models import FileInfo, SandboxInfo, _time


class ErrorClassTest(unittest.TestCase):
    def test_every_code_has_its_class(self) -> None:
        cases: dict[tuple[str, int], type[airlock.APIError]] = {
            ("invalid", 400): airlock.InvalidRequest,
            ("path_outside", 400): airlock.PathOutside,
            ("is_directory", 400): airlock.IsADirectory,
            ("bad_archive", 400): airlock.BadArchive,
            ("archive_refused", 409): airlock.ArchiveRefused,
            ("unauthorized", 401): airlock.Unauthorized,
            ("forbidden", 403): airlock.Forbidden,
            ("host_not_allowed", 403): airlock.Forbidden,
            ("origin_not_allowed", 403): airlock.Forbidden,
            ("permission_denied", 403): airlock.PermissionDenied,
            ("denied", 403): airlock.Denied,
            ("not_found", 404): airlock.NotFound,
            ("method_not_allowed", 405): airlock.MethodNotAllowed,
            ("not_running", 409): airlock.NotRunning,
            ("exists", 409): airlock.Exists,
            ("too_large", 413): airlock.TooLarge,
            ("rate_limited", 429): airlock.RateLimited,
            ("quota_exceeded", 429): airlock.QuotaExceeded,
            ("limit", 507): airlock.LimitExceeded,
            ("internal", 500): airlock.InternalError,
            ("unsupported", 501): airlock.Unsupported,
            ("insufficient_capacity", 503): airlock.InsufficientCapacity,
            ("audit_unavailable", 503): airlock.AuditUnavailable,
            # Codes this SDK does not know fall back on the status.
            ("something_new", 404): airlock.NotFound,
            ("something_new", 502): airlock.ServerError,
            ("http_418", 418): airlock.APIError,
        }
        for (code, status), cls in cases.items():
            with self.subTest(code=code):
                e = errors.error_for(status, code, "msg", 2.5)
                self.assertIs(type(e), cls)
                self.assertIsInstance(e, airlock.APIError)
                self.assertIsInstance(e, airlock.AirlockError)
                self.assertEqual((e.status, e.code, e.message, e.retry_after), (status, code, "msg", 2.5))
                self.assertIn(code, str(e))

    def test_hierarchy(self) -> None:
        self.assertTrue(issubclass(airlock.PathOutside, airlock.InvalidRequest))
        self.assertTrue(issubclass(airlock.NotRunning, airlock.Conflict))
        self.assertTrue(issubclass(airlock.InsufficientCapacity, airlock.ServerError))
        self.assertTrue(issubclass(airlock.ConnectionFailed, ConnectionError))
        self.assertTrue(issubclass(airlock.ConfigError, ValueError))
        # A denial is its own thing, not a permission error.
        self.assertFalse(issubclass(airlock.Denied, airlock.Forbidden))

    def test_denied_parses_rule_and_reason(self) -> None:
        e = errors.error_for(403, "denied", "denied by policy (rule:no-curl): curl is not allowed (use urllib)")
        assert isinstance(e, airlock.Denied)
        self.assertEqual(e.rule, "rule:no-curl")
        self.assertEqual(e.reason, "curl is not allowed (use urllib)")
        self.assertIsNone(e.approval_id)
        e = errors.error_for(403, "denied", "denied by policy (rule:ask): approval ap-1a2b denied: not today")
        assert isinstance(e, airlock.Denied)
        self.assertEqual((e.rule, e.approval_id, e.approval_state), ("rule:ask", "ap-1a2b", "denied"))
        e = errors.error_for(403, "denied", "something else")
        assert isinstance(e, airlock.Denied)
        self.assertEqual((e.rule, e.reason), (None, "something else"))


class DecodeTest(unittest.TestCase):
    def test_times(self) -> None:
        self.assertEqual(_time("2026-11-25T14:39:13.289828844Z"), datetime(2026, 11, 25, 14, 39, 13, 289828, tzinfo=timezone.utc))
        self.assertEqual(_time("2026-11-25T16:39:13+02:00"), datetime(2026, 11, 25, 14, 39, 13, tzinfo=timezone.utc))
        self.assertIsNone(_time("0001-01-01T00:00:00Z"))
        self.assertIsNone(_time(""))
        self.assertIsNone(_time("yesterday"))

    def test_sandbox_info_ignores_unknown_fields(self) -> None:
        info = SandboxInfo.from_json({"id": "sb-1", "state": "running", "limits": {"memory_bytes": 5, "new": 1}, "layers": ["userns"], "future": {}})
        self.assertEqual((info.id, info.state, info.limits.memory_bytes, info.layers, info.live), ("sb-1", "running", 5, ("userns",), True))

    def test_sandbox_info_paused(self) -> None:
        info = SandboxInfo.from_json({"id": "sb-1", "state": "paused", "paused": {"paused_at": "2026-11-25T14:39:13Z", "expires_at": "2026-12-25T14:39:13Z", "memory_kept_in_host": False, "stored_bytes": 181403648}})
        self.assertEqual((info.state, info.paused_until, info.memory_kept_in_host, info.paused_bytes, info.live), ("paused", datetime(2026, 12, 25, 14, 39, 13, tzinfo=timezone.utc), False, 181403648, False))
        running = SandboxInfo.from_json({"id": "sb-1", "state": "running"})
        self.assertEqual((running.paused_until, running.paused_bytes), (None, 0))

    def test_sandbox_info_pull(self) -> None:
        info = SandboxInfo.from_json({"id": "sb-1", "state": "creating", "pull": {"image": "registry.example/py:3", "layer": 2, "layers": 3, "bytes": 12582912}})
        self.assertEqual((info.state, info.pull_layer, info.pull_layers, info.pull_bytes), ("creating", 2, 3, 12582912))
        self.assertEqual(info.pull_image, "registry.example/py:3")
        node = SandboxInfo.from_json({"id": "sb-1", "state": "creating", "pull": {"image": "registry.example/py:3", "layer": 0, "layers": 0, "bytes": 0}})
        self.assertEqual((node.pull_image, node.pull_layer), ("registry.example/py:3", 0))
        running = SandboxInfo.from_json({"id": "sb-1", "state": "running"})
        self.assertEqual((running.pull_image, running.pull_layer, running.pull_bytes), ("", 0, 0))

    def test_file_mode_is_permission_bits(self) -> None:
        fi = FileInfo.from_json({"name": "workspace", "mode": 2147484141, "type": "dir"})  # Go's ModeDir|0755
        self.assertEqual((fi.mode, fi.is_dir), (0o755, True))

    def test_network_implies_egress(self) -> None:
        self.assertEqual(airlock.Network(allow_hosts=["pypi.org"]).to_json(), {"mode": "egress", "allow_hosts": ["pypi.org"]})
        self.assertEqual(airlock.Network().to_json(), {"mode": "none"})
        with self.assertRaises(TypeError):
            airlock.Network(allow_hosts="pypi.org").to_json()

    def test_network_secrets_and_rules(self) -> None:
        # Left out: the template's secrets and rules (nothing sent).
        self.assertNotIn("secrets", airlock.Network(allow_hosts=["api.github.com"]).to_json())
        self.assertNotIn("rules", airlock.Network(allow_hosts=["api.github.com"]).to_json())
        # [] is none of the template's secrets, and is sent (an egress network).
        self.assertEqual(airlock.Network(secrets=[]).to_json(), {"mode": "egress", "secrets": []})
        self.assertEqual(
            airlock.Network(
                allow_hosts=["api.github.com"],
                secrets=["GITHUB"],
                rules=[airlock.HostRule("api.github.com", allow=["GET /repos/**"], deny=["DELETE"]), {"host": "*.example.com", "deny": ["POST"]}],
            ).to_json(),
            {
                "mode": "egress",
                "allow_hosts": ["api.github.com"],
                "secrets": ["GITHUB"],
                "rules": [{"host": "api.github.com", "allow": ["GET /repos/**"], "deny": ["DELETE"]}, {"host": "*.example.com", "deny": ["POST"]}],
            },
        )
        for bad in (airlock.Network(secrets="GITHUB"), airlock.Network(rules=[airlock.HostRule("h", allow="GET")]), airlock.Network(rules=airlock.HostRule("h"))):
            with self.assertRaises(TypeError):
                bad.to_json()

    def test_egress_summary_exposed(self) -> None:
        s = airlock.EgressSummary.from_json(
            {"sandbox_id": "sb-1", "mode": "none", "hosts": [], "exposed": [{"port": 8000, "connections": 2, "denied": 1, "failed": 0, "bytes_sent": 10, "bytes_received": 20}]}
        )
        self.assertEqual((s.mode, s.exposed), ("none", (airlock.ExposedPort(port=8000, connections=2, denied=1, bytes_sent=10, bytes_received=20),)))
        self.assertEqual(airlock.EgressSummary.from_json({"sandbox_id": "sb-1"}).exposed, ())


class ClientSetupTest(unittest.TestCase):
    def setUp(self) -> None:
        saved = {k: os.environ.pop(k, None) for k in (airlock.ENV_URL, airlock.ENV_KEY)}

        def restore() -> None:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v

        self.addCleanup(restore)

    def test_urls(self) -> None:
        for bad in ["", "127.0.0.1:7070", "ftp://x", "http://", "http://user:pw@host:1", "http://h:99999", "http://h:1/?q=1"]:
            with self.subTest(url=bad), self.assertRaises(airlock.ConfigError):
                airlock.Client(bad, "k")
        self.assertEqual(airlock.Client("http://127.0.0.1:7070/", "k").url, "http://127.0.0.1:7070")
        self.assertEqual(airlock.Client("https://[::1]/airlock/", "k").url, "https://[::1]:443/airlock")

    def test_environment(self) -> None:
        with self.assertRaisesRegex(airlock.ConfigError, "AIRLOCK_URL"):
            airlock.Client()
        os.environ[airlock.ENV_URL] = "http://127.0.0.1:7070"
        with self.assertRaisesRegex(airlock.ConfigError, "AIRLOCK_API_KEY"):
            airlock.Client.from_env()
        os.environ[airlock.ENV_KEY] = "airlock_secret123"
        c = airlock.Client()
        self.assertEqual(c.url, "http://127.0.0.1:7070")
        with self.assertRaises(airlock.ConfigError):
            airlock.Client(api_key="two words")

    def test_key_never_shown(self) -> None:
        c = airlock.Client("http://127.0.0.1:7070", "airlock_topsecret")
        for s in (repr(c), str(c), repr(c._transport._key), str(vars(c)), str(vars(c._transport))):
            self.assertNotIn("topsecret", s)
        k = airlock.Key.from_json({"id": "key-1", "role": "agent", "secret": "airlock_topsecret"})
        self.assertEqual(k.secret, "airlock_topsecret")
        self.assertNotIn("topsecret", repr(k))
        self.assertNotIn("topsecret", str(k))

    def test_unreachable(self) -> None:
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        c = airlock.Client(f"http://127.0.0.1:{port}", "k", connect_timeout=2)
        with self.assertRaisesRegex(airlock.ConnectionFailed, "is `airlock serve` running"):
            c.health()


class PackagingTest(unittest.TestCase):
    """The build backend reads pyproject.toml the same with and without
    tomllib (Python 3.10 has none), and the version is the same in both
    places it is written."""

    def test_backend_metadata(self) -> None:
        import importlib.util

        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        spec = importlib.util.spec_from_file_location("airlock_build", os.path.join(root, "build_backend", "airlock_build.py"))
        assert spec is not None and spec.loader is not None
        backend = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(backend)
        with open(os.path.join(root, "pyproject.toml")) as f:
            text = f.read()
        fallback = backend._project_fallback(text)
        self.assertEqual(fallback["version"], airlock.__version__)
        self.assertEqual(fallback["requires-python"], ">=3.10")
        self.assertIn("Typing :: Typed", fallback["classifiers"])
        try:
            import tomllib
        except ImportError:
            return
        self.assertEqual(fallback, tomllib.loads(text)["project"])


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for ti, data in members:
            if data is not None:
                ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return buf


def _entry(name: str, type: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mode = type, linkname, 0o644
    return ti


class ArchiveTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(self.tmp, ignore_errors=True))
        self.dest = os.path.join(self.tmp, "dest")
        self.outside = os.path.join(self.tmp, "outside")
        os.mkdir(self.outside)

    def test_refusals(self) -> None:
        cases: dict[str, list[tuple[tarfile.TarInfo, bytes | None]]] = {
            "absolute": [(_entry("/etc/x"), b"x")],
            "dotdot": [(_entry("a/../../outside/x"), b"x")],
            "absolute symlink": [(_entry("l", tarfile.SYMTYPE, "/etc"), None)],
            "symlink out": [(_entry("l", tarfile.SYMTYPE, "../outside"), None)],
            "symlink out through symlink": [(_entry("a", tarfile.SYMTYPE, "."), None), (_entry("b", tarfile.SYMTYPE, "a/../x"), None)],
            "hard link": [(_entry("h", tarfile.LNKTYPE, "x"), None)],
            "fifo": [(_entry("f", tarfile.FIFOTYPE), None)],
            "file then symlink of the same name": [(_entry("d/f"), b"x"), (_entry("d", tarfile.SYMTYPE, "e"), None)],
        }
        for name, members in cases.items():
            with self.subTest(name):
                with self.assertRaises(airlock.UnsafeArchive):
                    unpack(_tar(*members), self.dest)
                self.assertEqual(os.listdir(self.outside), [])

    def test_no_write_through_existing_symlink(self) -> None:
        os.makedirs(self.dest)
        os.symlink(self.outside, os.path.join(self.dest, "evil"))
        with self.assertRaises(airlock.UnsafeArchive):
            unpack(_tar((_entry("evil/x"), b"x")), self.dest)
        os.symlink(os.path.join(self.outside, "f"), os.path.join(self.dest, "f"))
        with self.assertRaises(airlock.UnsafeArchive):
            unpack(_tar((_entry("f"), b"x")), self.dest)
        self.assertEqual(os.listdir(self.outside), [])

    def test_round_trip(self) -> None:
        src = os.path.join(self.tmp, "src")
        os.makedirs(os.path.join(src, "sub", "deeper"))
        with open(os.path.join(src, "sub", "deeper", "a.txt"), "w") as f:
            f.write("a")
        with open(os.path.join(src, "run.sh"), "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(os.path.join(src, "run.sh"), 0o755)
        os.symlink("sub/deeper/a.txt", os.path.join(src, "link"))
        buf = io.BytesIO()
        self.assertEqual(pack_dir(src, buf), 5)
        buf.seek(0)
        self.assertEqual(unpack(buf, self.dest), 5)
        with open(os.path.join(self.dest, "link")) as f:
            self.assertEqual(f.read(), "a")
        self.assertEqual(os.readlink(os.path.join(self.dest, "link")), "sub/deeper/a.txt")
        self.assertEqual(os.stat(os.path.join(self.dest, "run.sh")).st_mode & 0o777, 0o755)

    def test_pack_refuses_special_files(self) -> None:
        os.mkfifo(os.path.join(self.outside, "fifo"))
        with self.assertRaisesRegex(ValueError, "FIFO"):
            pack_dir(self.outside, io.BytesIO())


if __name__ == "__main__":
    unittest.main()
