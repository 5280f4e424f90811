"""The policy against a real daemon: denials with their rule, the approval
flow with operator keys, and the egress summary."""

from __future__ import annotations

import threading
import time
import unittest
from typing import Any, Callable

import airlock

from .daemon import DaemonTest


class Background:
    """Runs fn in a thread and keeps its result or error."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._t = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._t.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e

    def join(self, timeout: float = 60) -> Any:
        self._t.join(timeout)
        if self._t.is_alive():
            raise AssertionError("the call did not return")
        return self.result


class PolicyTest(DaemonTest):
    def pending_for(self, sandbox_id: str, timeout: float = 30) -> airlock.Approval:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for a in self.operator.list_approvals(pending_only=True):
                if a.sandbox == sandbox_id:
                    return a
            time.sleep(0.1)
        raise AssertionError(f"no approval of {sandbox_id} became pending; daemon log:\n{self.daemon.log()[-3000:]}")

    def test_denials_name_their_rule(self) -> None:
        sb = self.sandbox()
        with self.assertRaises(airlock.Denied) as cm:
            sb.exec(["curl", "-s", "https://example.com/"])
        self.assertEqual(cm.exception.rule, "rule:no-curl")
        self.assertIn("use python's urllib", cm.exception.reason)
        with self.assertRaises(airlock.Denied) as cm:
            sb.write_file("/workspace/secrets/token", "x")
        self.assertEqual((cm.exception.rule, cm.exception.reason), ("rule:no-secrets-dir", "nothing may be written under /workspace/secrets"))
        self.assertFalse(sb.exists("/workspace/secrets/token"))
        # A built-in check of the verifier.
        with self.assertRaises(airlock.Denied) as cm:
            sb.exec(["rm", "-rf", "/"])
        self.assertEqual(cm.exception.rule, "check:destructive_delete")
        # The sandbox goes on after a denial.
        self.assertTrue(sb.exec(["true"]).ok)

    def test_approval_approved(self) -> None:
        sb = self.sandbox()
        call = Background(lambda: sb.run_code("print('DEPLOY done')"))
        a = self.pending_for(sb.id)
        self.assertEqual((a.state, a.rule, a.why), ("pending", "rule:deploy-needs-a-person", "deploying needs a person's approval"))
        self.assertEqual(a.request.get("action"), "exec")
        self.assertIn("DEPLOY", a.request.get("code", ""))
        self.assertTrue(a.id.startswith("ap-"))
        assert a.expires is not None and a.created is not None
        self.assertGreater(a.expires, a.created)
        # The agent key can neither see nor decide approvals.
        with self.assertRaises(airlock.Forbidden):
            self.agent.approve(a.id)
        self.assertIsNone(call.result)

        decided = self.operator.approve(a.id, "looks fine")
        self.assertEqual((decided.state, decided.reason), ("approved", "looks fine"))
        self.assertTrue(decided.decided_by)
        r = call.join()
        self.assertIsNone(call.error)
        self.assertTrue(r.ok, r)
        self.assertEqual(r.stdout_text, "DEPLOY done\n")
        # It is no longer pending, and deciding again says so.
        with self.assertRaises(airlock.NotFound):
            self.operator.deny(a.id)
        recent = {x.id: x for x in self.operator.list_approvals()}
        self.assertEqual(recent[a.id].state, "approved")
        # The audit log recorded the decision.
        events = self.operator.audit_events(200)
        self.assertTrue(any(e.get("approval") == a.id for e in events), events[-5:])

    def test_approval_denied(self) -> None:
        sb = self.sandbox()
        call = Background(lambda: sb.exec_events(code="print('DEPLOY now')"))
        a = self.pending_for(sb.id)
        self.operator.deny(a.id, "not on a Friday")
        call.join()
        e = call.error
        self.assertIsInstance(e, airlock.Denied)
        assert isinstance(e, airlock.Denied)
        self.assertEqual(e.rule, "rule:deploy-needs-a-person")
        self.assertEqual((e.approval_id, e.approval_state), (a.id, "denied"))
        self.assertIn("not on a Friday", e.reason)

    def test_the_key_that_asked_cannot_decide(self) -> None:
        sb = self.sandbox(self.operator)
        call = Background(lambda: sb.run_code("print('DEPLOY by an operator')"))
        a = self.pending_for(sb.id)
        with self.assertRaises(airlock.Forbidden) as cm:
            self.operator.approve(a.id)
        self.assertIn("cannot approve", cm.exception.message)
        with self.daemon.client("operator2") as other:
            other.approve(a.id)
        self.assertTrue(call.join().ok)

    def test_egress_summary(self) -> None:
        port = self.daemon.web_port
        sb = self.sandbox(template="egress", network=airlock.Network(allow_hosts=["*.example.com"], allow_addresses=[f"127.0.0.1:{port}"]))
        fetch = (
            "import sys, urllib.request, urllib.error\n"
            "for url in sys.argv[1:]:\n"
            "    try:\n"
            "        print(urllib.request.urlopen(url, timeout=20).read().decode().strip())\n"
            "    except urllib.error.HTTPError as e:\n"
            "        print(e.code, e.read().decode().strip())\n"
        )
        sb.write_file("fetch.py", fetch)
        # NO_PROXY names 127.0.0.1 in the sandbox; this request must go
        # through the proxy to reach the host's 127.0.0.1.
        r = sb.exec(["python3", "fetch.py", f"http://127.0.0.1:{port}/", "http://not-allowed.invalid/"], env={"NO_PROXY": "", "no_proxy": ""})
        self.assertTrue(r.ok, r)
        lines = r.stdout_text.splitlines()
        self.assertEqual(lines[0], "hello from the host")
        self.assertTrue(lines[1].startswith("403 airlock egress"), lines)
        s = sb.egress()
        self.assertEqual((s.sandbox_id, s.mode, s.requests, s.allowed, s.denied), (sb.id, "enforce", 2, 1, 1))
        host = s.host("not-allowed.invalid")
        assert host is not None
        self.assertEqual((host.allowed, host.denied), (0, 1))
        self.assertGreater(s.bytes_received, 0)
        # Asking for more than the template's network is refused.
        with self.assertRaisesRegex(airlock.InvalidRequest, "does not allow it"):
            self.paced(lambda: self.agent.create_sandbox(template="egress", network=airlock.Network(allow_hosts=["pypi.org"])))
        # A sandbox without network has no summary.
        with self.assertRaises(airlock.NotFound):
            self.sandbox().egress()

    def test_network_secrets_and_rules(self) -> None:
        port = self.daemon.web_port
        addr = [f"127.0.0.1:{port}"]
        show = ["python3", "-c", "import os; print(os.environ.get('AIRLOCK_SECRET_TOKEN', 'none'))"]
        # Left out, the template's secret: the sandbox sees its placeholder.
        r = self.sandbox(template="egress").exec(show)
        self.assertTrue(r.stdout_text.startswith("airlock-placeholder-token-"), r)
        r = self.sandbox(template="egress", network=airlock.Network(allow_addresses=addr)).exec(show)
        self.assertTrue(r.stdout_text.startswith("airlock-placeholder-token-"), r)
        # [] is none of them.
        r = self.sandbox(template="egress", network=airlock.Network(allow_addresses=addr, secrets=[])).exec(show)
        self.assertEqual(r.stdout_text.strip(), "none")
        # One the template does not name is refused.
        with self.assertRaisesRegex(airlock.InvalidRequest, "does not allow it"):
            self.paced(lambda: self.agent.create_sandbox(template="egress", network=airlock.Network(allow_addresses=addr, secrets=["OTHER"])))
        # A create's own method and path rule narrows what the sandbox may send.
        sb = self.sandbox(template="egress", network=airlock.Network(allow_addresses=addr, rules=[airlock.HostRule("127.0.0.1", deny=["GET /private/**"])]))
        fetch = (
            "import sys, urllib.request, urllib.error\n"
            "for url in sys.argv[1:]:\n"
            "    try:\n"
            "        print(urllib.request.urlopen(url, timeout=20).read().decode().strip())\n"
            "    except urllib.error.HTTPError as e:\n"
            "        print(e.code, e.read().decode().strip())\n"
        )
        sb.write_file("fetch.py", fetch)
        r = sb.exec(["python3", "fetch.py", f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{port}/private/x"], env={"NO_PROXY": "", "no_proxy": ""})
        self.assertTrue(r.ok, r)
        lines = r.stdout_text.splitlines()
        self.assertEqual(lines[0], "hello from the host")
        self.assertTrue(lines[1].startswith("403 "), lines)


if __name__ == "__main__":
    unittest.main()
