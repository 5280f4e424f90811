#!/usr/bin/env python3
"""An agent loop on airlock: the model proposes code, the sandbox runs it,
and the model sees what happened (output, exit, limits, denials) as text.

Run it against a daemon:

    export AIRLOCK_URL=http://127.0.0.1:7070 AIRLOCK_API_KEY=airlock_...
    python3 examples/agent_loop.py

The "model" here is a script of steps so that the example runs anywhere;
replace ScriptedModel.next_step with a call to your model. Everything else
is what a real loop keeps: one sandbox across steps, files in and out,
denials told to the model, a time limit per step, and cleanup however the
loop ends.
"""

from __future__ import annotations

import os
import sys
import tempfile

import airlock

MAX_STEPS = 10
MAX_OBSERVATION = 4000  # characters of output the model is shown


def observe(sb: airlock.Sandbox, code: str, language: str = "python", timeout: float = 20) -> str:
    """Runs one step's code and says what happened, in words a model can act on."""
    try:
        r = sb.run_code(code, language, timeout=timeout)
    except airlock.Denied as e:
        # Nothing ran: the policy refused it. The reason is meant for the model.
        return f"NOT RUN: the sandbox's policy refused this ({e.rule}): {e.reason}. Do it another way."
    except airlock.RateLimited as e:
        return f"NOT RUN: too many requests; wait {e.retry_after or 1:.0f} s and try again."
    lines = [f"exit code {r.exit_code} ({r.reason})"]
    if r.message:
        lines.append(r.message)  # e.g. "timed out after 20s; ... raise the timeout"
    if r.limits_hit:
        lines.append("limits reached: " + ", ".join(r.limits_hit))
    for name, text, cut in (("stdout", r.stdout_text, r.stdout_truncated), ("stderr", r.stderr_text, r.stderr_truncated)):
        if text:
            shown = text[-MAX_OBSERVATION:]
            more = " (cut by the sandbox)" if cut else ""
            lines.append(f"{name}{more}:\n{shown}" if len(shown) == len(text) else f"{name} (last {len(shown)} characters){more}:\n{shown}")
    return "\n".join(lines)


class ScriptedModel:
    """Stands in for a model: proposes a fixed sequence of steps."""

    def __init__(self) -> None:
        self.steps = [
            ("python", "import csv\nrows = list(csv.DictReader(open('data/sales.csv')))\nprint(len(rows), 'rows;', 'columns:', list(rows[0]))"),
            (
                "python",
                "import csv, json\n"
                "rows = list(csv.DictReader(open('data/sales.csv')))\n"
                "total = sum(float(r['amount']) for r in rows)\n"
                "json.dump({'rows': len(rows), 'total': total}, open('report.json', 'w'))\n"
                "print('total', total)",
            ),
            ("bash", "rm -rf /workspace"),  # the policy refuses this; the model is told why
            ("bash", "rm -f /workspace/data/sales.csv && ls /workspace"),
            ("python", "while True: pass"),  # runs into the step's time limit
        ]

    def next_step(self, history: list[tuple[str, str]]) -> tuple[str, str] | None:
        """Returns (language, code), or None when done. A real model gets the
        history of (code, observation) pairs in its prompt."""
        return self.steps[len(history)] if len(history) < len(self.steps) else None


def main() -> int:
    client = airlock.Client()  # AIRLOCK_URL and AIRLOCK_API_KEY
    model = ScriptedModel()
    history: list[tuple[str, str]] = []
    # The sandbox lives across steps and is killed when the block ends,
    # also on an exception or Ctrl-C. ttl bounds it even if this process dies.
    with client.create_sandbox(ttl=15 * 60) as sb:
        print(f"sandbox {sb.id}")
        # Files in: the task's input.
        sb.write_file("data/sales.csv", "region,amount\nnorth,120.5\nsouth,80\neast,42.25\n", parents=True)
        for _ in range(MAX_STEPS):
            step = model.next_step(history)
            if step is None:
                break
            language, code = step
            obs = observe(sb, code, language, timeout=3)
            history.append((code, obs))
            print(f"\n--- step {len(history)} ({language})\n{code}\n>>> {obs}")
        # Files out: what the agent made.
        out = tempfile.mkdtemp(prefix="agent-out-")
        sb.download_file("report.json", os.path.join(out, "report.json"))
        with open(os.path.join(out, "report.json")) as f:
            print(f"\nreport.json: {f.read()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
