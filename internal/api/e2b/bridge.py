# airlock's interpreter bridge. The daemon runs it inside a sandbox, as a
# background process of the sandbox's user:
#
#   python3 -c BRIDGE airlock-interpreter CONTEXT_ID LANGUAGE CWD
#
# It starts a Jupyter kernel (Debian's ipykernel, through jupyter_client)
# whose sockets are files under /tmp (no TCP port is opened), then reads
# requests from its standard input, one JSON object a line:
#
#   {"op": "run", "id": "r1", "code": "1+1", "env": {"K": "V"}}
#   {"op": "interrupt"}
#
# and writes, one JSON object a line on its standard output, {"ready": true}
# once the kernel answers (or {"fatal": "why"} and exits), then for each run
# its events, each with the run's id:
#
#   {"id": "r1", "type": "stdout" | "stderr", "text": "..."}
#   {"id": "r1", "type": "result", "main": true, "data": {MIME: value}}
#   {"id": "r1", "type": "error", "name": "...", "value": "...", "traceback": "..."}
#   {"id": "r1", "type": "count", "n": 3}
#   {"id": "r1", "type": "end"}
#
# Runs go one after the other; an interrupt reaches the kernel at once, as
# SIGINT. A kernel that dies is reported as an error of the run it was in
# and started again. The bridge ends when its standard input does.
import json
import os
import queue
import subprocess
import sys
import threading

lock = threading.Lock()


def emit(obj):
    line = json.dumps(obj) + "\n"
    with lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def main():
    # sys.argv is ["-c", "airlock-interpreter", CONTEXT_ID, LANGUAGE, CWD].
    context_id, cwd = sys.argv[2], sys.argv[4]
    scratch = "/tmp/.airlock-jupyter-" + context_id
    os.makedirs(scratch, mode=0o700, exist_ok=True)
    env = dict(os.environ)
    # Everything Jupyter, IPython and matplotlib keep goes under /tmp, not
    # into the workspace.
    env.update({
        "JUPYTER_RUNTIME_DIR": scratch,
        "JUPYTER_DATA_DIR": scratch,
        "JUPYTER_CONFIG_DIR": scratch,
        "IPYTHONDIR": scratch + "/ipython",
        "MPLCONFIGDIR": scratch + "/matplotlib",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    })
    os.environ.update(env)
    try:
        from jupyter_client.manager import KernelManager
        km = KernelManager(kernel_name="python3", transport="ipc", ip=scratch + "/kernel")
        km.start_kernel(cwd=cwd, env=env, stdout=subprocess.DEVNULL)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
    except Exception as e:  # noqa: BLE001 - any failure to start is fatal
        emit({"fatal": "%s: %s" % (type(e).__name__, e)})
        sys.exit(1)
    state = {"km": km, "kc": kc, "running": False}
    runs = queue.Queue()
    threading.Thread(target=worker, args=(state, runs), daemon=True).start()
    emit({"ready": True})
    for raw in sys.stdin.buffer:
        try:
            req = json.loads(raw)
        except ValueError:
            continue
        if req.get("op") == "interrupt":
            if state["running"]:
                try:
                    state["km"].interrupt_kernel()
                except Exception:  # noqa: BLE001
                    pass
        elif req.get("op") == "run":
            runs.put(req)
    runs.put(None)
    try:
        state["kc"].stop_channels()
        state["km"].shutdown_kernel(now=True)
    except Exception:  # noqa: BLE001
        pass


def silent(kc, code):
    """Runs code for its effect only and waits for it."""
    msg_id = kc.execute(code, silent=True, store_history=False)
    while True:
        msg = kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status" \
                and msg["content"]["execution_state"] == "idle":
            return


def restart(state):
    try:
        state["kc"].stop_channels()
    except Exception:  # noqa: BLE001
        pass
    state["km"].restart_kernel(now=True)
    kc = state["km"].client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    state["kc"] = kc


def worker(state, runs):
    while True:
        req = runs.get()
        if req is None:
            return
        rid = req.get("id", "")
        try:
            run(state, req, rid)
        except Exception as e:  # noqa: BLE001 - report, keep serving
            emit({"id": rid, "type": "error", "name": type(e).__name__, "value": str(e), "traceback": ""})
        emit({"id": rid, "type": "end"})


def run(state, req, rid):
    kc = state["kc"]
    env = req.get("env") or {}
    if env:
        # Per-run environment variables, undone after the run.
        silent(kc, "import os as _airlock_os\n_airlock_env = {k: _airlock_os.environ.get(k) for k in %r}\n"
                   "_airlock_os.environ.update(%r)\n" % (list(env), env))
    state["running"] = True
    try:
        msg_id = kc.execute(req.get("code", ""), store_history=True, allow_stdin=False)
        while True:
            try:
                msg = kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                if not state["km"].is_alive():
                    emit({"id": rid, "type": "error", "name": "DeadKernelError",
                          "value": "the kernel died (out of memory, or killed); it was started again and its state is lost",
                          "traceback": ""})
                    restart(state)
                    return
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                emit({"id": rid, "type": "stderr" if content.get("name") == "stderr" else "stdout", "text": content.get("text", "")})
            elif kind in ("execute_result", "display_data"):
                emit({"id": rid, "type": "result", "main": kind == "execute_result", "data": content.get("data", {})})
            elif kind == "error":
                emit({"id": rid, "type": "error", "name": content.get("ename", ""), "value": content.get("evalue", ""),
                      "traceback": "\n".join(content.get("traceback", []))})
            elif kind == "execute_input":
                emit({"id": rid, "type": "count", "n": content.get("execution_count", 0)})
            elif kind == "status" and content.get("execution_state") == "idle":
                break
        # The reply on the shell channel, so that its queue does not grow.
        try:
            while kc.get_shell_msg(timeout=5)["parent_header"].get("msg_id") != msg_id:
                pass
        except queue.Empty:
            pass
    finally:
        state["running"] = False
        if env:
            try:
                silent(state["kc"], "for _k, _v in _airlock_env.items():\n"
                                    "    _airlock_os.environ.pop(_k, None) if _v is None else _airlock_os.environ.__setitem__(_k, _v)\n"
                                    "del _airlock_env\n")
            except Exception:  # noqa: BLE001
                pass


main()
