"""The README's five things and examples/agent_loop.py, run as a user would
run them: as scripts, with AIRLOCK_URL and AIRLOCK_API_KEY set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import unittest

from .daemon import DaemonTest

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "README.md")
EXAMPLE = os.path.join(HERE, "..", "examples", "agent_loop.py")


def five_things() -> str:
    """The Python blocks of the README's "five things" section, in order."""
    with open(README) as f:
        text = f.read()
    section = text.split("## The five things", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    if len(blocks) != 5:
        raise AssertionError(f"the README's five things have {len(blocks)} Python blocks")
    return "\n".join(blocks)


class ReadmeTest(DaemonTest):
    def run_script(self, args: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, AIRLOCK_URL=self.daemon.url, AIRLOCK_API_KEY=self.daemon.keys["agent2"])
        p = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            self.fail(f"{args} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p

    def test_five_things(self) -> None:
        with tempfile.TemporaryDirectory() as cwd:
            os.mkdir(os.path.join(cwd, "project"))
            with open(os.path.join(cwd, "project", "main.py"), "w") as f:
                f.write("print('project ran')\n")
            with open(os.path.join(cwd, "readme.py"), "w") as f:
                f.write(five_things())
            out = self.run_script(["readme.py"], cwd).stdout
            with open(os.path.join(cwd, "project-out", "out.txt")) as f:
                self.assertEqual(f.read(), "project ran\n")
        for want in ("45\n 0 exit", "timeout ('timeout',) timed out", "hello from main", "step 2", "refused by check:destructive_delete", "destroyed"):
            self.assertIn(want, out)

    def test_agent_loop_example(self) -> None:
        with tempfile.TemporaryDirectory() as cwd:
            out = self.run_script([EXAMPLE], cwd).stdout
        self.assertIn("3 rows; columns: ['region', 'amount']", out)
        self.assertIn("NOT RUN: the sandbox's policy refused this (check:destructive_delete)", out)
        self.assertIn("exit code -1 (timeout)", out)
        self.assertIn('report.json: {"rows": 3, "total": 242.75}', out)
        # The example's sandbox is gone.
        ids = re.findall(r"sandbox (sb-\w+)", out)
        self.assertEqual(len(ids), 1)
        self.assertEqual(self.operator.get_sandbox(ids[0]).info.state, "destroyed")  # type: ignore[union-attr]


if __name__ == "__main__":
    unittest.main()
