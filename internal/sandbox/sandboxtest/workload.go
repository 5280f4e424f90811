package sandboxtest

import (
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Workload is what the suite runs inside a sandbox to test exec, limits,
// files and posture, for every case that does not need a Linux userland:
// each method returns the request of one small program and says what that
// program does, prints and how it ends. A case may set the request's Env,
// Dir, Stdin, Timeout and CPUTime before it runs it.
//
// A driver whose sandboxes have a shell uses ShellWorkload, the default. A
// driver without one (Wasm) gives its own in Options.Workload: programs that
// do the same in what its sandbox runs (PythonWorkload where that is a
// Python interpreter, as a Python built for WASI is; a test module
// otherwise).
type Workload interface {
	// Print writes stdout to standard output, then stderr to standard
	// error, byte for byte, and exits with code (0 to 255).
	Print(stdout, stderr string, code int) sandbox.ExecRequest
	// Args prints each of its arguments, as it received them, in brackets
	// ("[a b][][c]") with nothing between or after, and exits 0.
	Args(args ...string) sandbox.ExecRequest
	// Trickle writes first, pauses, then writes second, to standard error
	// when stderr is set and to standard output otherwise, and exits 0.
	// Each write reaches the stream when it is made.
	Trickle(stderr bool, first, second string, pause time.Duration) sandbox.ExecRequest
	// Lines writes n pairs of lines, for i from 0: out and i to standard
	// output, err and i to standard error ("out0\n", "err0\n"…); then it
	// exits with code.
	Lines(n int, out, err string, code int) sandbox.ExecRequest
	// Cat copies standard input to standard output, byte for byte.
	Cat() sandbox.ExecRequest
	// Hex prints the bytes of standard input as two-digit lower-case hex
	// numbers separated by white space.
	Hex() sandbox.ExecRequest
	// Env prints the program's environment, one KEY=VALUE per line. It may
	// print it more than once, from each place a program can read it (on
	// Linux, also /proc/self/environ).
	Env() sandbox.ExecRequest
	// Pwd prints the working directory, symlinks resolved, and a newline.
	Pwd() sandbox.ExecRequest
	// Sleep waits for d without using CPU, then exits 0.
	Sleep(d time.Duration) sandbox.ExecRequest
	// Spin uses CPU, forever.
	Spin() sandbox.ExecRequest
	// Alloc allocates memory 16 MiB at a time, writing all of it, and keeps
	// it, forever.
	Alloc() sandbox.ExecRequest
	// AllocBlock allocates one block of size bytes at once, writes all of
	// it, and keeps it, forever.
	AllocBlock(size int64) sandbox.ExecRequest
	// Flood writes "y\n" forever, to standard error when stderr is set and
	// to standard output otherwise.
	Flood(stderr bool) sandbox.ExecRequest
	// Heartbeat appends a line to file every 50 ms, forever. Where the
	// sandbox can fork, a child process writes while the main process
	// waits, so that only a kill of the whole exec stops it.
	Heartbeat(file string) sandbox.ExecRequest
	// ReadFiles prints the contents of the files at paths, one after the
	// other. It exits non-zero, after printing what it could, when one
	// cannot be read.
	ReadFiles(paths ...string) sandbox.ExecRequest
	// FileSize reads the file at path and prints how many bytes it read, a
	// decimal number and a newline.
	FileSize(path string) sandbox.ExecRequest
	// ListDir prints the names in the directory dir, hidden ones included,
	// one a line; it exits non-zero when dir cannot be listed.
	ListDir(dir string) sandbox.ExecRequest
	// WriteZeros writes size zero bytes (a whole number of MiB) to each of
	// paths in turn. At the first failure it stops, prints the error on
	// standard error in the system's words ("No space left on device")
	// and exits non-zero.
	WriteZeros(size int64, paths ...string) sandbox.ExecRequest
	// Search prints the path of every file named name anywhere but below
	// /proc, and of every file below dirs that contains content; missing
	// directories and unreadable files are passed over. It exits 0.
	Search(name, content string, dirs ...string) sandbox.ExecRequest
	// Connect tries a TCP connection to each of addrs ("host:port", the
	// host a name or an IPv4 address), each with a 2 s timeout, and prints
	// one line for each: "connected ADDR", or "failed ADDR CLASS DETAIL"
	// where CLASS is refused, timeout, dns (the name did not resolve),
	// unreachable or error. It exits 0.
	Connect(addrs ...string) sandbox.ExecRequest
}

// ShellWorkload is the workload of a Linux userland: sh, coreutils and
// python3, as a Debian-like root has them. It is what every case runs unless
// Options.Workload says otherwise.
type ShellWorkload struct{}

var _ Workload = ShellWorkload{}

// sh is a request that runs script with sh -c; args are $1, $2…
func sh(script string, args ...string) sandbox.ExecRequest {
	return sandbox.ExecRequest{Argv: append([]string{"sh", "-c", script, "sh"}, args...)}
}

// seconds formats d for sleep(1) and Python.
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// redirect is what sends a shell command's output to standard error.
func redirect(stderr bool) string {
	if stderr {
		return " >&2"
	}
	return ""
}

func (ShellWorkload) Print(stdout, stderr string, code int) sandbox.ExecRequest {
	return sh(`printf %s "$1"; printf %s "$2" >&2; exit "$3"`, stdout, stderr, strconv.Itoa(code))
}

func (ShellWorkload) Args(args ...string) sandbox.ExecRequest {
	return sh(`for a in "$@"; do printf '[%s]' "$a"; done`, args...)
}

func (ShellWorkload) Trickle(stderr bool, first, second string, pause time.Duration) sandbox.ExecRequest {
	r := redirect(stderr)
	return sh(`printf %s "$1"`+r+`; sleep "$3"; printf %s "$2"`+r, first, second, seconds(pause))
}

func (ShellWorkload) Lines(n int, out, err string, code int) sandbox.ExecRequest {
	return sh(`i=0; while [ $i -lt "$1" ]; do echo "$2$i"; echo "$3$i" >&2; i=$((i+1)); done; exit "$4"`,
		strconv.Itoa(n), out, err, strconv.Itoa(code))
}

func (ShellWorkload) Cat() sandbox.ExecRequest { return execArgv("cat") }

func (ShellWorkload) Hex() sandbox.ExecRequest { return execArgv("od", "-An", "-tx1") }

func (ShellWorkload) Env() sandbox.ExecRequest {
	return sh(`env; tr '\0' '\n' < /proc/self/environ`)
}

func (ShellWorkload) Pwd() sandbox.ExecRequest { return sh("pwd -P") }

func (ShellWorkload) Sleep(d time.Duration) sandbox.ExecRequest {
	return execArgv("sleep", seconds(d))
}

func (ShellWorkload) Spin() sandbox.ExecRequest { return execArgv("python3", "-c", spinProgram) }

func (ShellWorkload) Alloc() sandbox.ExecRequest { return execArgv("python3", "-c", allocProgram) }

func (ShellWorkload) AllocBlock(size int64) sandbox.ExecRequest {
	return execArgv("python3", "-c", allocBlockProgram, strconv.FormatInt(size, 10))
}

func (ShellWorkload) Flood(stderr bool) sandbox.ExecRequest { return sh("yes" + redirect(stderr)) }

func (ShellWorkload) Heartbeat(file string) sandbox.ExecRequest {
	return sh(`(while :; do echo x >> "$1"; sleep 0.05; done) & sleep 35; echo finished`, file)
}

func (ShellWorkload) ReadFiles(paths ...string) sandbox.ExecRequest {
	return execArgv(append([]string{"cat", "--"}, paths...)...)
}

func (ShellWorkload) FileSize(path string) sandbox.ExecRequest { return sh(`wc -c < "$1"`, path) }

func (ShellWorkload) ListDir(dir string) sandbox.ExecRequest { return execArgv("ls", "-A", "--", dir) }

func (ShellWorkload) WriteZeros(size int64, paths ...string) sandbox.ExecRequest {
	return sh(`n=$1; shift; for p in "$@"; do dd if=/dev/zero of="$p" bs=1M count="$n" || exit 1; done`,
		append([]string{strconv.FormatInt(size>>20, 10)}, paths...)...)
}

func (ShellWorkload) Search(name, content string, dirs ...string) sandbox.ExecRequest {
	return sh(`n=$1; c=$2; shift 2
find / -path /proc -prune -o -name "$n" -print 2>/dev/null
grep -rlF -- "$c" "$@" 2>/dev/null
true`, append([]string{name, content}, dirs...)...)
}

func (ShellWorkload) Connect(addrs ...string) sandbox.ExecRequest {
	return execArgv(append([]string{"python3", "-c", connectProgram}, addrs...)...)
}

// PythonWorkload runs every program as `python3 -c PROGRAM`, using only
// what a Python built for WASI has: files, the environment, time; no
// processes, signals or /proc. A driver whose sandbox runs a Python and
// nothing else can give it as Options.Workload.
type PythonWorkload struct {
	// Python is the interpreter's name or path. Empty means "python3".
	Python string
}

var _ Workload = PythonWorkload{}

// py is a request that runs program with args as sys.argv[1:].
func (w PythonWorkload) py(program string, args ...string) sandbox.ExecRequest {
	python := w.Python
	if python == "" {
		python = "python3"
	}
	return sandbox.ExecRequest{Argv: append([]string{python, "-c", program}, args...)}
}

// pyStreams is the preamble of programs that write bytes to the streams.
const pyStreams = `import os, sys
out, err = sys.stdout.buffer, sys.stderr.buffer
def put(stream, s):
    stream.write(os.fsencode(s))
    stream.flush()
`

func (w PythonWorkload) Print(stdout, stderr string, code int) sandbox.ExecRequest {
	return w.py(pyStreams+`put(out, sys.argv[1]); put(err, sys.argv[2]); sys.exit(int(sys.argv[3]))`,
		stdout, stderr, strconv.Itoa(code))
}

func (w PythonWorkload) Args(args ...string) sandbox.ExecRequest {
	return w.py(pyStreams+`put(out, "".join("[%s]" % a for a in sys.argv[1:]))`, args...)
}

func (w PythonWorkload) Trickle(stderr bool, first, second string, pause time.Duration) sandbox.ExecRequest {
	return w.py(pyStreams+`import time
s = err if sys.argv[4] == "1" else out
put(s, sys.argv[1]); time.sleep(float(sys.argv[3])); put(s, sys.argv[2])`,
		first, second, seconds(pause), boolArg(stderr))
}

func (w PythonWorkload) Lines(n int, out, err string, code int) sandbox.ExecRequest {
	return w.py(pyStreams+`for i in range(int(sys.argv[1])):
    put(out, "%s%d\n" % (sys.argv[2], i))
    put(err, "%s%d\n" % (sys.argv[3], i))
sys.exit(int(sys.argv[4]))`, strconv.Itoa(n), out, err, strconv.Itoa(code))
}

func (w PythonWorkload) Cat() sandbox.ExecRequest {
	return w.py(`import shutil, sys; shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer)`)
}

func (w PythonWorkload) Hex() sandbox.ExecRequest {
	return w.py(`import sys; print(" ".join("%02x" % b for b in sys.stdin.buffer.read()))`)
}

func (w PythonWorkload) Env() sandbox.ExecRequest {
	return w.py(pyStreams + `for k, v in os.environb.items(): out.write(k + b"=" + v + b"\n")`)
}

func (w PythonWorkload) Pwd() sandbox.ExecRequest {
	return w.py(`import os; print(os.path.realpath(os.getcwd()))`)
}

func (w PythonWorkload) Sleep(d time.Duration) sandbox.ExecRequest {
	return w.py(`import sys, time; time.sleep(float(sys.argv[1]))`, seconds(d))
}

func (w PythonWorkload) Spin() sandbox.ExecRequest { return w.py(spinProgram) }

func (w PythonWorkload) Alloc() sandbox.ExecRequest { return w.py(allocProgram) }

func (w PythonWorkload) AllocBlock(size int64) sandbox.ExecRequest {
	return w.py(allocBlockProgram, strconv.FormatInt(size, 10))
}

func (w PythonWorkload) Flood(stderr bool) sandbox.ExecRequest {
	return w.py(`import sys
s = sys.stderr.buffer if sys.argv[1] == "1" else sys.stdout.buffer
b = b"y\n" * 4096
while True:
    s.write(b)`, boolArg(stderr))
}

func (w PythonWorkload) Heartbeat(file string) sandbox.ExecRequest {
	return w.py(`import sys, time
while True:
    with open(sys.argv[1], "a") as f:
        f.write("x\n")
    time.sleep(0.05)`, file)
}

func (w PythonWorkload) ReadFiles(paths ...string) sandbox.ExecRequest {
	return w.py(`import sys
rc = 0
for p in sys.argv[1:]:
    try:
        with open(p, "rb") as f:
            sys.stdout.buffer.write(f.read())
    except OSError as e:
        print(p + ":", e.strerror, file=sys.stderr)
        rc = 1
sys.exit(rc)`, paths...)
}

func (w PythonWorkload) FileSize(path string) sandbox.ExecRequest {
	return w.py(`import sys
n = 0
with open(sys.argv[1], "rb") as f:
    while b := f.read(1 << 20):
        n += len(b)
print(n)`, path)
}

func (w PythonWorkload) ListDir(dir string) sandbox.ExecRequest {
	return w.py(`import os, sys
for n in os.listdir(sys.argv[1]):
    print(n)`, dir)
}

func (w PythonWorkload) WriteZeros(size int64, paths ...string) sandbox.ExecRequest {
	return w.py(`import sys
mib = b"\0" * (1 << 20)
for p in sys.argv[2:]:
    try:
        with open(p, "wb") as f:
            for _ in range(int(sys.argv[1]) >> 20):
                f.write(mib)
    except OSError as e:
        print(p + ":", e.strerror, file=sys.stderr)
        sys.exit(1)`, append([]string{strconv.FormatInt(size, 10)}, paths...)...)
}

func (w PythonWorkload) Search(name, content string, dirs ...string) sandbox.ExecRequest {
	return w.py(`import os, stat, sys
name, content = sys.argv[1], os.fsencode(sys.argv[2])
for d, subdirs, files in os.walk("/"):
    if d == "/":
        subdirs[:] = [s for s in subdirs if s != "proc"]
    for f in files + subdirs:
        if f == name:
            print(os.path.join(d, f))
def holds(p):
    try:
        if not stat.S_ISREG(os.lstat(p).st_mode):
            return False
        with open(p, "rb") as f:
            tail = b""
            while b := f.read(1 << 20):
                if content in tail + b:
                    return True
                tail = b[-len(content):]
    except OSError:
        pass
    return False
for root in sys.argv[3:]:
    for d, _, files in os.walk(root):
        for f in files:
            if holds(os.path.join(d, f)):
                print(os.path.join(d, f))`, append([]string{name, content}, dirs...)...)
}

func (w PythonWorkload) Connect(addrs ...string) sandbox.ExecRequest {
	return w.py(connectProgram, addrs...)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// spinProgram uses CPU forever.
const spinProgram = "while True: pass"

// allocProgram takes 16 MiB at a time, each written, forever.
const allocProgram = "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n"

// allocBlockProgram is Workload.AllocBlock in Python.
const allocBlockProgram = "import sys, time\nb = b'x' * int(sys.argv[1])\nwhile True:\n    time.sleep(1)\n"

// connectProgram is Workload.Connect in Python.
const connectProgram = `
import errno, socket, sys
for a in sys.argv[1:]:
    host, _, port = a.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        print("connected", a)
    except socket.gaierror as e:
        print("failed", a, "dns", e)
    except ConnectionRefusedError as e:
        print("failed", a, "refused", e)
    except (TimeoutError, socket.timeout) as e:
        print("failed", a, "timeout", e)
    except OSError as e:
        unreachable = e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH)
        print("failed", a, "unreachable" if unreachable else "error", e)
`
