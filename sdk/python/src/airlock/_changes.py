"""Copy-on-write mounts: review a sandbox's changes to host directories,
apply or discard them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .models import ApplyResult, CowMount, DiscardResult, _obj

if TYPE_CHECKING:
    from ._transport import Transport

__all__ = ["ChangesMixin"]


def _body(paths: Sequence[str] | None, target: str | None, expect: Mapping[str, str] | None = None) -> dict[str, Any]:
    if isinstance(paths, str):
        raise ValueError("paths: give a list of paths, not one string")
    body: dict[str, Any] = {}
    if target:
        body["target"] = target
    if paths:
        body["paths"] = [str(p) for p in paths]
    if expect:
        body["expect"] = {str(k): str(v) for k, v in expect.items()}
    return body


class ChangesMixin:
    """The copy-on-write methods of Sandbox."""

    _t: Transport

    def _path(self, *rest: str) -> str:  # pragma: no cover - Sandbox's
        raise NotImplementedError

    def changes(self) -> list[CowMount]:
        """The pending changes of the sandbox's copy-on-write mounts (host
        directories mounted HOST:PATH:cow): added, deleted, modified, mode,
        symlink and type changes in the format of diff(), with what an
        apply would refuse and the paths the host changed meanwhile. Empty
        for a sandbox without one."""
        d = _obj(self._t.request("GET", self._path("changes"), read_timeout=None).json())
        return [CowMount.from_json(m) for m in d.get("mounts") or []]

    def apply_changes(
        self, paths: Sequence[str] | None = None, *, target: str | None = None, expect: Mapping[str, str] | None = None
    ) -> ApplyResult:
        """Writes the changes at paths (relative to the mount or absolute in
        the sandbox; a directory stands for all below it; None: every
        change) to the host, each file atomically. target names the mount
        when the sandbox has more than one. expect maps paths to the entry
        each change showed the reviewer (change.entry, "" for a deletion;
        CowMount.reviewed() makes it): a change the sandbox made since (its
        type, mode, size, content or symlink target) is a conflict, and the
        host gets only what was reviewed, mode included.

        Raises ApplyConflict (the host changed under some paths since the
        sandbox started: nothing was applied; see its conflicts),
        ApprovalRequired (only an operator may decide this mount's
        changes), InvalidRequest (a path outside the mount), NotFound.
        """
        return ApplyResult.from_json(self._t.request("POST", self._path("changes", "apply"), json_body=_body(paths, target, expect), read_timeout=None).json())

    def discard_changes(self, paths: Sequence[str] | None = None, *, target: str | None = None) -> DiscardResult:
        """Drops the changes at paths (as apply_changes) from the sandbox's
        layer: it sees the host's files there again. Raises
        ApprovalRequired, InvalidRequest, NotFound."""
        return DiscardResult.from_json(self._t.request("POST", self._path("changes", "discard"), json_body=_body(paths, target), read_timeout=None).json())
