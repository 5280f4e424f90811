package testcap

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
)

// dockerDefaultHost is where a Docker engine listens when DOCKER_HOST is
// unset.
const dockerDefaultHost = "unix:///var/run/docker.sock"

// probeDocker checks that the Docker engine at $DOCKER_HOST, or at the
// default socket, answers and really runs a container: it imports a
// one-file image (a tiny static program that exits 0, written here; no
// registry is needed), runs it without network, waits for exit code 0,
// and removes both again.
func probeDocker(ctx context.Context) Result {
	fix := "apt-get install docker.io && dockerd &"
	if _, err := exec.LookPath("dockerd"); err == nil {
		fix = "start the engine: dockerd &"
	}
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = dockerDefaultHost
	}
	e, err := newDockerAPI(host)
	if err != nil {
		return fail(err.Error(), "set DOCKER_HOST to unix:///path or tcp://host:port")
	}
	defer e.tr.CloseIdleConnections()
	resp, body, err := e.call(ctx, http.MethodGet, "/_ping", "", nil)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fail(fmt.Sprintf("no Docker engine: %s does not exist", host), fix)
		case errors.Is(err, syscall.ECONNREFUSED):
			return fail(fmt.Sprintf("no Docker engine listens on %s", host), fix)
		case errors.Is(err, fs.ErrPermission):
			return fail(fmt.Sprintf("cannot connect to %s: permission denied%s", host, notRoot()),
				rootFix+", or add the user to the docker group: usermod -aG docker $USER")
		}
		return fail(fmt.Sprintf("ping Docker engine at %s: %v", host, err), fix)
	}
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Sprintf("Docker engine at %s answered %s: %s", host, resp.Status, body), "check the engine's log")
	}
	// The engine names itself ("Docker/28.2.2 (linux)") and its API version.
	var parts []string
	if v := strings.TrimSpace(resp.Header.Get("Server")); v != "" {
		parts = append(parts, v)
	}
	if v := strings.TrimSpace(resp.Header.Get("Api-Version")); v != "" {
		parts = append(parts, "API "+v)
	}
	parts = append(parts, "at "+host)
	if err := e.runTrue(ctx); err != nil {
		return fail(fmt.Sprintf("the Docker engine at %s answers but cannot run a container: %v", host, err), "check the engine's log")
	}
	return ok(strings.Join(parts, ", ") + ", runs containers")
}

// dockerAPI speaks the Engine API over HTTP, just enough for the probe.
type dockerAPI struct {
	base string
	tr   *http.Transport
}

func newDockerAPI(host string) (*dockerAPI, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("parse DOCKER_HOST %q: %w", host, err)
	}
	e := &dockerAPI{base: "http://docker", tr: &http.Transport{DisableKeepAlives: true}}
	switch u.Scheme {
	case "unix":
		sock := u.Path
		e.tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	case "tcp", "http":
		e.base = "http://" + u.Host
	default:
		return nil, fmt.Errorf("DOCKER_HOST %q: this probe speaks only unix:// and tcp://", host)
	}
	return e, nil
}

// call makes one request and returns the response with its body (at most
// 64 KiB, trimmed).
func (e *dockerAPI) call(ctx context.Context, method, path, ctype string, body io.Reader) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, body)
	if err != nil {
		return nil, "", err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := (&http.Client{Transport: e.tr}).Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp, strings.TrimSpace(string(b)), nil
}

// want makes a call that must answer with status code, and decodes its
// JSON answer into out (unless nil).
func (e *dockerAPI) want(ctx context.Context, code int, method, path, ctype string, body io.Reader, out any) error {
	resp, b, err := e.call(ctx, method, path, ctype, body)
	if err != nil {
		return err
	}
	if resp.StatusCode != code {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// runTrue imports the one-file image, runs it and removes what it made.
func (e *dockerAPI) runTrue(ctx context.Context) error {
	elf := trueELF(runtime.GOARCH)
	if elf == nil {
		return fmt.Errorf("the probe has no program for %s", runtime.GOARCH)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "true", Mode: 0o755, Size: int64(len(elf))})
	_, _ = tw.Write(elf)
	_ = tw.Close()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tag := hex.EncodeToString(rnd[:])
	ref := "airlock-probe:" + tag
	cleanup := context.WithoutCancel(ctx)
	resp, b, err := e.call(ctx, http.MethodPost, "/images/create?fromSrc=-&repo=airlock-probe&tag="+tag, "application/x-tar", &tb)
	if err != nil {
		return fmt.Errorf("import an image: %w", err)
	}
	defer e.call(cleanup, http.MethodDelete, "/images/"+ref+"?force=1", "", nil) //nolint:errcheck // best effort
	if resp.StatusCode != http.StatusOK || strings.Contains(b, `"error"`) {
		return fmt.Errorf("import an image: %s: %s", resp.Status, b)
	}
	var created struct{ Id string }
	cfg := `{"Image":"` + ref + `","Cmd":["/true"],"Labels":{"airlock.probe":"1"},"HostConfig":{"NetworkMode":"none"}}`
	if err := e.want(ctx, http.StatusCreated, http.MethodPost, "/containers/create", "application/json", strings.NewReader(cfg), &created); err != nil {
		return err
	}
	defer e.call(cleanup, http.MethodDelete, "/containers/"+created.Id+"?force=1&v=1", "", nil) //nolint:errcheck // best effort
	if err := e.want(ctx, http.StatusNoContent, http.MethodPost, "/containers/"+created.Id+"/start", "", nil, nil); err != nil {
		return err
	}
	var exit struct{ StatusCode int }
	if err := e.want(ctx, http.StatusOK, http.MethodPost, "/containers/"+created.Id+"/wait", "", nil, &exit); err != nil {
		return err
	}
	if exit.StatusCode != 0 {
		return fmt.Errorf("the container exited with code %d, want 0", exit.StatusCode)
	}
	return nil
}

// trueELF returns a minimal static Linux program for arch that exits 0:
// an ELF header, one loadable segment, and three instructions.
func trueELF(arch string) []byte {
	var machine uint16
	var code []byte
	switch arch {
	case "amd64":
		machine = 62
		code = []byte{0x31, 0xff, 0xb8, 0x3c, 0, 0, 0, 0x0f, 0x05} // xor edi,edi; mov eax,60 (exit); syscall
	case "arm64":
		machine = 183
		code = binary.LittleEndian.AppendUint32(nil, 0xd2800000)  // mov x0, #0
		code = binary.LittleEndian.AppendUint32(code, 0xd2800ba8) // mov x8, #93 (exit)
		code = binary.LittleEndian.AppendUint32(code, 0xd4000001) // svc #0
	default:
		return nil
	}
	const base, hdr = 0x400000, 64 + 56
	size := uint64(hdr + len(code))
	le := binary.LittleEndian
	b := []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	b = le.AppendUint16(b, 2) // ET_EXEC
	b = le.AppendUint16(b, machine)
	b = le.AppendUint32(b, 1)        // EV_CURRENT
	b = le.AppendUint64(b, base+hdr) // entry
	b = le.AppendUint64(b, 64)       // program headers
	b = le.AppendUint64(b, 0)        // no section headers
	b = le.AppendUint32(b, 0)        // flags
	b = le.AppendUint16(b, 64)       // header size
	b = le.AppendUint16(b, 56)       // program header size
	b = le.AppendUint16(b, 1)        // one program header
	b = le.AppendUint16(b, 0)        // section header size
	b = le.AppendUint16(b, 0)        // no sections
	b = le.AppendUint16(b, 0)        // no section names
	b = le.AppendUint32(b, 1)        // PT_LOAD
	b = le.AppendUint32(b, 5)        // PF_R|PF_X
	b = le.AppendUint64(b, 0)        // offset
	b = le.AppendUint64(b, base)     // vaddr
	b = le.AppendUint64(b, base)     // paddr
	b = le.AppendUint64(b, size)     // filesz
	b = le.AppendUint64(b, size)     // memsz
	b = le.AppendUint64(b, 0x1000)   // align
	return append(b, code...)
}
