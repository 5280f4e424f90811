"""A sandbox handle: lifecycle, egress summary, and (from its mixins)
commands, processes and files."""

from __future__ import annotations

import logging
import math
import sys
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import quote

from ._exec import ExecMixin
from ._files import FilesMixin
from ._changes import ChangesMixin
from ._snapshots import SnapshotsMixin
from .errors import NotFound
from .models import EgressSummary, SandboxInfo

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Sandbox"]

log = logging.getLogger("airlock")


class Sandbox(ExecMixin, FilesMixin, SnapshotsMixin, ChangesMixin):
    """One sandbox of the daemon. Get it from Client.create_sandbox (or
    Client.get_sandbox, Client.sandbox, Client.list_sandboxes).

    As a context manager it kills the sandbox when the block ends, however
    it ends (an exception, a KeyboardInterrupt)::

        with client.create_sandbox() as sb:
            print(sb.exec(["python3", "-V"]).stdout_text)
        # the sandbox is gone here

    Without ``with``, call kill() when done; the daemon also kills it when
    its TTL or idle timeout passes.

    Snapshots (snapshot, snapshots, restore, diff, fork) save and put back
    its files; ``exec(..., rollback="on_failure")`` undoes a failed
    command's changes.

    Attributes:
        id: the sandbox's id ("sb-...").
        info: what the daemon last said about it (None for a handle made
            with Client.sandbox until refresh()).
        client: the Client it talks through.
    """

    def __init__(self, client: Client, id: str, info: SandboxInfo | None = None) -> None:
        if not id or not isinstance(id, str):
            raise ValueError("a sandbox id is a non-empty string (sb-...)")
        self.client = client
        self.id = id
        self.info = info
        self._t = client._transport

    def _path(self, *rest: str) -> str:
        return "/".join(("/v1/sandboxes", quote(self.id, safe=""), *rest))

    def __repr__(self) -> str:
        state = f", state={self.info.state!r}" if self.info else ""
        return f"Sandbox({self.id!r}{state})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id and other._t is self._t

    def __hash__(self) -> int:
        return hash(self.id)

    def refresh(self) -> SandboxInfo:
        """Asks the daemon about the sandbox (live or ended) and keeps the
        answer in ``info``. Raises NotFound once an ended sandbox's record
        is gone (after the daemon's retention, 1 h by default)."""
        self.info = SandboxInfo.from_json(self._t.request("GET", self._path()).json())
        return self.info

    def kill(self) -> None:
        """Destroys the sandbox: every process, file and mount of it.
        Killing a sandbox that has ended already is no error."""
        self._t.request("DELETE", self._path()).discard()

    def pause(self) -> SandboxInfo:
        """Pauses the sandbox: its processes and memory are saved on the
        daemon (or frozen where its driver can only do that) and it uses no
        CPU; its TTL and idle timeout wait. A driver without pause raises
        UnsupportedError with its reason. Returns the updated info
        (state "paused")."""
        self.info = SandboxInfo.from_json(self._t.request("POST", self._path("pause")).json())
        return self.info

    def resume(self) -> SandboxInfo:
        """Resumes a paused sandbox where it stopped (a running one is
        returned as it is), and returns its updated info."""
        self.info = SandboxInfo.from_json(self._t.request("POST", self._path("resume")).json())
        return self.info

    def fork_live(self, count: int = 1, *, ttl: float | None = None, metadata: dict[str, str] | None = None) -> list[Sandbox]:
        """Copies the running sandbox, its processes and their memory, into
        count (1 to 16) new running sandboxes, each with its own id, host
        name, machine id and entropy; this one runs on. A driver without
        live fork raises Unsupported with its reason. (fork, from
        SnapshotsMixin, makes a sandbox from a snapshot of the files.)"""
        body: dict[str, object] = {"live": True, "count": count}
        if ttl is not None:
            if ttl <= 0 or not math.isfinite(ttl):
                raise ValueError(f"ttl {ttl}: give a positive number of seconds")
            body["ttl_seconds"] = math.ceil(ttl)
        if metadata is not None:
            body["metadata"] = {str(k): str(v) for k, v in metadata.items()}
        d = self._t.request("POST", self._path("fork"), json_body=body, read_timeout=None).json()
        out: list[Sandbox] = []
        for raw in d.get("sandboxes") or []:
            info = SandboxInfo.from_json(raw)
            out.append(Sandbox(self.client, info.id, info))
        return out

    def extend(self, ttl: float) -> SandboxInfo:
        """Makes the sandbox live for ttl seconds from now (at most the
        template's max_ttl), and returns its updated info."""
        if ttl <= 0 or not math.isfinite(ttl):
            raise ValueError(f"ttl {ttl}: give a positive number of seconds")
        body = {"ttl_seconds": math.ceil(ttl)}
        self.info = SandboxInfo.from_json(self._t.request("POST", self._path("timeout"), json_body=body).json())
        return self.info

    #: The Go SDK's name for extend.
    set_timeout = extend

    def egress(self) -> EgressSummary:
        """What the sandbox did through its egress proxy: requests allowed,
        denied (and would-deny in report mode), bytes, per host. Raises
        NotFound for a sandbox without network."""
        return EgressSummary.from_json(self._t.request("GET", self._path("egress")).json())

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.kill()
        except NotFound:
            pass
        except Exception as e:
            if exc is None:
                raise
            # Do not hide the error that ended the block; say that the
            # sandbox may be left (its TTL still ends it).
            log.warning("could not kill sandbox %s while handling %s: %s", self.id, exc_type.__name__ if exc_type else "an error", e)
            if sys.version_info >= (3, 11):
                exc.add_note(f"airlock: sandbox {self.id} could not be killed ({e}); its TTL will end it")
