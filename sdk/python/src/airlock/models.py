"""The API's data: what you send (Limits, Network, Quota, RateLimits) and
what the daemon answers (SandboxInfo, Result, FileInfo, Approval, ...).

Field names are the API's (internal/api/openapi.json), so the OpenAPI
document describes them too. Times are timezone-aware ``datetime``s in UTC;
a time the daemon left out is None. Fields the daemon adds later are
ignored by this version of the SDK.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Sequence

__all__ = [
    "Limits",
    "HostRule",
    "Network",
    "SandboxInfo",
    "Usage",
    "Result",
    "ExecResult",
    "Event",
    "FileInfo",
    "ArchiveResult",
    "Quota",
    "RateLimits",
    "Key",
    "Approval",
    "EgressHost",
    "EgressSummary",
    "ExposedPort",
    "Health",
    "PoolStatus",
    "ExportedObject",
    "ExportResult",
]

# Sandbox states (SandboxInfo.state).
STATE_CREATING = "creating"
STATE_POOLED = "pooled"
STATE_RUNNING = "running"
#: Its processes and memory are saved (Sandbox.pause), to be resumed.
STATE_PAUSED = "paused"
STATE_DESTROYED = "destroyed"
#: The sandbox was live when the daemon stopped; its processes ended with it.
STATE_LOST = "lost"

_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def _time(v: Any) -> datetime | None:
    """Parses an RFC 3339 time as Go writes it (nanoseconds, Z)."""
    if not isinstance(v, str) or not v:
        return None
    m = _TIME.match(v)
    if not m:
        return None
    t = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    if m.group(2):
        t = t.replace(microsecond=int(m.group(2)[:6].ljust(6, "0")))
    z = m.group(3)
    if z == "Z":
        tz = timezone.utc
    else:
        sign = 1 if z[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=int(z[1:3]), minutes=int(z[4:6])))
    t = t.replace(tzinfo=tz).astimezone(timezone.utc)
    return None if t.year <= 1 else t


def _int(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _strs(v: Any) -> tuple[str, ...]:
    return tuple(x for x in v if isinstance(x, str)) if isinstance(v, list) else ()


def _obj(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, dict) else {}


def _output(text: Any, b64: Any) -> bytes:
    """Output comes as text, or as base64 when it is not valid UTF-8."""
    if isinstance(b64, str) and b64:
        return base64.b64decode(b64)
    return text.encode() if isinstance(text, str) else b""


@dataclass(frozen=True)
class Limits:
    """A sandbox's limits. None takes the template's value; a value given
    may only narrow it (a create asking for more is refused, not trimmed)."""

    memory_bytes: int | None = None
    cpus: float | None = None
    pids: int | None = None
    #: Each exec's default wall-time limit, in milliseconds.
    timeout_ms: int | None = None
    #: Each exec's user+system CPU time limit, in milliseconds.
    cpu_time_ms: int | None = None
    #: Size of /workspace.
    disk_bytes: int | None = None
    #: Size of /tmp.
    tmp_bytes: int | None = None
    #: Output kept per stream of an exec; past it the command is killed.
    output_bytes: int | None = None
    open_files: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v}

    @classmethod
    def from_json(cls, d: Any) -> Limits:
        d = _obj(d)
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if isinstance(d.get(k), (int, float))})


@dataclass(frozen=True)
class HostRule:
    """Method and path rules for the requests a sandbox sends to one host
    (``"api.github.com"``, ``"*.example.com"``). Each rule is ``"METHOD"``
    or ``"METHOD /path"`` (``*`` any method; ``*`` one path segment,
    ``**`` any number): ``deny`` first, then ``allow`` if it has any. A
    refused request gets 403 naming the rule. The host's HTTPS is
    intercepted by the daemon's proxy so that the rules hold there too.
    """

    host: str
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"host": self.host}
        for k in ("allow", "deny"):
            v = getattr(self, k)
            if isinstance(v, str):
                raise TypeError(f"HostRule.{k}: give a list of strings, not one string")
            if v:
                d[k] = list(v)
        return d


@dataclass(frozen=True)
class Network:
    """A sandbox's network. The default (no Network) is the template's,
    which is none at all unless the template says otherwise.

    With any rule given, the mode is ``"egress"``: an HTTP proxy inside
    the sandbox (``HTTP_PROXY`` and friends are set) that reaches only
    ``allow_hosts`` (``"pypi.org"``, ``"*.example.com"``, optionally with
    ``:port``) and ``allow_addresses`` (exact ``IP:port``, the only way to a
    private address); ``deny`` wins over both; ``report=True`` lets through
    what the rules would refuse and records it as ``would_deny``. A create
    may ask only for what its template's network allows, and a Network
    given replaces the template's allowlists: name the hosts it needs.

    ``secrets`` names the daemon's secrets (``[[egress.secret]]``) the
    sandbox may use, of those its template names: it sees each only as a
    placeholder (``AIRLOCK_SECRET_<NAME>``) that the proxy replaces in
    requests to that secret's hosts. None (left out) is the template's;
    ``[]`` is none of them; naming another is refused. ``rules`` are
    HostRule's added to the template's method and path rules (they only
    narrow; left out, the template's alone apply).
    """

    mode: str | None = None
    allow_hosts: Sequence[str] = ()
    allow_addresses: Sequence[str] = ()
    deny: Sequence[str] = ()
    report: bool = False
    secrets: Sequence[str] | None = None
    rules: Sequence[HostRule] = ()

    def to_json(self) -> dict[str, Any]:
        rules = bool(self.allow_hosts or self.allow_addresses or self.deny or self.report or self.secrets is not None or self.rules)
        d: dict[str, Any] = {"mode": self.mode or ("egress" if rules else "none")}
        for k in ("allow_hosts", "allow_addresses", "deny"):
            v = getattr(self, k)
            if isinstance(v, str):
                raise TypeError(f"Network.{k}: give a list of strings, not one string")
            if v:
                d[k] = list(v)
        if self.report:
            d["report"] = True
        if self.secrets is not None:
            if isinstance(self.secrets, str):
                raise TypeError("Network.secrets: give a list of names, not one string")
            d["secrets"] = list(self.secrets)
        if self.rules:
            if isinstance(self.rules, HostRule):
                raise TypeError("Network.rules: give a list of HostRule, not one")
            d["rules"] = [r.to_json() if isinstance(r, HostRule) else HostRule(**r).to_json() for r in self.rules]
        return d


@dataclass(frozen=True)
class SandboxInfo:
    """What the daemon says about a sandbox, live or ended."""

    id: str
    template: str = ""
    driver: str = ""
    #: creating, pooled, running, paused, destroyed or lost.
    state: str = ""
    #: The id of the key that owns it.
    owner: str = ""
    created_at: datetime | None = None
    expires_at: datetime | None = None
    idle_timeout_seconds: int = 0
    last_active_at: datetime | None = None
    ended_at: datetime | None = None
    #: Why it ended: deleted, ttl, idle, ended, lost, shutdown.
    end_reason: str = ""
    limits: Limits = field(default_factory=Limits)
    #: The isolation layers in effect (userns, seccomp, landlock, ...).
    layers: tuple[str, ...] = ()
    #: The create was served by a warm pool.
    from_pool: bool = False
    #: In a create's answer, what chose the driver: "tier:NAME" (the
    #: daemon's policy), "request" or "template"; and why.
    driver_rule: str = ""
    driver_reason: str = ""
    #: How many per-command checkpoints it keeps, and the last one's number.
    checkpoints: int = 0
    steps: int = 0
    #: While paused: when its paused TTL ends it, whether its memory is
    #: kept in the host (frozen), and the size of its pause image.
    paused_until: datetime | None = None
    memory_kept_in_host: bool = False
    paused_bytes: int = 0
    #: "pause" when its TTL pauses it; whether a call resumes it then.
    on_timeout: str = ""
    auto_resume: bool = False
    #: While its create waits for its image's pull (state creating): the
    #: image, the layer being fetched, of how many, and the compressed
    #: bytes so far (on Kubernetes only the image the node pulls).
    pull_image: str = ""
    pull_layer: int = 0
    pull_layers: int = 0
    pull_bytes: int = 0

    @property
    def live(self) -> bool:
        """Whether the sandbox can still run commands."""
        return self.state in (STATE_CREATING, STATE_POOLED, STATE_RUNNING)

    @classmethod
    def from_json(cls, d: Any) -> SandboxInfo:
        d = _obj(d)
        return cls(
            id=_str(d.get("id")),
            template=_str(d.get("template")),
            driver=_str(d.get("driver")),
            state=_str(d.get("state")),
            owner=_str(d.get("owner")),
            created_at=_time(d.get("created_at")),
            expires_at=_time(d.get("expires_at")),
            idle_timeout_seconds=_int(d.get("idle_timeout_seconds")),
            last_active_at=_time(d.get("last_active_at")),
            ended_at=_time(d.get("ended_at")),
            end_reason=_str(d.get("end_reason")),
            limits=Limits.from_json(d.get("limits")),
            layers=_strs(d.get("layers")),
            driver_rule=_str(d.get("driver_rule")),
            driver_reason=_str(d.get("driver_reason")),
            from_pool=bool(d.get("from_pool")),
            checkpoints=_int(d.get("checkpoints")),
            steps=_int(d.get("steps")),
            paused_until=_time(_obj(d.get("paused") or {}).get("expires_at")),
            memory_kept_in_host=bool(_obj(d.get("paused") or {}).get("memory_kept_in_host")),
            paused_bytes=_int(_obj(d.get("paused") or {}).get("stored_bytes")),
            on_timeout=_str(d.get("on_timeout")),
            auto_resume=bool(d.get("auto_resume")),
            pull_image=_str(_obj(d.get("pull") or {}).get("image")),
            pull_layer=_int(_obj(d.get("pull") or {}).get("layer")),
            pull_layers=_int(_obj(d.get("pull") or {}).get("layers")),
            pull_bytes=_int(_obj(d.get("pull") or {}).get("bytes")),
        )


@dataclass(frozen=True)
class Usage:
    """What a command consumed."""

    wall_ms: int = 0
    cpu_ms: int = 0
    memory_peak_bytes: int = 0
    #: Bytes of output the command wrote.
    bytes_written: int = 0

    @classmethod
    def from_json(cls, d: Any) -> Usage:
        d = _obj(d)
        return cls(**{k: _int(d.get(k)) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Rollback:
    """What a transactional command's rollback did: whether /workspace was
    put back as it was before the command (and why), and how many of the
    command's added, changed and removed files were undone."""

    rolled_back: bool = False
    why: str = ""
    snapshot: str = ""
    added: int = 0
    changed: int = 0
    removed: int = 0
    #: Why a rollback that was due did not happen.
    error: str = ""

    @classmethod
    def from_json(cls, d: Any) -> Rollback:
        d = _obj(d)
        return cls(
            rolled_back=bool(d.get("rolled_back")),
            why=_str(d.get("why")),
            snapshot=_str(d.get("snapshot")),
            added=_int(d.get("added")),
            changed=_int(d.get("changed")),
            removed=_int(d.get("removed")),
            error=_str(d.get("error")),
        )


@dataclass(frozen=True)
class Result:
    """How a command ended.

    ``reason`` is authoritative: ``exit`` (it ended by itself; see
    ``exit_code``), ``timeout``, ``cpu_time``, ``oom``, ``pids``,
    ``output_limit``, ``killed``, ``denied`` or ``error``. ``message`` says
    it in one line a model can act on.
    """

    #: The exit status, or -1 when a signal ended the command.
    exit_code: int = 0
    #: The signal that ended it ("SIGKILL"), or "".
    signal: str = ""
    reason: str = ""
    #: Every limit reached, even ones the command survived (pids, disk_full).
    limits_hit: tuple[str, ...] = ()
    message: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    usage: Usage = field(default_factory=Usage)
    #: What a command run with ``rollback="on_failure"`` had undone; None
    #: for other commands.
    rollback: Rollback | None = None

    @property
    def ok(self) -> bool:
        """The command ended by itself with exit code 0."""
        return self.reason == "exit" and self.exit_code == 0

    @staticmethod
    def _fields(d: Any) -> dict[str, Any]:
        d = _obj(d)
        return dict(
            exit_code=_int(d.get("exit_code")),
            signal=_str(d.get("signal")),
            reason=_str(d.get("reason")),
            limits_hit=_strs(d.get("limits_hit")),
            message=_str(d.get("message")),
            stdout_truncated=bool(d.get("stdout_truncated")),
            stderr_truncated=bool(d.get("stderr_truncated")),
            usage=Usage.from_json(d.get("usage")),
            rollback=Rollback.from_json(d["rollback"]) if isinstance(d.get("rollback"), dict) else None,
        )

    @classmethod
    def from_json(cls, d: Any) -> Result:
        return cls(**cls._fields(d))


@dataclass(frozen=True)
class ExecResult(Result):
    """A finished command: its Result and its output."""

    stdout: bytes = b""
    stderr: bytes = b""

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """stderr decoded as UTF-8 (invalid bytes replaced)."""
        return self.stderr.decode("utf-8", "replace")

    @classmethod
    def from_result(cls, r: Result, stdout: bytes, stderr: bytes) -> ExecResult:
        return cls(**{k: getattr(r, k) for k in Result.__dataclass_fields__}, stdout=stdout, stderr=stderr)


@dataclass(frozen=True)
class Event:
    """One event of a streaming exec: output as it comes (``type`` is
    ``"stdout"`` or ``"stderr"``, with ``data``), then the last one,
    ``type == "result"``, with ``result``."""

    type: str
    data: bytes = b""
    result: Result | None = None

    @property
    def text(self) -> str:
        """data decoded as UTF-8 (invalid bytes replaced; a character split
        across two events shows as replacement characters)."""
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True)
class FileInfo:
    """A file in a sandbox."""

    name: str
    path: str = ""
    size: int = 0
    #: Permission bits (0o644).
    mode: int = 0
    mod_time: datetime | None = None
    #: file, dir, symlink or other.
    type: str = ""
    #: Where a symlink points, as stored (never followed).
    target: str = ""

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_json(cls, d: Any) -> FileInfo:
        d = _obj(d)
        return cls(
            name=_str(d.get("name")),
            path=_str(d.get("path")),
            size=_int(d.get("size")),
            mode=_int(d.get("mode")) & 0o777,  # Go FileMode: type bits above, permissions below
            mod_time=_time(d.get("mod_time")),
            type=_str(d.get("type")),
            target=_str(d.get("target")),
        )


@dataclass(frozen=True)
class ArchiveResult:
    """What an upload extracted."""

    entries: int = 0
    bytes: int = 0

    @classmethod
    def from_json(cls, d: Any) -> ArchiveResult:
        d = _obj(d)
        return cls(entries=_int(d.get("entries")), bytes=_int(d.get("bytes")))


@dataclass(frozen=True)
class Quota:
    """What a key may hold at once; None means the daemon's default (10
    sandboxes, 8 GiB of memory limits)."""

    max_sandboxes: int | None = None
    max_memory_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v}

    @classmethod
    def from_json(cls, d: Any) -> Quota:
        d = _obj(d)
        return cls(max_sandboxes=_int(d.get("max_sandboxes")) or None, max_memory_bytes=_int(d.get("max_memory_bytes")) or None)


@dataclass(frozen=True)
class RateLimits:
    """How fast a key may act; None means the default (5 creates/s, burst
    10; 200 execs and process starts/s, burst 400)."""

    creates_per_second: float | None = None
    create_burst: int | None = None
    execs_per_second: float | None = None
    exec_burst: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v}

    @classmethod
    def from_json(cls, d: Any) -> RateLimits:
        d = _obj(d)
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if isinstance(d.get(k), (int, float)) and d[k]})


@dataclass(frozen=True)
class Key:
    """An API key. ``secret`` is set only in the answer to its creation (the
    daemon keeps only its hash) and never shows in repr."""

    id: str
    name: str = ""
    #: agent or operator.
    role: str = ""
    quota: Quota = field(default_factory=Quota)
    rate: RateLimits = field(default_factory=RateLimits)
    created_at: datetime | None = None
    secret: str = field(default="", repr=False)

    @classmethod
    def from_json(cls, d: Any) -> Key:
        d = _obj(d)
        return cls(
            id=_str(d.get("id")),
            name=_str(d.get("name")),
            role=_str(d.get("role")),
            quota=Quota.from_json(d.get("quota")),
            rate=RateLimits.from_json(d.get("rate")),
            created_at=_time(d.get("created_at")),
            secret=_str(d.get("secret")),
        )


@dataclass(frozen=True)
class Approval:
    """An action waiting for (or decided by) a person.

    ``request`` is the policy's view of the action: ``action`` (exec,
    file_write, ...), ``argv`` or ``code`` and ``language``, ``path``, ...
    """

    id: str
    #: pending, approved, denied, expired or cancelled.
    state: str = ""
    created: datetime | None = None
    #: When a pending approval is denied by itself.
    expires: datetime | None = None
    #: The id of the key that asked; it may not decide.
    key: str = ""
    sandbox: str = ""
    request: Mapping[str, Any] = field(default_factory=dict)
    #: The policy rule that asked, and why.
    rule: str = ""
    why: str = ""
    decided_by: str = ""
    reason: str = ""
    decided: datetime | None = None

    @property
    def pending(self) -> bool:
        return self.state == "pending"

    @classmethod
    def from_json(cls, d: Any) -> Approval:
        d = _obj(d)
        return cls(
            id=_str(d.get("id")),
            state=_str(d.get("state")),
            created=_time(d.get("created")),
            expires=_time(d.get("expires")),
            key=_str(d.get("key")),
            sandbox=_str(d.get("sandbox")),
            request=dict(_obj(d.get("request"))),
            rule=_str(d.get("rule")),
            why=_str(d.get("why")),
            decided_by=_str(d.get("decided_by")),
            reason=_str(d.get("reason")),
            decided=_time(d.get("decided")),
        )


@dataclass(frozen=True)
class EgressHost:
    """What a sandbox did with one host through the egress proxy."""

    host: str
    allowed: int = 0
    denied: int = 0
    would_deny: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    @classmethod
    def from_json(cls, d: Any) -> EgressHost:
        d = _obj(d)
        return cls(host=_str(d.get("host")), **{k: _int(d.get(k)) for k in cls.__dataclass_fields__ if k != "host"})


@dataclass(frozen=True)
class ExposedPort:
    """What reached one exposed port of a sandbox from outside (E2B's
    getHost): connections made, refused (policy or template), failed (no
    server), and bytes to the sandbox's server (sent) and from it."""

    port: int
    connections: int = 0
    denied: int = 0
    failed: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    @classmethod
    def from_json(cls, d: Any) -> ExposedPort:
        d = _obj(d)
        return cls(**{k: _int(d.get(k)) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class EgressSummary:
    """What a sandbox did through the egress proxy: requests by decision,
    bytes, and the same per host (sorted by name); and what reached its
    exposed ports, by port."""

    sandbox_id: str
    #: enforce or report; none for a sandbox without egress whose exposed
    #: ports were asked for.
    mode: str = ""
    requests: int = 0
    allowed: int = 0
    denied: int = 0
    would_deny: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    hosts: tuple[EgressHost, ...] = ()
    exposed: tuple[ExposedPort, ...] = ()

    def host(self, name: str) -> EgressHost | None:
        """The counts of one host, or None."""
        return next((h for h in self.hosts if h.host == name), None)

    @classmethod
    def from_json(cls, d: Any) -> EgressSummary:
        d = _obj(d)
        hosts, exposed = d.get("hosts"), d.get("exposed")
        return cls(
            sandbox_id=_str(d.get("sandbox_id")),
            mode=_str(d.get("mode")),
            hosts=tuple(EgressHost.from_json(h) for h in hosts) if isinstance(hosts, list) else (),
            exposed=tuple(ExposedPort.from_json(p) for p in exposed) if isinstance(exposed, list) else (),
            **{k: _int(d.get(k)) for k in ("requests", "allowed", "denied", "would_deny", "bytes_sent", "bytes_received")},
        )


@dataclass(frozen=True)
class PoolStatus:
    """A template's warm pool."""

    template: str
    size: int = 0
    ready: int = 0
    filling: int = 0


@dataclass(frozen=True)
class Health:
    """The daemon's state (GET /healthz)."""

    status: str
    sandboxes: int = 0
    templates: tuple[str, ...] = ()
    pools: tuple[PoolStatus, ...] = ()

    @classmethod
    def from_json(cls, d: Any) -> Health:
        d = _obj(d)
        pools = d.get("pools")
        return cls(
            status=_str(d.get("status")),
            sandboxes=_int(d.get("sandboxes")),
            templates=_strs(d.get("templates")),
            pools=tuple(
                PoolStatus(_str(p.get("template")), _int(p.get("size")), _int(p.get("ready")), _int(p.get("filling")))
                for p in pools
                if isinstance(p, dict)
            )
            if isinstance(pools, list)
            else (),
        )


@dataclass(frozen=True)
class TreeEntry:
    """One file, directory or symlink of a snapshot."""

    path: str
    #: file, dir or symlink.
    type: str
    mode: int = 0
    size: int = 0
    #: sha256:HEX of a file's content.
    digest: str = ""
    #: Where a symlink points.
    target: str = ""

    @classmethod
    def from_json(cls, d: Any) -> TreeEntry:
        d = _obj(d)
        return cls(path=_str(d.get("path")), type=_str(d.get("type")), mode=_int(d.get("mode")), size=_int(d.get("size")), digest=_str(d.get("digest")), target=_str(d.get("target")))


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot of a sandbox's /workspace (and /tmp when asked): files,
    directories, symlinks and modes. Running processes are not part of it."""

    id: str
    name: str = ""
    label: str = ""
    sandbox: str = ""
    template: str = ""
    #: manual, checkpoint (before each command of a sandbox with
    #: checkpoints) or pre_exec.
    kind: str = ""
    step: int = 0
    created: datetime | None = None
    roots: tuple[str, ...] = ()
    files: int = 0
    entries: int = 0
    bytes: int = 0
    #: Content this snapshot added to the daemon's store.
    new_bytes: int = 0
    #: Commands ran while it was taken: each file is as it was at one
    #: moment, not all files at the same moment.
    busy: bool = False
    unsettled: tuple[str, ...] = ()
    note: str = ""
    #: Its entries, from get_snapshot(..., tree=True).
    tree: tuple[TreeEntry, ...] = ()

    @classmethod
    def from_json(cls, d: Any) -> SnapshotInfo:
        d = _obj(d)
        tree = d.get("tree")
        return cls(
            id=_str(d.get("id")),
            name=_str(d.get("name")),
            label=_str(d.get("label")),
            sandbox=_str(d.get("sandbox")),
            template=_str(d.get("template")),
            kind=_str(d.get("kind")),
            step=_int(d.get("step")),
            created=_time(d.get("created")),
            roots=_strs(d.get("roots")),
            files=_int(d.get("files")),
            entries=_int(d.get("entries")),
            bytes=_int(d.get("bytes")),
            new_bytes=_int(d.get("new_bytes")),
            busy=bool(d.get("busy")),
            unsettled=_strs(d.get("unsettled")),
            note=_str(d.get("note")),
            tree=tuple(TreeEntry.from_json(e) for e in tree) if isinstance(tree, list) else (),
        )


@dataclass(frozen=True)
class Change:
    """One path that differs between two states."""

    path: str
    #: added, deleted, modified, mode, symlink or type.
    kind: str
    before: TreeEntry | None = None
    after: TreeEntry | None = None
    binary: bool = False
    #: The unified diff of a text file (capped: see truncated).
    unified: str = ""
    truncated: bool = False

    @classmethod
    def from_json(cls, d: Any) -> Change:
        d = _obj(d)
        return cls(
            path=_str(d.get("path")),
            kind=_str(d.get("kind")),
            before=TreeEntry.from_json(d["before"]) if isinstance(d.get("before"), dict) else None,
            after=TreeEntry.from_json(d["after"]) if isinstance(d.get("after"), dict) else None,
            binary=bool(d.get("binary")),
            unified=_str(d.get("unified")),
            truncated=bool(d.get("truncated")),
        )


@dataclass(frozen=True)
class Diff:
    """What changed from one state of a sandbox's files to another (a
    snapshot id, or "now")."""

    from_: str
    to: str
    changes: tuple[Change, ...] = ()
    added: int = 0
    deleted: int = 0
    modified: int = 0
    #: Mode, symlink and type changes.
    other: int = 0
    truncated: bool = False

    @classmethod
    def from_json(cls, d: Any) -> Diff:
        d = _obj(d)
        ch = d.get("changes")
        return cls(
            from_=_str(d.get("from")),
            to=_str(d.get("to")),
            changes=tuple(Change.from_json(c) for c in ch) if isinstance(ch, list) else (),
            added=_int(d.get("added")),
            deleted=_int(d.get("deleted")),
            modified=_int(d.get("modified")),
            other=_int(d.get("other")),
            truncated=bool(d.get("truncated")),
        )


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did: the snapshot, and the files it made again
    (added), changed back (changed) and removed."""

    snapshot: SnapshotInfo
    added: int = 0
    changed: int = 0
    removed: int = 0
    received_bytes: int = 0

    @classmethod
    def from_json(cls, d: Any) -> RestoreResult:
        d = _obj(d)
        return cls(
            snapshot=SnapshotInfo.from_json(d.get("snapshot")),
            added=_int(d.get("added")),
            changed=_int(d.get("changed")),
            removed=_int(d.get("removed")),
            received_bytes=_int(d.get("received_bytes")),
        )


@dataclass(frozen=True)
class ExportedObject:
    """One file an export stored: where (``s3://BUCKET/KEY``), its size,
    the content type its bytes are, its SHA-256 (hex), and a download URL
    until ``expires`` when the daemon presigns."""

    path: str
    object: str
    size: int = 0
    content_type: str = ""
    sha256: str = ""
    url: str | None = None
    expires: datetime | None = None

    @classmethod
    def from_json(cls, d: Any) -> ExportedObject:
        d = _obj(d)
        return cls(
            path=_str(d.get("path")),
            object=_str(d.get("object")),
            size=_int(d.get("size")),
            content_type=_str(d.get("content_type")),
            sha256=_str(d.get("sha256")),
            url=d.get("url") if isinstance(d.get("url"), str) else None,
            expires=_time(d.get("expires")),
        )


@dataclass(frozen=True)
class ExportResult:
    """What an export stored, and what a tree held that is not a regular
    file (skipped)."""

    objects: tuple[ExportedObject, ...] = ()
    bytes: int = 0
    skipped: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: Any) -> ExportResult:
        d = _obj(d)
        objs = d.get("objects")
        return cls(
            objects=tuple(ExportedObject.from_json(o) for o in objs) if isinstance(objs, list) else (),
            bytes=_int(d.get("bytes")),
            skipped=_strs(d.get("skipped")),
        )


@dataclass(frozen=True)
class CowChange(Change):
    """A pending change of a copy-on-write mount (paths absolute in the
    sandbox), with why an apply would refuse it (refused) or that the host
    changed under it since the sandbox started (conflict). entry stands for
    what the listing shows of it (type, mode, size, content, symlink
    target; "" for a deletion): apply_changes(expect=...) sends it back.
    warning says what to look at that apply does not refuse (a
    world-writable mode)."""

    refused: str = ""
    conflict: str = ""
    entry: str = ""
    warning: str = ""

    @classmethod
    def from_json(cls, d: Any) -> CowChange:
        c = Change.from_json(d)
        d = _obj(d)
        return cls(
            path=c.path,
            kind=c.kind,
            before=c.before,
            after=c.after,
            binary=c.binary,
            unified=c.unified,
            truncated=c.truncated,
            refused=_str(d.get("refused")),
            conflict=_str(d.get("conflict")),
            entry=_str(d.get("entry")),
            warning=_str(d.get("warning")),
        )


@dataclass(frozen=True)
class CowMount:
    """A copy-on-write mount's pending change: the host directory source
    seen at target, and what the sandbox changed in it."""

    target: str
    source: str
    changes: tuple[CowChange, ...] = ()
    #: Only an operator may apply or discard (the daemon's policy).
    approval: bool = False
    truncated: bool = False

    @classmethod
    def from_json(cls, d: Any) -> CowMount:
        d = _obj(d)
        ch = d.get("changes")
        return cls(
            target=_str(d.get("target")),
            source=_str(d.get("source")),
            changes=tuple(CowChange.from_json(c) for c in ch) if isinstance(ch, list) else (),
            approval=bool(d.get("approval")),
            truncated=bool(d.get("truncated")),
        )

    def reviewed(self) -> dict[str, str]:
        """The expect of an apply of what this listing shows: each change's
        path and entry."""
        return {c.path: c.entry for c in self.changes}


@dataclass(frozen=True)
class AppliedChange:
    """A path an apply wrote: digest is the sha256 of the content written,
    before the host's when the sandbox started (files only)."""

    path: str
    kind: str
    digest: str = ""
    before: str = ""
    note: str = ""

    @classmethod
    def from_json(cls, d: Any) -> AppliedChange:
        d = _obj(d)
        return cls(path=_str(d.get("path")), kind=_str(d.get("kind")), digest=_str(d.get("digest")), before=_str(d.get("before")), note=_str(d.get("note")))


def _reasons(v: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(v, list):
        return ()
    return tuple((_str(_obj(r).get("path")), _str(_obj(r).get("reason"))) for r in v if isinstance(r, dict))


@dataclass(frozen=True)
class ApplyResult:
    """What an apply did: the paths written, and those refused as (path,
    reason) pairs."""

    target: str
    applied: tuple[AppliedChange, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_json(cls, d: Any) -> ApplyResult:
        d = _obj(d)
        a = d.get("applied")
        return cls(
            target=_str(d.get("target")),
            applied=tuple(AppliedChange.from_json(x) for x in a) if isinstance(a, list) else (),
            refused=_reasons(d.get("refused")),
        )


@dataclass(frozen=True)
class DiscardResult:
    """What a discard did."""

    target: str
    discarded: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_json(cls, d: Any) -> DiscardResult:
        d = _obj(d)
        return cls(target=_str(d.get("target")), discarded=_strs(d.get("discarded")), refused=_reasons(d.get("refused")))


@dataclass(frozen=True)
class PendingChange:
    """A sandbox's copy-on-write mount with pending changes (operators)."""

    sandbox: str
    key: str
    target: str
    source: str
    count: int
    approval: bool = False
    key_name: str = ""

    @classmethod
    def from_json(cls, d: Any) -> PendingChange:
        d = _obj(d)
        return cls(
            sandbox=_str(d.get("sandbox")),
            key=_str(d.get("key")),
            target=_str(d.get("target")),
            source=_str(d.get("source")),
            count=_int(d.get("count")),
            approval=bool(d.get("approval")),
            key_name=_str(d.get("key_name")),
        )


@dataclass(frozen=True)
class Mount:
    """A host path shown inside a sandbox: read-only, writable, or
    copy-on-write (cow: the sandbox writes a layer of its own; its changes
    reach the host when applied). The daemon's policy must list it."""

    source: str
    target: str
    writable: bool = False
    cow: bool = False

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"source": self.source, "target": self.target}
        if self.writable:
            d["writable"] = True
        if self.cow:
            d["cow"] = True
        return d

    @classmethod
    def parse(cls, s: str) -> Mount:
        """Reads HOST:PATH[:ro|:rw|:cow]."""
        parts = s.split(":")
        if len(parts) == 2:
            return cls(parts[0], parts[1])
        if len(parts) == 3 and parts[2] in ("ro", "rw", "cow"):
            return cls(parts[0], parts[1], writable=parts[2] == "rw", cow=parts[2] == "cow")
        raise ValueError(f"mount {s!r}: write HOST:PATH, HOST:PATH:ro, HOST:PATH:rw or HOST:PATH:cow")
