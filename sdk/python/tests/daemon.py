"""A real `airlock serve` for the test suite: started once, on a free port
of 127.0.0.1, with a temporary state directory, keys made with
`airlock keys create --state-dir`, and a policy and config that make a
denial and an approval happen. Stopped (SIGTERM: every sandbox destroyed)
when the test process exits.

The binary is $AIRLOCK_BIN, else bin/airlock of the repository (`make
build`). The daemon inherits the environment (AIRLOCK_AGENT included).
"""

from __future__ import annotations

import atexit
import ctypes
import http.server
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, Callable, TypeVar

import airlock

T = TypeVar("T")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

POLICY = """
default = "allow"

[[rule]]
name = "no-curl"
when = 'action == "exec" && argv.size() >= 1 && argv[0] == "curl"'
decision = "deny"
reason = "curl is not allowed here; use python's urllib instead"

[[rule]]
name = "deploy-needs-a-person"
when = 'action == "exec" && code.contains("DEPLOY")'
decision = "ask"
reason = "deploying needs a person's approval"

[[rule]]
name = "no-secrets-dir"
when = 'action == "file_write" && path.startsWith("/workspace/secrets")'
decision = "deny"
reason = "nothing may be written under /workspace/secrets"

[approval]
timeout = "2m"
"""

CONFIG = """
[[template]]
name = "default"
ttl = "10m"

[[template]]
name = "huge"
memory = "100T"

[[template]]
name = "egress"
[template.network]
mode = "egress"
allow_hosts = ["*.example.com"]
allow_addresses = ["127.0.0.1:{port}"]
secrets = ["TOKEN"]

[[egress.secret]]
name = "TOKEN"
hosts = ["secret.example.com"]
value = "not-a-real-token"
"""


# An S3-compatible server the Go test started (versitygw), as
# "ENDPOINT REGION ACCESS_KEY SECRET_KEY BUCKET": the daemon exports to
# its bucket. Unset: the export tests skip.
S3 = os.environ.get("AIRLOCK_TEST_S3", "").split()

EXPORT_CONFIG = """
[[template]]
name = "exports"
export_types = ["text/csv", "image/png"]
export_max = "64k"

[object_store]
endpoint = "{endpoint}"
region = "{region}"
access_key_id = "{access}"
secret_access_key = "{secret}"

[export]
buckets = ["{bucket}"]
presign = "10m"
"""


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the host\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _pdeathsig() -> None:
    """In the child: die when the test process dies (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Daemon:
    """One airlock serve and its keys."""

    def __init__(self) -> None:
        self.bin = os.environ.get("AIRLOCK_BIN") or os.path.join(REPO, "bin", "airlock")
        if not os.access(self.bin, os.X_OK):
            raise RuntimeError(f"no airlock binary at {self.bin}: run `make build` in {REPO}, or set AIRLOCK_BIN")
        self.state = tempfile.mkdtemp(prefix="airlock-pysdk-")
        # A plain-HTTP server on the host that the "egress" template may reach.
        self.web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
        self.web_port = self.web.server_address[1]
        # A host project the sandboxes may mount copy-on-write at /w, and
        # one whose changes only an operator may decide, at /prod.
        self.project = tempfile.mkdtemp(prefix="airlock-pysdk-project-")
        self.gated = tempfile.mkdtemp(prefix="airlock-pysdk-gated-")
        with open(os.path.join(self.state, "policy.toml"), "w") as f:
            f.write(f'mounts = ["{self.project}:/w:cow", "{self.gated}:/prod:cow"]\n')
            f.write(POLICY)
            f.write(f'mounts = ["{self.gated}"]\n')
        with open(os.path.join(self.state, "config.toml"), "w") as f:
            f.write(CONFIG.format(port=self.web_port))
            if len(S3) == 5:
                endpoint, region, access, secret, bucket = S3
                f.write(EXPORT_CONFIG.format(endpoint=endpoint, region=region, access=access, secret=secret, bucket=bucket))
        self.keys = {
            name: self._key(name, role)
            for name, role in (("operator", "operator"), ("operator2", "operator"), ("agent", "agent"), ("agent2", "agent"))
        }
        self.log_path = os.path.join(self.state, "daemon.log")
        self._log = open(self.log_path, "wb")
        # The audit log's key in a directory of the test's own, not the
        # host's default (/var/lib/airlock-keys as root).
        args = [self.bin, "serve", "--listen", "127.0.0.1:0", "--state-dir", self.state]
        args += ["--audit-key", os.path.join(self.state + "-keys", "audit.key")]
        args += ["--config", os.path.join(self.state, "config.toml"), "--policy", os.path.join(self.state, "policy.toml")]
        # A stop ends the sandboxes too (a daemon's outlive it otherwise).
        args += ["--shutdown-sandboxes"]
        # Started before any thread of ours: preexec_fn is not safe with threads.
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, preexec_fn=_pdeathsig)
        threading.Thread(target=self.web.serve_forever, daemon=True).start()
        self.url = self._wait_listening()

    def _key(self, name: str, role: str) -> str:
        out = subprocess.run(
            [self.bin, "keys", "create", "--state-dir", self.state, "--role", role, "--name", name],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"airlock keys create: {out.stderr}")
        return out.stdout.strip()

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def _wait_listening(self) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = re.search(r"msg=listening addr=(\S+)", self.log())
            if m:
                return "http://" + m.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"airlock serve exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.05)
        raise RuntimeError(f"airlock serve did not listen within 30 s:\n{self.log()}")

    def client(self, who: str = "agent", **kwargs: object) -> airlock.Client:
        return airlock.Client(self.url, self.keys[who], **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.web.shutdown()
        self._log.close()
        if os.environ.get("AIRLOCK_PYSDK_KEEP_STATE"):
            print(f"daemon state kept in {self.state}", file=sys.stderr)
        else:
            shutil.rmtree(self.state, ignore_errors=True)
            shutil.rmtree(self.project, ignore_errors=True)
            shutil.rmtree(self.gated, ignore_errors=True)
            shutil.rmtree(self.state + "-keys", ignore_errors=True)


_daemon: Daemon | None = None
_lock = threading.Lock()


def get() -> Daemon:
    """The suite's daemon, started on first use."""
    global _daemon
    with _lock:
        if _daemon is None:
            _daemon = Daemon()
            atexit.register(_daemon.stop)
        return _daemon


class DaemonTest(unittest.TestCase):
    """A test case with the daemon and an agent and an operator client."""

    daemon: Daemon
    agent: airlock.Client
    operator: airlock.Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.daemon = get()
        cls.agent = cls.daemon.client("agent")
        cls.operator = cls.daemon.client("operator")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.agent.close()
        cls.operator.close()

    @staticmethod
    def paced(fn: Callable[[], T]) -> T:
        """Calls fn, waiting out a short RateLimited: the suite creates
        sandboxes faster than a key's default rate (5/s)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return fn()
            except airlock.RateLimited as e:
                if time.monotonic() > deadline:
                    raise
                time.sleep(min(e.retry_after or 0.2, 0.5))

    @classmethod
    def create(cls, client: airlock.Client | None = None, **kwargs: Any) -> airlock.Sandbox:
        """A new sandbox (paced)."""
        return cls.paced(lambda: (client or cls.agent).create_sandbox(**kwargs))

    def sandbox(self, client: airlock.Client | None = None, **kwargs: Any) -> airlock.Sandbox:
        """A new sandbox, killed when the test ends."""
        sb = self.create(client, **kwargs)
        self.addCleanup(sb.kill)
        return sb
