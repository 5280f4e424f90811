"""Commands against a real daemon: results, streaming, stdin, timeouts,
limits, background processes."""

from __future__ import annotations

import signal
import time
import unittest

import airlock

from .daemon import DaemonTest


class ExecTest(DaemonTest):
    sb: airlock.Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.sb = cls.create()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sb.kill()
        super().tearDownClass()

    def test_result(self) -> None:
        r = self.sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.reason, r.ok), (b"out\n", b"err\n", 3, "exit", False))
        self.assertEqual((r.signal, r.limits_hit, r.stdout_truncated), ("", (), False))
        self.assertGreater(r.usage.memory_peak_bytes, 0)
        self.assertEqual(r.usage.bytes_written, 8)
        r = self.sb.run_code("import sys; print(6 * 7); print('é', file=sys.stderr)")
        self.assertTrue(r.ok)
        self.assertEqual((r.stdout_text, r.stderr_text), ("42\n", "é\n"))
        r = self.sb.run_code("echo $0 $BASH_VERSION | cut -c1-4", "bash")
        self.assertTrue(r.stdout_text.startswith("bash"), r)
        # Bytes that are not UTF-8 come back exactly.
        self.assertEqual(self.sb.exec(["printf", "\\377\\376"]).stdout, b"\xff\xfe")

    def test_env_cwd_stdin(self) -> None:
        self.sb.mkdir("/workspace/sub")
        r = self.sb.exec(["sh", "-c", 'echo "$A $B"; pwd; cat'], env={"A": "1", "B": "two words"}, cwd="/workspace/sub", stdin="piped in")
        self.assertEqual(r.stdout_text, "1 two words\n/workspace/sub\npiped in")
        self.assertEqual(self.sb.exec(["wc", "-c"], stdin=b"\x00" * 100000).stdout_text.strip(), "100000")

    def test_timeout(self) -> None:
        start = time.monotonic()
        r = self.sb.exec(["sleep", "30"], timeout=0.5)
        self.assertLess(time.monotonic() - start, 10)
        self.assertEqual((r.reason, r.exit_code, r.signal), ("timeout", -1, "SIGKILL"))
        self.assertIn("timeout", r.limits_hit)
        self.assertIn("timed out", r.message)
        self.assertGreaterEqual(r.usage.wall_ms, 450)

    def test_limits(self) -> None:
        sb = self.sandbox(limits=airlock.Limits(memory_bytes=64 << 20, output_bytes=1000))
        r = sb.run_code("b = bytearray(400 << 20)")
        self.assertEqual(r.reason, "oom", r)
        self.assertIn("memory", r.limits_hit)
        self.assertIn("memory", r.message)
        r = sb.run_code("print('x' * 10000)")
        self.assertEqual(r.reason, "output_limit", r)
        self.assertTrue(r.stdout_truncated)
        self.assertLessEqual(len(r.stdout), 1000)

    def test_stream_iterator(self) -> None:
        stream = self.sb.exec_events(["sh", "-c", "echo first; sleep 1.5; echo second >&2; exit 4"])
        seen = []
        with stream:
            for ev in stream:
                seen.append((time.monotonic(), ev))
        self.assertEqual([(e.type, e.data) for _, e in seen], [("stdout", b"first\n"), ("stderr", b"second\n"), ("result", b"")])
        # The first line arrived while the command was still running.
        self.assertGreater(seen[-1][0] - seen[0][0], 1.0)
        assert stream.result is not None
        self.assertEqual((stream.result.exit_code, stream.result.reason), (4, "exit"))
        self.assertIs(seen[-1][1].result, stream.result)
        # Code streams too.
        events = list(self.sb.exec_events(code="print('hi')"))
        self.assertEqual(events[0].text, "hi\n")

    def test_stream_callbacks(self) -> None:
        got: list[tuple[float, str, bytes]] = []
        r = self.sb.exec(
            "echo one; sleep 1.5; echo two; echo oops >&2",
            on_stdout=lambda b: got.append((time.monotonic(), "out", b)),
            on_stderr=lambda b: got.append((time.monotonic(), "err", b)),
        )
        end = time.monotonic()
        # Each stream is in order; the two are not ordered with each other.
        self.assertEqual([b for _, k, b in got if k == "out"], [b"one\n", b"two\n"])
        self.assertEqual([b for _, k, b in got if k == "err"], [b"oops\n"])
        self.assertGreater(end - got[0][0], 1.0)
        self.assertEqual((r.stdout, r.stderr, r.ok), (b"one\ntwo\n", b"oops\n", True))

    def test_closing_a_stream_kills_the_command(self) -> None:
        self.sb.remove("/workspace/marker") if self.sb.exists("/workspace/marker") else None
        with self.sb.exec_events("echo started; sleep 1.5; echo late > /workspace/marker") as stream:
            first = next(stream)
            self.assertEqual(first.data, b"started\n")
            # The first event named the exec: it outlives a broken stream,
            # so closing the stream kills it by that id.
            self.assertTrue(stream.id.startswith("e"), stream.id)
        self.assertIsNone(stream.result)
        time.sleep(2.5)
        self.assertFalse(self.sb.exists("/workspace/marker"))

        # A callback's error stops the command and comes out of exec.
        def stop(_: bytes) -> None:
            raise ValueError("enough")

        with self.assertRaisesRegex(ValueError, "enough"):
            self.sb.exec("echo go; sleep 1.5; echo late > /workspace/marker", on_stdout=stop)
        time.sleep(2.5)
        self.assertFalse(self.sb.exists("/workspace/marker"))

    def test_background_processes(self) -> None:
        cat = self.sb.start_process(["cat"], keep_stdin_open=True)
        self.assertTrue(cat.id)
        self.assertTrue(cat.running)
        self.assertEqual(cat.argv, ("cat",))
        cat.write_stdin("hello ")
        cat.write_stdin(b"world", eof=True)
        cat.wait(timeout=20)
        self.assertFalse(cat.running)
        assert cat.result is not None
        self.assertTrue(cat.result.ok)
        self.assertEqual(cat.stdout, b"hello world")

        sleeper = self.sb.start_process("sleep 60")
        self.assertTrue(sleeper.wait(timeout=0.2).running)
        self.assertIn(sleeper.id, [p.id for p in self.sb.list_processes() if p.running])
        sleeper.signal(signal.SIGTERM)
        sleeper.wait(timeout=20)
        assert sleeper.result is not None
        self.assertEqual(sleeper.result.signal, "SIGTERM")

        py = self.sb.start_process(code="import sys; print(sys.stdin.read().upper())", stdin="abc")
        self.assertEqual(self.sb.process(py.id).wait(timeout=20).stdout, b"ABC\n")
        listed = {p.id: p for p in self.sb.list_processes()}
        self.assertFalse(listed[py.id].running)

        with self.assertRaises(airlock.InvalidRequest):
            self.sb.start_process(["sleep", "60"]).signal("NOT-A-SIGNAL")
        with self.assertRaises(airlock.NotFound):
            self.sb.process("p-doesnotexist").wait(timeout=1)


if __name__ == "__main__":
    unittest.main()
