"""Live fork through the SDK: the test daemon's driver (native) has no
live fork, and says why; the sandbox runs on."""

from __future__ import annotations

import airlock

from .daemon import DaemonTest


class LiveForkTest(DaemonTest):
    def test_refused_with_reason(self) -> None:
        sb = self.sandbox()
        with self.assertRaises(airlock.Unsupported) as cm:
            sb.fork_live(2)
        self.assertEqual((cm.exception.code, cm.exception.status), ("unsupported", 501))
        self.assertIn("native", cm.exception.message)
        self.assertEqual(sb.exec(["true"]).exit_code, 0)
