"""The client of one airlock daemon: sandboxes, keys, approvals, health."""

from __future__ import annotations

import math
import os
import ssl
from typing import Any, Mapping, Sequence
from urllib.parse import quote

from ._version import __version__
from ._transport import Transport
from .errors import ConfigError
from ._snapshots import fork_body, snapshot_path
from .models import Approval, Health, Key, Limits, Mount, Network, PendingChange, Quota, RateLimits, SandboxInfo, SnapshotInfo, _obj
from .sandbox import Sandbox

__all__ = ["Client", "ENV_URL", "ENV_KEY"]

#: The environment variables Client reads when not given a URL or key.
ENV_URL = "AIRLOCK_URL"
ENV_KEY = "AIRLOCK_API_KEY"


def _seconds(name: str, v: float | None) -> int | None:
    if v is None:
        return None
    if v <= 0 or not math.isfinite(v):
        raise ValueError(f"{name} {v}: give a positive number of seconds")
    return math.ceil(v)


class Client:
    """Talks to one airlock daemon (``airlock serve``) over its HTTP API.

    ::

        client = airlock.Client()            # AIRLOCK_URL, AIRLOCK_API_KEY
        client = airlock.Client("http://127.0.0.1:7070", api_key)

    Args:
        url: the daemon's base URL; default the environment's AIRLOCK_URL.
        api_key: the key (``airlock keys create``); default AIRLOCK_API_KEY.
            It is sent only in the Authorization header, and never shows in
            a repr, str, error or log line.
        timeout: seconds to wait for each read from the daemon. None (the
            default) waits as long as the daemon takes: it bounds its own
            work (each command's timeout), and an action that needs a
            person's approval holds its call until they decide.
        connect_timeout: seconds to wait for a connection.
        ssl_context: for https URLs (default: the system's trust store).

    A Client is safe to share between threads. ``close()`` (or ``with``)
    closes its idle connections.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | None = None,
        connect_timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        url = url if url is not None else os.environ.get(ENV_URL, "")
        if not url:
            raise ConfigError(f"{ENV_URL} is not set: give the daemon's URL, or point {ENV_URL} at a daemon started with `airlock serve` (e.g. http://127.0.0.1:7070)")
        key = api_key if api_key is not None else os.environ.get(ENV_KEY, "")
        if not key:
            raise ConfigError(f"{ENV_KEY} is not set: give api_key, or make a key with `airlock keys create --state-dir DIR` and export it as {ENV_KEY}")
        if any(c in key for c in "\r\n\x00 "):
            raise ConfigError("api_key: a key has no spaces or line breaks; copy it again from `airlock keys create`")
        self._transport = Transport(
            url, key, timeout=timeout, connect_timeout=connect_timeout, ssl_context=ssl_context, user_agent=f"airlock-python/{__version__}"
        )

    @classmethod
    def from_env(cls, **kwargs: Any) -> Client:
        """A client of the daemon named by AIRLOCK_URL, with the key in
        AIRLOCK_API_KEY (the same as Client())."""
        return cls(None, None, **kwargs)

    @property
    def url(self) -> str:
        """The daemon's base URL."""
        return self._transport.url

    def __repr__(self) -> str:
        return f"airlock.Client({self.url!r})"

    def close(self) -> None:
        """Closes idle connections. The client still works afterwards."""
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Sandboxes.

    def create_sandbox(
        self,
        template: str | None = None,
        *,
        driver: str | None = None,
        limits: Limits | None = None,
        network: Network | None = None,
        env: Mapping[str, str] | None = None,
        ttl: float | None = None,
        idle_timeout: float | None = None,
        checkpoints: int | None = None,
        mounts: Sequence[Mount | str] | None = None,
        on_timeout: str | None = None,
        auto_resume: bool = False,
    ) -> Sandbox:
        """Makes a sandbox (or claims a ready one from the template's warm
        pool) and returns it. Use it with ``with`` to have it killed at the
        end of the block.

        Args:
            template: the daemon's template ("default" when None); it sets
                the driver, root, limits and network.
            driver: the driver ("wasm", "native", "gvisor"); None takes the
                template's, or the one the daemon's policy tiers choose. A
                named driver is kept, or the create is refused.
            limits: narrower limits than the template's.
            network: egress rules within the template's network.
            env: variables every command in the sandbox gets.
            ttl: lifetime in seconds (default and maximum: the template's).
            idle_timeout: seconds without an API call after which it is
                killed.
            checkpoints: keep a snapshot of /workspace before each of the
                last this many commands (0 to 64): Sandbox.diff(step=N) says
                what command N changed, Sandbox.restore(undo_steps=N)
                undoes the last N.
            mounts: host paths to show inside, as Mount or
                "HOST:PATH[:ro|:rw|:cow]"; the daemon's policy must list
                each. A cow mount's changes reach the host only through
                Sandbox.apply_changes (review them with Sandbox.changes).
            on_timeout: "pause" pauses the sandbox at its TTL instead of
                killing it (a driver that can pause); "kill" is the default.
            auto_resume: with on_timeout="pause", a command, a file or a
                snapshot resumes the sandbox when it is paused.

        Raises Denied (the policy refused), QuotaExceeded, RateLimited,
        InsufficientCapacity, InvalidRequest (e.g. limits above the
        template's).
        """
        body: dict[str, Any] = {}
        if template:
            body["template"] = template
        if driver:
            body["driver"] = driver
        if limits is not None and limits.to_json():
            body["limits"] = limits.to_json()
        if network is not None:
            body["network"] = network.to_json()
        if env:
            body["env"] = {str(k): str(v) for k, v in env.items()}
        if (t := _seconds("ttl", ttl)) is not None:
            body["ttl_seconds"] = t
        if (i := _seconds("idle_timeout", idle_timeout)) is not None:
            body["idle_timeout_seconds"] = i
        if checkpoints:
            body["checkpoints"] = int(checkpoints)
        if mounts:
            body["mounts"] = [(Mount.parse(m) if isinstance(m, str) else m).to_json() for m in mounts]
        if on_timeout:
            body["on_timeout"] = str(on_timeout)
        if auto_resume:
            body["auto_resume"] = True
        info = SandboxInfo.from_json(self._transport.request("POST", "/v1/sandboxes", json_body=body, read_timeout=None).json())
        return Sandbox(self, info.id, info)

    def sandbox(self, id: str) -> Sandbox:
        """A handle of sandbox id, without asking the daemon (see
        get_sandbox). Useful to keep a sandbox across an agent's steps by its
        id alone."""
        return Sandbox(self, id)

    def get_sandbox(self, id: str) -> Sandbox:
        """Sandbox id, live or ended, with its info. Raises NotFound."""
        sb = Sandbox(self, id)
        sb.refresh()
        return sb

    def list_sandboxes(self, *, state: str | None = None, template: str | None = None) -> list[Sandbox]:
        """This key's sandboxes (an operator key's: everyone's), optionally
        only those in a state (creating, pooled, running, destroyed, lost)
        or of a template."""
        d = _obj(self._transport.request("GET", "/v1/sandboxes", query={"state": state, "template": template}).json())
        out = []
        for s in d.get("sandboxes") or []:
            info = SandboxInfo.from_json(s)
            out.append(Sandbox(self, info.id, info))
        return out

    def kill_sandbox(self, id: str) -> None:
        """Destroys sandbox id; killing an ended one is no error."""
        Sandbox(self, id).kill()

    # Keys (operator keys only).

    # Snapshots.

    def list_snapshots(self, sandbox: str | None = None) -> list[SnapshotInfo]:
        """This key's snapshots (an operator's: every key's), oldest first;
        only sandbox's when given."""
        d = _obj(self._transport.request("GET", "/v1/snapshots", query={"sandbox": sandbox}).json())
        return [SnapshotInfo.from_json(s) for s in d.get("snapshots") or []]

    def get_snapshot(self, id: str, *, sandbox: str | None = None, tree: bool = False) -> SnapshotInfo:
        """Snapshot id (or a name, with sandbox); with tree, its entries."""
        q = {"tree": "1"} if tree else None
        return SnapshotInfo.from_json(self._transport.request("GET", snapshot_path(id, sandbox), query=q).json())

    def delete_snapshot(self, id: str, *, sandbox: str | None = None) -> None:
        """Deletes snapshot id (or a name, with sandbox)."""
        self._transport.request("DELETE", snapshot_path(id, sandbox)).discard()

    def fork(self, snapshot: str, *, sandbox: str | None = None, ttl: float | None = None, env: Mapping[str, str] | None = None) -> Sandbox:
        """A new sandbox from snapshot (an id, or a name with sandbox): the
        same template, its own identity, the snapshot's files. Raises
        Forbidden for another key's snapshot."""
        d = _obj(self._transport.request("POST", snapshot_path(snapshot) + "/fork", json_body=fork_body(sandbox, ttl, env), read_timeout=None).json())
        info = SandboxInfo.from_json(d.get("sandbox"))
        return Sandbox(self, info.id, info)

    def create_key(
        self, name: str | None = None, *, role: str = "agent", quota: Quota | None = None, rate: RateLimits | None = None
    ) -> Key:
        """Makes an API key (operators only). Its secret is in the answer's
        ``secret``, which the daemon never shows again. role is "agent"
        (its own sandboxes only) or "operator"."""
        body: dict[str, Any] = {"role": role}
        if name:
            body["name"] = name
        if quota is not None and quota.to_json():
            body["quota"] = quota.to_json()
        if rate is not None and rate.to_json():
            body["rate"] = rate.to_json()
        return Key.from_json(self._transport.request("POST", "/v1/keys", json_body=body).json())

    def list_keys(self) -> list[Key]:
        """The daemon's keys, without secrets (operators only)."""
        d = _obj(self._transport.request("GET", "/v1/keys").json())
        return [Key.from_json(k) for k in d.get("keys") or []]

    def delete_key(self, id: str) -> None:
        """Revokes key id (operators only)."""
        self._transport.request("DELETE", "/v1/keys/" + quote(id, safe="")).discard()

    # Copy-on-write changes (operator keys only).

    def pending_changes(self) -> list[PendingChange]:
        """Every live sandbox's copy-on-write mounts with pending changes:
        the sandbox, its key, the mount, how many changes, whether only an
        operator may decide them. Operators only (Forbidden otherwise);
        decide with client.sandbox(id).apply_changes / discard_changes."""
        d = _obj(self._transport.request("GET", "/v1/changes").json())
        return [PendingChange.from_json(p) for p in d.get("changes") or []]

    # Approvals (operator keys only).

    def list_approvals(self, *, pending_only: bool = False) -> list[Approval]:
        """Actions waiting for a person (oldest first), then recently decided
        ones (newest first). Operators only (Forbidden otherwise)."""
        d = _obj(self._transport.request("GET", "/v1/approvals").json())
        out = [Approval.from_json(a) for a in d.get("approvals") or []]
        return [a for a in out if a.pending] if pending_only else out

    def decide_approval(self, id: str, approve: bool, reason: str = "") -> Approval:
        """Approves or denies a pending action; reason is told to the agent
        (on a denial) and recorded in the audit log. Only an operator key
        other than the one that asked may decide. Raises NotFound when it is
        no longer pending."""
        body: dict[str, Any] = {"decision": "approve" if approve else "deny"}
        if reason:
            body["reason"] = reason
        return Approval.from_json(self._transport.request("POST", "/v1/approvals/" + quote(id, safe=""), json_body=body).json())

    def approve(self, id: str, reason: str = "") -> Approval:
        """Lets a pending action go ahead."""
        return self.decide_approval(id, True, reason)

    def deny(self, id: str, reason: str = "") -> Approval:
        """Refuses a pending action; the agent gets Denied with this reason."""
        return self.decide_approval(id, False, reason)

    def audit_events(self, n: int = 100) -> list[dict[str, Any]]:
        """The last n (1 to 1000) events of the audit log, oldest first, as
        written (operators only)."""
        d = _obj(self._transport.request("GET", "/v1/audit", query={"n": n}).json())
        return [e for e in d.get("events") or [] if isinstance(e, dict)]

    # The daemon.

    def health(self) -> Health:
        """The daemon's state; needs no key."""
        return Health.from_json(self._transport.request("GET", "/healthz").json())
