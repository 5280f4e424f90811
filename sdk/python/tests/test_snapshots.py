"""Snapshots against a real daemon: take, list, diff, restore, fork,
transactional commands and checkpoints."""

from __future__ import annotations

import unittest

import airlock

from .daemon import DaemonTest


class SnapshotTest(DaemonTest):
    def test_snapshot_diff_restore_fork(self) -> None:
        sb = self.sandbox()
        sb.exec("mkdir -p app && printf 'x = 1\\n' > app/main.py && ln -s main.py app/link")
        snap = sb.snapshot("base", label="before the edit")
        self.assertTrue(snap.id.startswith("sn-"))
        self.assertEqual((snap.name, snap.label, snap.files, snap.kind), ("base", "before the edit", 1, "manual"))
        self.assertIn("running processes are not part", snap.note)
        with self.assertRaises(airlock.InvalidRequest):
            sb.snapshot("../../etc")
        with self.assertRaises(airlock.Exists):
            sb.snapshot("base")

        sb.exec("printf 'x = 2\\n' > app/main.py && touch app/new && chmod 700 app")
        d = sb.diff("base")
        self.assertEqual((d.from_, d.to, d.added, d.modified, d.other), (snap.id, "now", 1, 1, 1))
        mod = [c for c in d.changes if c.kind == "modified"][0]
        self.assertEqual(mod.path, "/workspace/app/main.py")
        self.assertIn("-x = 1\n+x = 2\n", mod.unified)
        self.assertIn("modified /workspace/app/main.py", sb.diff_text())

        r = sb.restore("base")
        self.assertEqual((r.snapshot.id, r.removed), (snap.id, 1))
        self.assertEqual(sb.exec("cat app/main.py; ls app; stat -c %a app").stdout_text, "x = 1\nlink\nmain.py\n755\n")

        self.assertIn(snap.id, [s.id for s in sb.snapshots()])
        self.assertIn(snap.id, [s.id for s in self.agent.list_snapshots(sandbox=sb.id)])
        got = self.agent.get_snapshot(snap.id, tree=True)
        self.assertIn("/workspace/app/link", [e.path for e in got.tree])

        fork = self.paced(lambda: sb.fork("base"))
        self.addCleanup(fork.kill)
        self.assertNotEqual(fork.id, sb.id)
        self.assertEqual(fork.exec("cat app/main.py").stdout_text, "x = 1\n")

        # Another key cannot fork it.
        with self.daemon.client("agent2") as other:
            with self.assertRaises(airlock.Forbidden):
                other.fork(snap.id)
        self.agent.delete_snapshot(snap.id)
        with self.assertRaises(airlock.NotFound):
            self.agent.get_snapshot(snap.id)

    def test_rollback_and_checkpoints(self) -> None:
        sb = self.sandbox(checkpoints=3)
        self.assertEqual(sb.info.checkpoints if sb.info else 0, 3)
        sb.exec("echo v1 > f")
        r = sb.exec("echo broken > f; touch junk; exit 2", rollback="on_failure")
        self.assertEqual(r.exit_code, 2)
        assert r.rollback is not None
        self.assertTrue(r.rollback.rolled_back)
        self.assertEqual((r.rollback.why, r.rollback.added, r.rollback.changed), ("exit code 2", 1, 1))
        self.assertEqual(sb.exec("cat f; ls").stdout_text, "v1\nf\n")
        ok = sb.exec("echo v2 > f", rollback="on_failure")
        assert ok.rollback is not None
        self.assertFalse(ok.rollback.rolled_back)
        with self.assertRaises(ValueError):
            sb.exec("true", rollback="always")
        sb.exec("echo v3 > f")
        # Step 4 (echo v2) changed f from v1 to v2.
        d = sb.diff(step=4)
        self.assertEqual(d.modified, 1)
        self.assertIn("-v1\n+v2\n", d.changes[0].unified)
        sb.restore(undo_steps=2)
        self.assertEqual(sb.exec("cat f").stdout_text, "v1\n")


if __name__ == "__main__":
    unittest.main()
