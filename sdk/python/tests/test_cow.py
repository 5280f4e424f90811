"""Copy-on-write mounts against a real daemon: a sandbox edits a host
project, the SDK reviews, applies (a subset, a conflict) and discards; a
mount whose changes only an operator may decide."""

from __future__ import annotations

import os
import unittest

import airlock

from .daemon import DaemonTest


def _write(path: str, content: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(content)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


class CowTest(DaemonTest):
    def test_review_apply_discard(self) -> None:
        project = self.daemon.project
        _write(os.path.join(project, "a.txt"), "one\ntwo\n")
        _write(os.path.join(project, "b.txt"), "b\n")
        with self.assertRaises(airlock.Denied):
            self.sandbox(mounts=["/etc:/w:cow"])
        sb = self.sandbox(mounts=[airlock.Mount(project, "/w", cow=True)])
        sb.exec("cd /w && printf 'one\\nTWO\\n' > a.txt && echo sb > b.txt && echo new > c.txt && ln -s /etc/hosts s && echo w > ww && chmod 666 ww")
        self.assertEqual(_read(os.path.join(project, "a.txt")), "one\ntwo\n")

        (m,) = sb.changes()
        self.assertEqual((m.target, m.source, m.approval), ("/w", project, False))
        kinds = {c.path: c.kind for c in m.changes}
        self.assertEqual(kinds, {"/w/a.txt": "modified", "/w/b.txt": "modified", "/w/c.txt": "added", "/w/s": "added", "/w/ww": "added"})
        by = {c.path: c for c in m.changes}
        self.assertIn("-two\n+TWO\n", by["/w/a.txt"].unified)
        self.assertIn("absolute path", by["/w/s"].refused)

        # What the reviewer saw, by entry: a rewrite since is a conflict.
        shown = m.reviewed()
        self.assertTrue(all(v.startswith("entry:sha256:") for v in shown.values()), shown)
        self.assertIn("world-writable", by["/w/ww"].warning)
        sb.exec("echo sneaky > /w/c.txt")
        with self.assertRaises(airlock.ApplyConflict) as cm:
            sb.apply_changes(["a.txt", "c.txt"], expect={"/w/a.txt": shown["/w/a.txt"], "/w/c.txt": shown["/w/c.txt"]})
        self.assertEqual([p for p, _ in cm.exception.conflicts], ["/w/c.txt"])
        # So is a mode changed since (N3 of the second security review).
        sb.exec("chmod 4777 /w/a.txt")
        with self.assertRaises(airlock.ApplyConflict) as cm:
            sb.apply_changes(["a.txt"], expect={"a.txt": shown["/w/a.txt"]})
        self.assertEqual(len(cm.exception.conflicts), 1)
        self.assertIn("mode 4777", cm.exception.conflicts[0][1])
        sb.exec("chmod 644 /w/a.txt && echo new > /w/c.txt")
        r = sb.apply_changes(["a.txt", "/w/c.txt"], expect={"a.txt": shown["/w/a.txt"], "c.txt": shown["/w/c.txt"]})
        self.assertEqual(sorted(a.path for a in r.applied), ["/w/a.txt", "/w/c.txt"])
        self.assertTrue(all(a.digest.startswith("sha256:") for a in r.applied))
        self.assertEqual(_read(os.path.join(project, "a.txt")), "one\nTWO\n")
        self.assertEqual(_read(os.path.join(project, "c.txt")), "new\n")

        # The host edits b.txt meanwhile: nothing applies.
        _write(os.path.join(project, "b.txt"), "host\n")
        with self.assertRaises(airlock.ApplyConflict) as cm:
            sb.apply_changes()
        self.assertEqual([p for p, _ in cm.exception.conflicts], ["/w/b.txt"])
        self.assertIn("nothing was applied", cm.exception.message)

        d = sb.discard_changes(["b.txt"])
        self.assertEqual(d.discarded, ("/w/b.txt",))
        r = sb.apply_changes()
        self.assertEqual(([a.path for a in r.applied], [p for p, _ in r.refused]), (["/w/ww"], ["/w/s"]))
        self.assertEqual(os.stat(os.path.join(project, "ww")).st_mode & 0o7777, 0o644)
        self.assertFalse(os.path.lexists(os.path.join(project, "s")))
        self.assertEqual(_read(os.path.join(project, "b.txt")), "host\n")
        with self.assertRaises(airlock.InvalidRequest):
            sb.apply_changes(["../../etc/passwd"])

    def test_operator_decides(self) -> None:
        gated = self.daemon.gated
        _write(os.path.join(gated, "prod.conf"), "live=1\n")
        sb = self.sandbox(mounts=["%s:/prod:cow" % gated])
        sb.exec("echo live=0 > /prod/prod.conf")
        (m,) = sb.changes()
        self.assertTrue(m.approval)
        with self.assertRaises(airlock.ApprovalRequired) as cm:
            sb.apply_changes()
        self.assertIn("operator must decide", cm.exception.message)
        with self.assertRaises(airlock.ApprovalRequired):
            sb.discard_changes()
        with self.assertRaises(airlock.Forbidden):
            self.agent.pending_changes()
        pending = [p for p in self.operator.pending_changes() if p.sandbox == sb.id]
        self.assertEqual(len(pending), 1)
        self.assertEqual((pending[0].target, pending[0].count, pending[0].approval, pending[0].key_name), ("/prod", 1, True, "agent"))
        r = self.operator.sandbox(sb.id).apply_changes()
        self.assertEqual([a.path for a in r.applied], ["/prod/prod.conf"])
        self.assertEqual(_read(os.path.join(gated, "prod.conf")), "live=0\n")

    def test_no_cow_mount(self) -> None:
        sb = self.sandbox()
        self.assertEqual(sb.changes(), [])
        with self.assertRaises(airlock.NotFound):
            sb.apply_changes()
        with self.assertRaises(ValueError):
            sb.apply_changes("a.txt")  # type: ignore[arg-type]


if __name__ == "__main__":
    unittest.main()
