"""Sandboxes against a real daemon: create with options, get, list, extend,
kill, and the context manager's cleanup."""

from __future__ import annotations

import io
import logging
import os
import unittest
from datetime import datetime, timedelta, timezone

import airlock

from .daemon import DaemonTest


class SandboxTest(DaemonTest):
    def test_create_with_options(self) -> None:
        sb = self.sandbox(
            template="default",
            limits=airlock.Limits(memory_bytes=128 << 20, pids=32, timeout_ms=5000),
            env={"GREETING": "hello"},
            ttl=120,
            idle_timeout=60,
        )
        info = sb.info
        assert info is not None
        self.assertTrue(sb.id.startswith("sb-"))
        self.assertEqual((info.state, info.template, info.driver), ("running", "default", "native"))
        self.assertEqual((info.limits.memory_bytes, info.limits.pids, info.limits.timeout_ms), (128 << 20, 32, 5000))
        self.assertEqual(info.idle_timeout_seconds, 60)
        self.assertIn("seccomp", info.layers)
        assert info.expires_at is not None and info.created_at is not None
        self.assertAlmostEqual((info.expires_at - info.created_at).total_seconds(), 120, delta=2)
        self.assertEqual(sb.exec("echo $GREETING").stdout_text, "hello\n")

    def test_get_list_extend_kill(self) -> None:
        sb = self.create(ttl=60)
        self.addCleanup(sb.kill)
        got = self.agent.get_sandbox(sb.id)
        self.assertEqual(got, sb)
        self.assertEqual(got.info, sb.info)
        self.assertIn(sb.id, [s.id for s in self.agent.list_sandboxes()])
        self.assertIn(sb.id, [s.id for s in self.agent.list_sandboxes(state="running", template="default")])
        self.assertNotIn(sb.id, [s.id for s in self.agent.list_sandboxes(state="destroyed")])
        # An operator sees every key's sandboxes; another agent key none of them.
        self.assertIn(sb.id, [s.id for s in self.operator.list_sandboxes()])
        with self.daemon.client("agent2") as other:
            self.assertNotIn(sb.id, [s.id for s in other.list_sandboxes()])
            with self.assertRaises((airlock.Forbidden, airlock.NotFound)):
                other.sandbox(sb.id).exec(["true"])

        info = sb.extend(600)
        assert info.expires_at is not None
        self.assertGreater(info.expires_at, datetime.now(timezone.utc) + timedelta(seconds=590))

        # A handle made from the id alone works across an agent's steps.
        later = self.agent.sandbox(sb.id)
        self.assertIsNone(later.info)
        self.assertEqual(later.exec(["echo", "still here"]).stdout, b"still here\n")
        self.assertEqual(later.refresh().state, "running")

        sb.kill()
        info = sb.refresh()
        self.assertEqual((info.state, info.end_reason, info.live), ("destroyed", "deleted", False))
        self.assertIsNotNone(info.ended_at)
        sb.kill()  # killing an ended sandbox is no error
        with self.assertRaises(airlock.NotRunning):
            sb.exec(["true"])

    def test_context_manager_kills(self) -> None:
        with self.create() as sb:
            self.assertEqual(sb.exec(["true"]).exit_code, 0)
        self.assertEqual(sb.refresh().state, "destroyed")

    def test_context_manager_kills_after_an_exception(self) -> None:
        with self.assertRaisesRegex(RuntimeError, "the agent's step failed"):
            with self.create() as sb:
                sb.start_process(["sleep", "60"])
                raise RuntimeError("the agent's step failed")
        info = sb.refresh()
        self.assertEqual((info.state, info.end_reason), ("destroyed", "deleted"))
        self.assertNotIn(sb.id, [s.id for s in self.agent.list_sandboxes(state="running")])
        # Also on KeyboardInterrupt, which is no Exception.
        with self.assertRaises(KeyboardInterrupt):
            with self.create() as sb2:
                raise KeyboardInterrupt
        self.assertEqual(sb2.refresh().state, "destroyed")

    def test_from_environment(self) -> None:
        saved = {k: os.environ.get(k) for k in (airlock.ENV_URL, airlock.ENV_KEY)}

        def restore() -> None:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

        self.addCleanup(restore)
        os.environ[airlock.ENV_URL] = self.daemon.url
        os.environ[airlock.ENV_KEY] = self.daemon.keys["agent"]
        with airlock.Client() as c:
            self.assertEqual(c.health().status, "ok")
            self.assertIsInstance(c.list_sandboxes(), list)

    def test_no_secret_in_logs_or_reprs(self) -> None:
        buf = io.StringIO()
        handler = logging.StreamHandler(buf)
        logger = logging.getLogger("airlock")
        logger.addHandler(handler)
        old = logger.level
        logger.setLevel(logging.DEBUG)
        self.addCleanup(logger.setLevel, old)
        self.addCleanup(logger.removeHandler, handler)
        key = self.operator.create_key("throwaway")
        self.assertTrue(key.secret.startswith("airlock_"))
        with airlock.Client(self.daemon.url, key.secret) as c:
            with self.create(c) as sb:
                sb.exec(["true"])
            texts = [repr(c), str(c), repr(sb), repr(key), str(key), repr(c.list_sandboxes())]
        self.operator.delete_key(key.id)
        with airlock.Client(self.daemon.url, key.secret) as c:
            with self.assertRaises(airlock.Unauthorized) as cm:
                c.list_sandboxes()
            texts += [str(cm.exception), repr(cm.exception)]
        self.assertIn("GET /v1/sandboxes -> 401", buf.getvalue())
        for t in texts + [buf.getvalue()]:
            self.assertNotIn(key.secret, t)
            self.assertNotIn(key.secret[len("airlock_") :][:12], t)
        for name in ("agent", "operator"):
            self.assertNotIn(self.daemon.keys[name], buf.getvalue())


if __name__ == "__main__":
    unittest.main()
