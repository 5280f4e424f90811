"""Running commands: exec (whole result, or streamed), background processes."""

from __future__ import annotations

import base64
import json
import math
import signal as _signal
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence, Union

from ._transport import Response
from .errors import ConnectionFailed, error_for
from .models import Event, ExecResult, Result, _obj, _output, _str, _strs, _time

if TYPE_CHECKING:
    from .sandbox import Sandbox

__all__ = ["ExecStream", "Process", "Command", "OutputCallback"]

#: A command: an argv list, or a string run by ``sh -c``.
Command = Union[str, Sequence[str]]
#: Called with each chunk of output as it comes.
OutputCallback = Callable[[bytes], object]

_MAX_EVENT_LINE = 16 << 20


def exec_body(
    command: Command | None,
    *,
    code: str | None = None,
    language: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin: bytes | str | None = None,
    timeout: float | None = None,
    rollback: str | None = None,
) -> dict[str, Any]:
    """The API's ExecRequest for these arguments."""
    b: dict[str, Any] = {}
    if command is not None:
        if isinstance(command, (bytes, bytearray)):
            raise TypeError("command: give a list of strings (argv) or one string for sh -c, not bytes")
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError("command: give a non-empty list of strings (argv), or one string for sh -c")
        b["argv"] = argv
    if code is not None:
        b["code"] = code
        b["language"] = language or "python"
    elif language is not None:
        b["language"] = language
    if "argv" not in b and "code" not in b:
        raise TypeError("give a command (argv list or shell string) or code")
    if env:
        b["env"] = {str(k): str(v) for k, v in env.items()}
    if cwd:
        b["cwd"] = cwd
    if stdin is not None and len(stdin) > 0:
        raw = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
        b["stdin"] = base64.b64encode(raw).decode()
    if timeout is not None:
        if timeout <= 0 or not math.isfinite(timeout):
            raise ValueError(f"timeout {timeout}: give a positive number of seconds")
        b["timeout_ms"] = max(1, math.ceil(timeout * 1000))
    if rollback is not None:
        if rollback != "on_failure":
            raise ValueError(f"rollback {rollback!r}: give \"on_failure\" or leave it out")
        b["rollback"] = rollback
    return b


class ExecStream(Iterator[Event]):
    """A running command's events: output as it comes, then the result.

    Iterate it; the last event has ``type == "result"`` and is also kept in
    ``result``. Closing the stream before the result (``close()``, leaving
    a ``with`` block, breaking out of a ``for`` loop over it and dropping
    it) kills the command. An error the daemon reports mid-stream is raised
    from the iteration as its APIError class.

    ::

        with sb.exec_events(["python3", "train.py"]) as events:
            for ev in events:
                if ev.type == "stdout":
                    print(ev.text, end="")
        print(events.result.reason)
    """

    def __init__(self, resp: Response, what: str, kill: Callable[[str], object] | None = None) -> None:
        self._resp: Response | None = resp
        self._what = what
        self._kill = kill
        #: The command's Result once the last event was read.
        self.result: Result | None = None
        #: The exec's id, from the stream's first event: the command runs
        #: on when the connection breaks, as the process of this id.
        self.id: str = ""

    def __iter__(self) -> ExecStream:
        return self

    def __next__(self) -> Event:
        resp = self._resp
        if resp is None:
            raise StopIteration
        while True:
            ev = self._read(resp)
            typ = _str(ev.get("type"))
            if typ == "start":
                self.id = _str(ev.get("id"))
                continue
            if typ == "keepalive":
                continue
            if typ == "result":
                self.result = Result.from_json(ev.get("result"))
                resp.read()  # the end of the body, so the connection can be reused
                self.close()
                return Event(type=typ, result=self.result)
            return Event(type=typ, data=_output(ev.get("data"), ev.get("data_base64")))

    def _read(self, resp: Response) -> dict[str, Any]:
        """The next event, raising what the daemon reports as an error."""
        while True:
            line = resp.readline(_MAX_EVENT_LINE)
            if not line:
                self.close()
                raise ConnectionFailed(f"{self._what}: the stream ended before the command's result")
            if line.strip():
                break
        try:
            ev = json.loads(line)
        except ValueError:
            self.close()
            raise ConnectionFailed(f"{self._what}: a malformed event") from None
        ev = _obj(ev)
        if ev.get("error") is not None:
            self.close()
            e = _obj(ev.get("error"))
            raise error_for(resp.status, _str(e.get("code")) or "internal", _str(e.get("message")))
        return ev

    def close(self) -> None:
        """Stops reading; before the result, this kills the command."""
        resp, self._resp = self._resp, None
        if resp is not None:
            resp.close()
            if self.result is None and self.id and self._kill is not None:
                # The exec outlives its stream: stop it, as promised.
                try:
                    self._kill(self.id)
                except Exception:  # noqa: BLE001 - best effort; it ends at its timeout anyway
                    pass

    def __enter__(self) -> ExecStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def collect(stream: ExecStream, on_stdout: OutputCallback | None, on_stderr: OutputCallback | None) -> ExecResult:
    """Runs stream to its end, passing output to the callbacks, and returns
    the result with all the output."""
    out, err = bytearray(), bytearray()
    with stream:
        for ev in stream:
            if ev.type == "stdout":
                out += ev.data
                if on_stdout is not None:
                    on_stdout(ev.data)
            elif ev.type == "stderr":
                err += ev.data
                if on_stderr is not None:
                    on_stderr(ev.data)
    assert stream.result is not None
    return ExecResult.from_result(stream.result, bytes(out), bytes(err))


def signal_name(sig: str | int) -> str:
    """The API's form of a signal: a name ("TERM", "SIGKILL") or a number."""
    return sig.name if isinstance(sig, _signal.Signals) else str(sig)


@dataclass
class Process:
    """A background process in a sandbox, as last seen; its methods act on
    it. ``wait()`` refreshes the fields, including ``stdout`` and
    ``stderr`` (filled only by wait)."""

    id: str
    argv: tuple[str, ...] = ()
    started_at: datetime | None = None
    running: bool = False
    #: How it ended; None while it runs.
    result: Result | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    sandbox: Sandbox | None = field(default=None, repr=False, compare=False)

    def _update(self, d: Any) -> Process:
        d = _obj(d)
        self.id = _str(d.get("id")) or self.id
        self.argv = _strs(d.get("argv"))
        self.started_at = _time(d.get("started_at"))
        self.running = bool(d.get("running"))
        self.result = Result.from_json(d["result"]) if isinstance(d.get("result"), dict) else None
        self.stdout = _output(d.get("stdout"), d.get("stdout_base64"))
        self.stderr = _output(d.get("stderr"), d.get("stderr_base64"))
        return self

    def _sb(self) -> Sandbox:
        if self.sandbox is None:
            raise ValueError("this Process is not bound to a sandbox; get it from Sandbox.start_process or Sandbox.list_processes")
        return self.sandbox

    def _path(self, *rest: str) -> str:
        from urllib.parse import quote

        return self._sb()._path("processes", quote(self.id, safe=""), *rest)

    def write_stdin(self, data: bytes | str, *, eof: bool = False) -> None:
        """Sends data to the process's standard input (started with
        ``keep_stdin_open=True``); ``eof=True`` closes it afterwards."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        body = {"data": base64.b64encode(raw).decode(), "eof": eof}
        self._sb()._t.request("POST", self._path("stdin"), json_body=body, read_timeout=None).discard()

    def close_stdin(self) -> None:
        """Closes the process's standard input (it reads end of file)."""
        self.write_stdin(b"", eof=True)

    def signal(self, sig: str | int = "TERM") -> None:
        """Sends a signal: a name ("TERM", "SIGKILL"), a number, or a
        ``signal.Signals``."""
        self._sb()._t.request("POST", self._path("signal"), json_body={"signal": signal_name(sig)}).discard()

    def kill(self) -> None:
        """Sends SIGKILL."""
        self.signal("KILL")

    def wait(self, timeout: float | None = None) -> Process:
        """Waits until the process ends, or at most timeout seconds (None:
        as long as it takes), then refreshes this object and returns it;
        ``running`` is still True when the wait timed out."""
        q: dict[str, Any] = {}
        if timeout is not None:
            q["timeout_ms"] = max(0, math.ceil(timeout * 1000))
        d = self._sb()._t.request("GET", self._path("wait"), query=q, read_timeout=None).json()
        return self._update(d)

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class ExecMixin:
    """Sandbox methods that run commands."""

    if TYPE_CHECKING:
        from ._transport import Transport

        _t: Transport

        def _path(self, *rest: str) -> str: ...

    def exec(
        self,
        command: Command,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        rollback: str | None = None,
    ) -> ExecResult:
        """Runs a command to its end and returns its result and output.

        Args:
            command: argv (``["python3", "main.py"]``), or one string that
                ``sh -c`` runs (``"ls -l | wc -l"``).
            env: variables added to the sandbox's environment.
            cwd: working directory (default /workspace).
            stdin: the command's whole standard input.
            timeout: seconds of wall time (default: the sandbox's limit);
                past it the command and all it started are killed and
                ``reason`` is ``"timeout"``.
            on_stdout, on_stderr: called with each chunk of output as it
                comes (the command streams); the result still holds it all.
            rollback: "on_failure" puts /workspace back exactly as it was
                before the command when the command fails (non-zero exit,
                a signal, any limit hit); ``result.rollback`` says what
                was undone.

        A command that fails, times out or runs out of memory is not an
        error: look at ``result.reason``, ``exit_code`` and ``message``.
        Raises Denied when the policy refuses the command (and, when the
        policy asks a person, returns only once they decide), NotRunning
        when the sandbox has ended.
        """
        body = exec_body(command, env=env, cwd=cwd, stdin=stdin, timeout=timeout, rollback=rollback)
        return self._run(body, on_stdout, on_stderr)

    def run_code(
        self,
        code: str,
        language: str = "python",
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> ExecResult:
        """Runs code in a language ("python", "bash" or "sh") to its end;
        otherwise as exec."""
        body = exec_body(None, code=code, language=language, env=env, cwd=cwd, stdin=stdin, timeout=timeout)
        return self._run(body, on_stdout, on_stderr)

    def _run(self, body: dict[str, Any], on_stdout: OutputCallback | None, on_stderr: OutputCallback | None) -> ExecResult:
        if on_stdout is not None or on_stderr is not None:
            return collect(self._stream(body), on_stdout, on_stderr)
        d = _obj(self._t.request("POST", self._path("exec"), json_body=body, read_timeout=None).json())
        r = Result.from_json(d.get("result"))
        return ExecResult.from_result(r, _output(d.get("stdout"), d.get("stdout_base64")), _output(d.get("stderr"), d.get("stderr_base64")))

    def exec_events(
        self,
        command: Command | None = None,
        *,
        code: str | None = None,
        language: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
    ) -> ExecStream:
        """Starts a command (or code) and returns its events as they come:
        an iterator of Event, the last of type "result". See ExecStream."""
        return self._stream(exec_body(command, code=code, language=language, env=env, cwd=cwd, stdin=stdin, timeout=timeout))

    def _stream(self, body: dict[str, Any]) -> ExecStream:
        path = self._path("exec")
        resp = self._t.request("POST", path, json_body=body, accept="application/x-ndjson", read_timeout=None)

        def kill(pid: str) -> None:
            from urllib.parse import quote

            self._t.request("POST", self._path("processes", quote(pid, safe=""), "signal"), json_body={"signal": "KILL"}).discard()

        return ExecStream(resp, f"POST {path}", kill)

    def start_process(
        self,
        command: Command | None = None,
        *,
        code: str | None = None,
        language: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        keep_stdin_open: bool = False,
    ) -> Process:
        """Starts a command in the background and returns at once.

        ``keep_stdin_open=True`` leaves its standard input open for
        Process.write_stdin. ``timeout`` bounds its wall time as for exec.
        Background processes do not keep a sandbox from going idle.
        """
        body = exec_body(command, code=code, language=language, env=env, cwd=cwd, stdin=stdin, timeout=timeout)
        if keep_stdin_open:
            body["keep_stdin_open"] = True
        d = self._t.request("POST", self._path("processes"), json_body=body, read_timeout=None).json()
        return Process(id="", sandbox=self)._update(d)  # type: ignore[arg-type]

    def list_processes(self) -> list[Process]:
        """The sandbox's background processes, running and ended."""
        d = _obj(self._t.request("GET", self._path("processes")).json())
        ps = d.get("processes")
        return [Process(id="", sandbox=self)._update(p) for p in ps] if isinstance(ps, list) else []  # type: ignore[arg-type]

    def process(self, pid: str) -> Process:
        """A handle of background process pid (no request is made)."""
        return Process(id=pid, sandbox=self)  # type: ignore[arg-type]
