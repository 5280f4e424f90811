"""Errors of the airlock SDK.

Every error the SDK raises is an :class:`AirlockError`. An error the daemon
answered with is an :class:`APIError` carrying the API's stable ``code``
(``"not_found"``, ``"denied"``, ``"rate_limited"``, ...), its HTTP
``status`` and its ``message``, which says what to do next in words a model
can act on. Each code has its own class, so that::

    try:
        sb.exec(["curl", "https://example.com"])
    except airlock.Denied as e:
        print("the policy refused it:", e.rule, e.reason)
    except airlock.RateLimited as e:
        time.sleep(e.retry_after or 1)

No error carries the API key: messages come from the daemon's answer body,
which never echoes it.
"""

from __future__ import annotations

import re
from typing import ClassVar

__all__ = [
    "AirlockError",
    "ConfigError",
    "ConnectionFailed",
    "UnsafeArchive",
    "APIError",
    "InvalidRequest",
    "PathOutside",
    "IsADirectory",
    "BadArchive",
    "ArchiveRefused",
    "Unauthorized",
    "Forbidden",
    "PermissionDenied",
    "Denied",
    "NotFound",
    "MethodNotAllowed",
    "Conflict",
    "NotRunning",
    "ApplyConflict",
    "ApprovalRequired",
    "Exists",
    "TooLarge",
    "RateLimited",
    "QuotaExceeded",
    "LimitExceeded",
    "ServerError",
    "InternalError",
    "Unsupported",
    "InsufficientCapacity",
    "AuditUnavailable",
    "TypeRefused",
    "StoreUnavailable",
    "StoreDenied",
    "error_for",
]


class AirlockError(Exception):
    """The base of every error this SDK raises."""


class ConfigError(AirlockError, ValueError):
    """The client is set up wrongly: no URL or key, or a malformed URL."""


class ConnectionFailed(AirlockError, ConnectionError):
    """The daemon could not be reached, or its answer broke off.

    Nothing is known about whether the request took effect: a command may
    have run, a sandbox may exist. List sandboxes to find out.
    """


class UnsafeArchive(AirlockError, ValueError):
    """A downloaded archive held an entry that would land outside the
    destination directory (an absolute or ``..`` name, a link pointing out,
    a device): nothing of that entry was written."""


class APIError(AirlockError):
    """An error the daemon answered with.

    Attributes:
        status: the HTTP status code.
        code: the API's stable error code (``"not_found"``, ...).
        message: what went wrong and what to do, as the daemon said it.
        retry_after: seconds the daemon asked to wait (rate limits), or None.
    """

    #: The code this class stands for (None: several or any).
    code_name: ClassVar[str | None] = None

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.message} ({self.status} {self.code})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, message={self.message!r})"


class InvalidRequest(APIError):
    """400 ``invalid``: the request was malformed; the message says which field."""

    code_name = "invalid"


class PathOutside(InvalidRequest):
    """400 ``path_outside``: a path leaves the sandbox (``..``, or a link out)."""

    code_name = "path_outside"


class IsADirectory(InvalidRequest):
    """400 ``is_directory``: a file was asked for and the path is a directory."""

    code_name = "is_directory"


class BadArchive(InvalidRequest):
    """400 ``bad_archive``: an upload is not a valid tar archive."""

    code_name = "bad_archive"


class ArchiveRefused(InvalidRequest):
    """``archive_refused``: an upload held an entry the daemon refuses (a name
    leaving the directory, a hard link, a device, a file past the limits); the
    message says which entry and how many before it were extracted."""

    code_name = "archive_refused"


class Unauthorized(APIError):
    """401 ``unauthorized``: no key, a malformed one, or one unknown or revoked."""

    code_name = "unauthorized"


class Forbidden(APIError):
    """403 ``forbidden``: this key may not do that (an agent key asking for an
    operator's route, or another key's sandbox); also ``host_not_allowed`` and
    ``origin_not_allowed`` (the daemon's DNS-rebinding protection)."""

    code_name = "forbidden"


class ApprovalRequired(Forbidden):
    """403 ``approval_required``: the daemon's policy says a person must
    decide the changes of this copy-on-write mount: an operator applies or
    discards them (the web page's Changes, or an operator key)."""

    code_name = "approval_required"


class PermissionDenied(APIError):
    """403 ``permission_denied``: the sandbox's file system refused (a file
    the sandbox's user may not write, or the read-only root)."""

    code_name = "permission_denied"


_DENIED = re.compile(r"denied by policy \((?P<rule>[^)]*)\): (?P<reason>.*)", re.DOTALL)
_APPROVAL = re.compile(r"^approval (?P<id>ap-[A-Za-z0-9_-]+) (?P<state>[a-z]+)")


class Denied(APIError):
    """403 ``denied``: the daemon's policy refused the action.

    A denial is not a failure of the sandbox: the action was never carried
    out. Tell the model ``reason`` and let it try another way.

    Attributes:
        rule: the policy rule that decided, e.g. ``"rule:no-curl"`` or
            ``"check:destructive_delete"`` (None when the message does not
            name one).
        reason: why, in words meant for the agent.
        approval_id: when a person was asked and denied it (or nobody
            answered in time), the approval's id (``"ap-..."``); else None.
        approval_state: that approval's state (``"denied"``, ``"expired"``,
            ``"cancelled"``), or None.
    """

    code_name = "denied"

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(status, code, message, retry_after)
        m = _DENIED.search(message)
        self.rule: str | None = m.group("rule") if m else None
        self.reason: str = m.group("reason") if m else message
        a = _APPROVAL.match(self.reason)
        self.approval_id: str | None = a.group("id") if a else None
        self.approval_state: str | None = a.group("state") if a else None


class NotFound(APIError):
    """404 ``not_found``: no such sandbox, process, file, key or approval
    (or one this key may not see)."""

    code_name = "not_found"


class MethodNotAllowed(APIError):
    """405 ``method_not_allowed``: the route exists with other methods."""

    code_name = "method_not_allowed"


class Conflict(APIError):
    """409: the target is in a state that does not allow it."""


class NotRunning(Conflict):
    """409 ``not_running``: the sandbox has ended (killed, expired, lost)."""

    code_name = "not_running"


class ApplyConflict(Conflict):
    """409 ``conflict``: an apply of a copy-on-write mount's changes found
    that the host changed under some of its paths since the sandbox started;
    nothing was applied. ``conflicts`` lists them as (path, reason) pairs:
    discard those paths, or apply the others by naming them."""

    code_name = "conflict"

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(status, code, message, retry_after)
        self.conflicts: list[tuple[str, str]] = []


class VersionMismatch(Conflict):
    """409 ``version_mismatch``: a daemon of another agent protocol made the
    sandbox (before an upgrade); it runs until its TTL and can only be
    deleted."""

    code_name = "version_mismatch"


class Exists(Conflict):
    """409 ``exists``: the path exists already (or a directory is not empty)."""

    code_name = "exists"


class TooLarge(APIError):
    """413 ``too_large``: a request body or a download is past the daemon's limits."""

    code_name = "too_large"


class RateLimited(APIError):
    """429 ``rate_limited``: this key acts too fast; wait ``retry_after``
    seconds and try again."""

    code_name = "rate_limited"


class QuotaExceeded(APIError):
    """429 ``quota_exceeded``: this key holds as many sandboxes, or as much
    memory, as its quota allows; kill one first."""

    code_name = "quota_exceeded"


class LimitExceeded(APIError):
    """507 ``limit``: a sandbox limit was reached (the disk is full, a file
    is larger than the sandbox's disk, too many entries)."""

    code_name = "limit"


class ServerError(APIError):
    """5xx: the daemon could not do it; the message (or the daemon's log) says why."""


class InternalError(ServerError):
    """500 ``internal``: a failure inside the daemon; its log has the details."""

    code_name = "internal"


class Unsupported(ServerError):
    """501 ``unsupported``: this host or driver cannot do it."""

    code_name = "unsupported"


class InsufficientCapacity(ServerError):
    """503 ``insufficient_capacity``: the host lacks the memory for this
    sandbox now; try later or ask for less."""

    code_name = "insufficient_capacity"


class AuditUnavailable(ServerError):
    """503 ``audit_unavailable``: the audit log cannot record actions, so the
    daemon refuses them."""

    code_name = "audit_unavailable"


class TypeRefused(APIError):
    """415 ``type_refused``: an export's file is, by its bytes (never its
    name), a content type the sandbox's template does not export; nothing
    was stored."""

    code_name = "type_refused"


class StoreUnavailable(ServerError):
    """502 ``store_unavailable``: the daemon's object store does not answer;
    nothing was stored. Retry once it is back."""

    code_name = "store_unavailable"


class StoreDenied(ServerError):
    """502 ``store_denied``: the daemon's object store refuses its
    credentials (the operator's config); nothing was stored."""

    code_name = "store_denied"


def _by_code() -> dict[str, type[APIError]]:
    out: dict[str, type[APIError]] = {}
    todo: list[type[APIError]] = [APIError]
    while todo:
        cls = todo.pop()
        if cls.code_name:
            out[cls.code_name] = cls
        todo.extend(cls.__subclasses__())
    # Codes answered by a broader class.
    for code in ("host_not_allowed", "origin_not_allowed", "csrf"):
        out[code] = Forbidden
    return out


_CODES = _by_code()
_STATUSES: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: TooLarge,
    415: TypeRefused,
    429: RateLimited,
    500: InternalError,
    501: Unsupported,
    507: LimitExceeded,
}


def error_for(status: int, code: str, message: str, retry_after: float | None = None) -> APIError:
    """Returns the error of the class for ``code`` (or, for a code this SDK
    does not know, for ``status``)."""
    cls = _CODES.get(code) or _STATUSES.get(status) or (ServerError if status >= 500 else APIError)
    return cls(status, code, message, retry_after)
