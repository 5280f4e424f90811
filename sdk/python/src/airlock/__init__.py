"""airlock: run untrusted, agent-generated code in sandboxes of an airlock
daemon (``airlock serve``), from Python.

::

    import airlock

    client = airlock.Client()                  # AIRLOCK_URL, AIRLOCK_API_KEY
    with client.create_sandbox() as sb:        # killed when the block ends
        r = sb.run_code("print(6 * 7)")
        print(r.stdout_text, r.reason, r.exit_code)

Standard library only. The API itself is described by the daemon's OpenAPI
document (GET /v1/openapi.json); this package mirrors the Go SDK
(``client/`` in the airlock repository) in Python's terms.
"""

from ._exec import ExecStream, Process
from ._version import __version__
from .client import ENV_KEY, ENV_URL, Client
from .errors import (
    AirlockError,
    APIError,
    ArchiveRefused,
    AuditUnavailable,
    BadArchive,
    ConfigError,
    Conflict,
    ConnectionFailed,
    Denied,
    Exists,
    Forbidden,
    InsufficientCapacity,
    InternalError,
    InvalidRequest,
    IsADirectory,
    LimitExceeded,
    MethodNotAllowed,
    NotFound,
    NotRunning,
    PathOutside,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    ServerError,
    StoreDenied,
    StoreUnavailable,
    TooLarge,
    TypeRefused,
    Unauthorized,
    UnsafeArchive,
    Unsupported,
    VersionMismatch,
)
from .models import (
    Approval,
    ArchiveResult,
    EgressHost,
    EgressSummary,
    Event,
    ExecResult,
    ExportedObject,
    ExportResult,
    FileInfo,
    Health,
    Key,
    Limits,
    Network,
    PoolStatus,
    Quota,
    RateLimits,
    Change,
    Diff,
    RestoreResult,
    Result,
    Rollback,
    SandboxInfo,
    SnapshotInfo,
    TreeEntry,
    Usage,
)
from .sandbox import Sandbox

__all__ = [
    "__version__",
    "Client",
    "ENV_URL",
    "ENV_KEY",
    "Sandbox",
    "ExecStream",
    "Process",
    # models
    "Approval",
    "ArchiveResult",
    "EgressHost",
    "EgressSummary",
    "Event",
    "ExecResult",
    "ExportedObject",
    "ExportResult",
    "FileInfo",
    "Health",
    "Key",
    "Limits",
    "Network",
    "PoolStatus",
    "Quota",
    "RateLimits",
    "Result",
    "Rollback",
    "SandboxInfo",
    "SnapshotInfo",
    "TreeEntry",
    "Change",
    "Diff",
    "RestoreResult",
    "Usage",
    # errors
    "AirlockError",
    "APIError",
    "ArchiveRefused",
    "AuditUnavailable",
    "BadArchive",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "Denied",
    "Exists",
    "Forbidden",
    "InsufficientCapacity",
    "InternalError",
    "InvalidRequest",
    "IsADirectory",
    "LimitExceeded",
    "MethodNotAllowed",
    "NotFound",
    "NotRunning",
    "PathOutside",
    "PermissionDenied",
    "QuotaExceeded",
    "RateLimited",
    "ServerError",
    "StoreDenied",
    "StoreUnavailable",
    "TooLarge",
    "TypeRefused",
    "Unauthorized",
    "UnsafeArchive",
    "Unsupported",
    "VersionMismatch",
]
