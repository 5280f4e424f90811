"""Snapshots of a sandbox's files: take, list, restore, diff, fork."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import quote

from .models import Diff, ExportResult, RestoreResult, SandboxInfo, SnapshotInfo, _obj

if TYPE_CHECKING:
    from ._transport import Transport
    from .client import Client
    from .sandbox import Sandbox

__all__ = ["SnapshotsMixin", "snapshot_path", "fork_body"]


def snapshot_path(ref: str, sandbox: str | None = None) -> str:
    """The path of snapshot ref: an id, or a name of sandbox's snapshots."""
    if not ref or not isinstance(ref, str):
        raise ValueError("a snapshot is named by its id (sn-...) or its name")
    if sandbox:
        return "/".join(("/v1/sandboxes", quote(sandbox, safe=""), "snapshots", quote(ref, safe="")))
    return "/v1/snapshots/" + quote(ref, safe="")


def fork_body(sandbox: str | None, ttl: float | None, env: Mapping[str, str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if sandbox:
        body["sandbox"] = sandbox
    if ttl is not None:
        if ttl <= 0:
            raise ValueError(f"ttl {ttl}: give a positive number of seconds")
        body["ttl_seconds"] = int(-(-ttl // 1))
    if env:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    return body


def diff_query(from_: str | None, to: str | None, step: int | None) -> dict[str, Any]:
    if step is not None and (from_ is not None or to is not None):
        raise ValueError("give step, or from_ and to, not both")
    return {"from": from_, "to": to, "step": step}


class SnapshotsMixin:
    """The snapshot methods of Sandbox."""

    id: str
    client: Client
    _t: Transport

    def _path(self, *rest: str) -> str:  # pragma: no cover - Sandbox's
        raise NotImplementedError

    def snapshot(self, name: str | None = None, *, label: str | None = None, include_tmp: bool = False) -> SnapshotInfo:
        """Saves the sandbox's /workspace (and /tmp with include_tmp):
        files, directories, symlinks, modes. Running processes are not
        saved. Unchanged files cost nothing: content is stored once.

        Args:
            name: unique among the sandbox's snapshots (letters, digits,
                ".", "_", "-"), to restore or diff it by.
            label: free text kept with it.

        Raises InvalidRequest (a bad name, or a FIFO, socket or device in
        the workspace, named in the message), LimitExceeded (more files
        than allowed, a tree too deep), QuotaExceeded, Exists (the name is
        taken).
        """
        body: dict[str, Any] = {}
        if name:
            body["name"] = name
        if label:
            body["label"] = label
        if include_tmp:
            body["include_tmp"] = True
        return SnapshotInfo.from_json(self._t.request("POST", self._path("snapshots"), json_body=body, read_timeout=None).json())

    def snapshots(self) -> list[SnapshotInfo]:
        """The sandbox's snapshots, oldest first (checkpoints included)."""
        d = _obj(self._t.request("GET", self._path("snapshots")).json())
        return [SnapshotInfo.from_json(s) for s in d.get("snapshots") or []]

    def restore(self, snapshot: str | None = None, *, undo_steps: int | None = None) -> RestoreResult:
        """Makes /workspace (and /tmp, if the snapshot has it) exactly the
        snapshot (its id or name): files added since are removed, changed
        ones reverted, modes and symlinks put back, all or nothing. Or,
        with undo_steps, the state before the last undo_steps commands (a
        sandbox created with checkpoints). Running processes go on running.
        """
        if (snapshot is None) == (undo_steps is None):
            raise ValueError("give a snapshot or undo_steps, one of them")
        body: dict[str, Any] = {"snapshot": snapshot} if snapshot is not None else {"undo_steps": int(undo_steps or 0)}
        return RestoreResult.from_json(self._t.request("POST", self._path("restore"), json_body=body, read_timeout=None).json())

    def diff(self, from_: str | None = None, to: str | None = None, *, step: int | None = None) -> Diff:
        """What changed: from from_ (a snapshot id or name, or "now";
        default the latest snapshot) to to (default "now"); or, with step,
        what command number step changed (a sandbox with checkpoints).
        Text files come with unified diffs (capped), binary ones marked."""
        q = diff_query(from_, to, step)
        return Diff.from_json(self._t.request("GET", self._path("diff"), query=q, read_timeout=None).json())

    def diff_text(self, from_: str | None = None, to: str | None = None, *, step: int | None = None) -> str:
        """diff() as text for people: a line per change, then the unified
        diffs."""
        q = diff_query(from_, to, step)
        q["format"] = "text"
        resp = self._t.request("GET", self._path("diff"), query=q, accept="text/plain", read_timeout=None)
        try:
            return resp.read().decode("utf-8", "replace")
        finally:
            resp.close()

    def export(self, path: str, to: str, *, exec_id: str | None = None) -> ExportResult:
        """Stores a file, or every regular file of a directory tree, of the
        sandbox in the daemon's object store, so that it outlives the
        sandbox: ``to`` is ``s3://BUCKET/PREFIX/`` (a directory's files go
        under it at their paths; a file under it with its name) or
        ``s3://BUCKET/KEY`` for one file. Each file's content type is found
        from its bytes (never its name) and must be one the template
        exports; all or nothing.

        Raises TypeRefused (a file's bytes are a type the template does not
        export), TooLarge (over the template's export_max), Forbidden (a
        bucket the daemon does not export to, a template without
        export_types), StoreUnavailable, StoreDenied, Unsupported (the
        daemon has no object store).
        """
        if not path or not isinstance(path, str):
            raise ValueError("path: give the sandbox's file or directory")
        if not isinstance(to, str) or not to.startswith("s3://"):
            raise ValueError(f"to {to!r}: give s3://BUCKET/PREFIX/")
        body: dict[str, Any] = {"path": path if path.startswith("/") else "/workspace/" + path, "to": to}
        if exec_id:
            body["exec"] = exec_id
        return ExportResult.from_json(self._t.request("POST", self._path("export"), json_body=body, read_timeout=None).json())

    def fork(self, snapshot: str, *, ttl: float | None = None, env: Mapping[str, str] | None = None) -> Sandbox:
        """A new sandbox from one of this sandbox's snapshots (id or name):
        the same template, its own identity, the snapshot's files."""
        from .sandbox import Sandbox

        body = fork_body(None, ttl, env)
        d = _obj(self._t.request("POST", snapshot_path(snapshot, self.id) + "/fork", json_body=body, read_timeout=None).json())
        info = SandboxInfo.from_json(d.get("sandbox"))
        return Sandbox(self.client, info.id, info)
