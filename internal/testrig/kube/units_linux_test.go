package kube

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// readArchive reads an OCI layout tar into a map of file name to content.
func readArchive(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = b
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// TestPauseArchive: the pause image is an OCI layout whose index names the
// image for containerd, whose blobs match their digests, and whose one
// layer holds /pause, executable.
func TestPauseArchive(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(bin, []byte("\x7fELF pretend"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := pauseImage("airlock.invalid/pause:x", bin)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(img.writeArchive(pw)) }()
	files := readArchive(t, pr)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}
	var index struct{ Manifests []descriptor }
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json = %s (%v)", files["index.json"], err)
	}
	md := index.Manifests[0]
	if md.Annotations["io.containerd.image.name"] != "airlock.invalid/pause:x" {
		t.Errorf("the index does not name the image: %+v", md)
	}
	manifest := files[blobPath(md.Digest)]
	if sha(manifest) != md.Digest || int64(len(manifest)) != md.Size {
		t.Fatalf("the manifest blob does not match its descriptor")
	}
	var m struct {
		Config descriptor
		Layers []descriptor
	}
	if err := json.Unmarshal(manifest, &m); err != nil || len(m.Layers) != 1 {
		t.Fatalf("manifest = %s (%v)", manifest, err)
	}
	config := files[blobPath(m.Config.Digest)]
	layer := files[blobPath(m.Layers[0].Digest)]
	if sha(config) != m.Config.Digest || sha(layer) != m.Layers[0].Digest || int64(len(layer)) != m.Layers[0].Size {
		t.Fatalf("a blob does not match its digest")
	}
	var c struct {
		Config struct{ Entrypoint []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.RootFS.DiffIDs) != 1 || c.RootFS.DiffIDs[0] != m.Layers[0].Digest {
		t.Errorf("diff_ids %v, want the uncompressed layer's digest %s", c.RootFS.DiffIDs, m.Layers[0].Digest)
	}
	if strings.Join(c.Config.Entrypoint, " ") != "/pause" {
		t.Errorf("entrypoint %v", c.Config.Entrypoint)
	}
	tr := tar.NewReader(strings.NewReader(string(layer)))
	hdr, err := tr.Next()
	if err != nil || hdr.Name != "pause" || hdr.Mode&0o111 == 0 {
		t.Errorf("layer entry %+v, %v; want an executable pause", hdr, err)
	}
}

// TestFileImageShort: a layer shorter than its stated size fails the
// archive instead of importing a torn image.
func TestFileImageShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(path, []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := fileImage("airlock.invalid/rootimage:x", path, strings.Repeat("0", 64), 100)
	if err := img.writeArchive(io.Discard); err == nil || !strings.Contains(err.Error(), "expected 100") {
		t.Errorf("writeArchive of a torn layer = %v", err)
	}
}

// TestContainerdConfig: the configuration parses as TOML and says what the
// rig relies on.
func TestContainerdConfig(t *testing.T) {
	text := containerdConfig{
		root: "/r/root", state: "/r/state", socket: "/r/c.sock", shimSocketDir: "/r/shim", optDir: "/r/opt",
		shimRunc: "/b/shim-runc", runc: "/usr/sbin/runc", runcRoot: "/r/runc",
		shimRunsc: "/b/shim-runsc", runscConfig: "/r/runsc.toml",
		cniBin: "/usr/lib/cni", cniConf: "/r/cni", pauseImage: "airlock.invalid/pause:1", restrictOOMScoreAdj: true,
	}.toml()
	var cfg map[string]any
	if _, err := toml.Decode(text, &cfg); err != nil {
		t.Fatalf("containerd config does not parse: %v\n%s", err, text)
	}
	plugins := cfg["plugins"].(map[string]any)
	rt := plugins["io.containerd.cri.v1.runtime"].(map[string]any)
	if rt["restrict_oom_score_adj"] != true || rt["netns_mounts_under_state_dir"] != true {
		t.Errorf("runtime config %v", rt)
	}
	runtimes := rt["containerd"].(map[string]any)["runtimes"].(map[string]any)
	runsc := runtimes[RuntimeHandlerRunsc].(map[string]any)
	if runsc["runtime_type"] != "io.containerd.runsc.v1" || runsc["runtime_path"] != "/b/shim-runsc" {
		t.Errorf("runsc runtime %v", runsc)
	}
	if imports, ok := cfg["imports"].([]any); !ok || len(imports) != 0 {
		t.Errorf("imports = %v, want none (no host configuration)", cfg["imports"])
	}
	var shim map[string]any
	if _, err := toml.Decode(runscConfig{runsc: "/opt/runsc", root: "/r/runsc", logDir: "/r/logs", platform: "systrap"}.toml(), &shim); err != nil {
		t.Fatal(err)
	}
	if shim["binary_name"] != "/opt/runsc" || shim["runsc_config"].(map[string]any)["platform"] != "systrap" {
		t.Errorf("shim config %v", shim)
	}
}

// TestPKI: certificates chain to the CA and carry the names and usages
// the components check.
func TestPKI(t *testing.T) {
	ca, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	certFile, _, err := ca.issue(certSpec{name: "kubelet-serving", cn: NodeName, server: true, ips: []net.IP{net.ParseIP(nodeIP)}})
	if err != nil {
		t.Fatal(err)
	}
	clientFile, _, err := ca.issue(certSpec{name: "kubelet", cn: "system:node:" + NodeName, orgs: []string{"system:nodes"}, client: true})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM, _ := os.ReadFile(ca.caFile())
	roots.AppendCertsFromPEM(caPEM)
	load := func(path string) *x509.Certificate {
		b, _ := os.ReadFile(path)
		block, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if _, err := load(certFile).Verify(x509.VerifyOptions{Roots: roots, DNSName: nodeIP}); err != nil {
		t.Errorf("the kubelet's serving certificate does not verify for %s: %v", nodeIP, err)
	}
	client := load(clientFile)
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the kubelet's client certificate does not verify: %v", err)
	}
	if client.Subject.CommonName != "system:node:"+NodeName || strings.Join(client.Subject.Organization, ",") != "system:nodes" {
		t.Errorf("client subject %v", client.Subject)
	}
	if st, _ := os.Stat(filepath.Join(ca.dir, "ca.key")); st == nil || st.Mode().Perm() != 0o600 {
		t.Errorf("ca.key is not private: %v", st)
	}
}

// TestCNIConfig: the Pods' network has no gateway and no masquerade.
func TestCNIConfig(t *testing.T) {
	b, err := json.Marshal(cniConfig("/r/ipam"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Plugins []struct {
			Type      string
			IsGateway bool `json:"isGateway"`
			IPMasq    bool `json:"ipMasq"`
			IPAM      struct {
				DataDir string `json:"dataDir"`
			}
		}
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Plugins) != 1 {
		t.Fatalf("%s: %v", b, err)
	}
	p := c.Plugins[0]
	if p.Type != "bridge" || p.IsGateway || p.IPMasq || p.IPAM.DataDir != "/r/ipam" {
		t.Errorf("bridge plugin %+v", p)
	}
}

func TestInRigCgroup(t *testing.T) {
	for _, tc := range []struct {
		file string
		want bool
	}{
		{"4:memory:/airlock-kube/kubepods/besteffort/pod1/abc\n1:cpu:/\n", true},
		{"0::/airlock-kube\n", true},
		{"4:memory:/airlock-kubex/y\n", false},
		{"4:memory:/process_api/airlock-kube\n", false},
		{"", false},
	} {
		if got := inRigCgroup([]byte(tc.file)); got != tc.want {
			t.Errorf("inRigCgroup(%q) = %v, want %v", tc.file, got, tc.want)
		}
	}
}

func TestLogTailDropsNoise(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.log")
	log := "E1 real error\nW2 watcher.go:95] Error while processing event\nI3 last\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := logTail(path, 5); got != "E1 real error\nI3 last" {
		t.Errorf("logTail = %q", got)
	}
}

func TestForeignOf(t *testing.T) {
	all := []string{
		"/var/lib/airlock-kube/run/kubelet", "/tmp/someones-sandbox/rootfs", "/run/netns/x",
		"/sys/fs/cgroup/memory", "/proc/sys/fs/binfmt_misc", "/dev/shm", "/var", "/mnt/data", "/",
	}
	need := []string{"/var/lib/airlock-kube/run", "/var/cache/airlock/kube/k8s", "/etc"}
	got := foreignOf(all, need)
	want := []string{"/tmp/someones-sandbox/rootfs", "/run/netns/x", "/mnt/data"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("foreignOf = %v, want %v", got, want)
	}
}

// TestComponentFailure: a component that dies before it is ready, and one
// that never gets ready, give errors that name it, say what happened and
// carry its log's last lines.
func TestComponentFailure(t *testing.T) {
	dir := t.TempDir()
	notReady := func(context.Context) error { return errors.New("no answer on its port") }

	c, err := startComponent("fake-etcd", dir, []string{"/bin/sh", "-c", "echo starting; echo 'fatal: disk full' >&2; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	err = c.waitReady(context.Background(), 10*time.Second, notReady)
	for _, want := range []string{"fake-etcd exited", "exit status 3", "before it was ready", "fatal: disk full", filepath.Join(dir, "fake-etcd.log")} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}

	c, err = startComponent("fake-apiserver", dir, []string{"/bin/sh", "-c", "echo listening nowhere; exec sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop(time.Second)
	err = c.waitReady(context.Background(), 500*time.Millisecond, notReady)
	for _, want := range []string{"fake-apiserver was not ready within 500ms", "no answer on its port", "listening nowhere"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	c.stop(time.Second)
	if c.running() {
		t.Error("stop left the component running")
	}
}
