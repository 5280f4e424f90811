"""HTTP to one daemon: a small pool of keep-alive connections (http.client),
the Authorization header, and the API's JSON errors turned into classes."""

from __future__ import annotations

import http.client
import json
import logging
import math
import socket
import ssl
import threading
import time
import urllib.parse
from typing import IO, Any, Iterable, Mapping, Union

from .errors import APIError, ApplyConflict, ConfigError, ConnectionFailed, error_for

log = logging.getLogger("airlock")

#: What a request body may be: bytes, a binary file, or an iterable of
#: bytes chunks (sent chunked).
Body = Union[bytes, IO[bytes], Iterable[bytes], None]

_MAX_IDLE = 8
_MAX_ERROR_BODY = 4 << 20
_BLOCK = 1 << 16


class _Secret:
    """Holds the API key so that no repr, str or log line shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "REDACTED"

    __str__ = __repr__


def parse_url(url: str) -> urllib.parse.SplitResult:
    """Checks a daemon URL: http or https, a host, no credentials in it."""
    try:
        u = urllib.parse.urlsplit(url.strip())
        u.port  # raises ValueError on a bad port
    except ValueError as e:
        raise ConfigError(f"airlock URL {url!r}: {e}; give http://HOST:PORT") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ConfigError(f"airlock URL {url!r}: give http://HOST:PORT or https://HOST:PORT")
    if u.username is not None or u.password is not None:
        raise ConfigError("airlock URL: leave credentials out of the URL and give the API key as api_key")
    if u.query or u.fragment:
        raise ConfigError(f"airlock URL {url!r}: no query or fragment, only http://HOST:PORT[/PREFIX]")
    return u


class Response:
    """A response whose status is 2xx, with its body still to read. Close
    it (or read it to the end) to give the connection back."""

    def __init__(self, transport: Transport, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, what: str) -> None:
        self._t = transport
        self._conn: http.client.HTTPConnection | None = conn
        self._resp = resp
        self._what = what
        self.status = resp.status
        self.headers = resp.headers

    def read(self, n: int = -1) -> bytes:
        try:
            return self._resp.read() if n < 0 else self._resp.read(n)
        except (http.client.HTTPException, OSError) as e:
            self.close()
            raise ConnectionFailed(f"{self._what}: the daemon's answer broke off: {e!r}") from None

    def read1(self, n: int = _BLOCK) -> bytes:
        try:
            return self._resp.read1(n)
        except (http.client.HTTPException, OSError) as e:
            self.close()
            raise ConnectionFailed(f"{self._what}: the daemon's answer broke off: {e!r}") from None

    def readline(self, limit: int = -1) -> bytes:
        try:
            return self._resp.readline(limit)
        except (http.client.HTTPException, OSError) as e:
            self.close()
            raise ConnectionFailed(f"{self._what}: the daemon's answer broke off: {e!r}") from None

    def json(self) -> Any:
        """Reads the whole body as JSON and releases the connection."""
        body = self.read()
        self.close()
        try:
            return json.loads(body) if body else None
        except ValueError:
            raise ConnectionFailed(f"{self._what}: the daemon's answer is not JSON") from None

    def discard(self) -> None:
        """Reads and drops the body, then releases the connection."""
        self.read()
        self.close()

    def close(self) -> None:
        """Releases the connection: back to the pool when the body was read
        to its end, closed otherwise (which also cancels the request on the
        daemon's side, e.g. kills a streaming command)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._resp.isclosed() and not self._resp.will_close:
            self._t._release(conn)
        else:
            self._resp.close()
            conn.close()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport:
    """Sends requests to one daemon. Safe for concurrent use: each request
    takes its own connection."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float | None,
        connect_timeout: float,
        ssl_context: ssl.SSLContext | None,
        user_agent: str,
    ) -> None:
        u = parse_url(url)
        self.scheme = u.scheme
        self.host = u.hostname or ""
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"{self.scheme}://{host}:{self.port}{self.prefix}"
        self._key = _Secret(api_key)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._ssl = ssl_context
        self._ua = user_agent
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def _new_conn(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.scheme == "https":
            ctx = self._ssl or ssl.create_default_context()
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.connect_timeout, context=ctx, blocksize=_BLOCK)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout, blocksize=_BLOCK)
        return conn

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._new_conn(), False

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Closes the idle connections; later requests open new ones."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        json_body: Any = None,
        body: Body = None,
        length: int | None = None,
        content_type: str | None = None,
        accept: str | None = None,
        read_timeout: float | None | bool = True,
    ) -> Response:
        """Sends a request and returns its 2xx response, or raises the API's
        error. ``read_timeout=True`` means the client's timeout; None waits
        as long as the daemon takes."""
        target = self.prefix + path
        q = {k: v for k, v in (query or {}).items() if v is not None}
        if q:
            target += "?" + urllib.parse.urlencode(q)
        headers = {"Authorization": "Bearer " + self._key.get(), "User-Agent": self._ua, "Accept": accept or "application/json"}
        if json_body is not None:
            body = json.dumps(json_body, separators=(",", ":")).encode()
            content_type = "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        if isinstance(body, (bytes, bytearray, memoryview)):
            length = len(body)
        chunked = body is not None and length is None
        if length is not None:
            headers["Content-Length"] = str(length)
        elif body is None and method in ("POST", "PUT"):
            headers["Content-Length"] = "0"
        timeout = self.timeout if read_timeout is True else read_timeout
        what = f"{method} {path}"
        replayable = body is None or isinstance(body, (bytes, bytearray, memoryview))
        start = time.monotonic()
        for attempt in (0, 1):
            conn, reused = self._take()
            try:
                if conn.sock is None:
                    conn.connect()
                sock = conn.sock
                assert sock is not None
                sock.settimeout(timeout)
                conn.request(method, target, body=body, headers=headers, encode_chunked=chunked)
                resp = conn.getresponse()
                break
            except (http.client.HTTPException, OSError) as e:
                conn.close()
                # An idle connection the daemon closed meanwhile: try once
                # more on a new one when the body can be sent again.
                stale = isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError))
                if attempt == 0 and reused and stale and replayable:
                    continue
                if isinstance(e, socket.timeout):
                    raise ConnectionFailed(f"{what}: the airlock daemon at {self.url} did not answer within {timeout} s") from None
                raise ConnectionFailed(f"{what}: cannot reach the airlock daemon at {self.url} ({e!r}); is `airlock serve` running there?") from None
        log.debug("%s %s -> %d (%.0f ms)", method, path, resp.status, (time.monotonic() - start) * 1000)
        if 200 <= resp.status < 300:
            return Response(self, conn, resp, what)
        err = self._error(resp)
        resp.close()
        conn.close()
        raise err

    @staticmethod
    def _error(resp: http.client.HTTPResponse) -> APIError:
        status = resp.status
        code, message = f"http_{status}", f"{status} {resp.reason}"
        conflicts: list[tuple[str, str]] = []
        try:
            raw = resp.read(_MAX_ERROR_BODY)
            body = json.loads(raw)
            e = body.get("error") if isinstance(body, dict) else None
            if isinstance(e, dict) and isinstance(e.get("code"), str) and e["code"]:
                code, message = e["code"], str(e.get("message", ""))
            for c in body.get("conflicts") or [] if isinstance(body, dict) else []:
                if isinstance(c, dict):
                    conflicts.append((str(c.get("path", "")), str(c.get("reason", ""))))
        except (http.client.HTTPException, OSError, ValueError):
            pass
        retry_after = None
        ra = resp.headers.get("Retry-After")
        if ra:
            try:
                v = float(ra)
                if v >= 0 and math.isfinite(v):
                    retry_after = v
            except ValueError:
                pass
        err = error_for(status, code, message, retry_after)
        if isinstance(err, ApplyConflict):
            err.conflicts = conflicts
        return err
