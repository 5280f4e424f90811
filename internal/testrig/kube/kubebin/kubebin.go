// Package kubebin builds and finds the programs of the kube test rig's
// one-node cluster: etcd, the Kubernetes control plane and kubelet,
// containerd with its runc shim and ctr, gVisor's containerd shim, and a
// pause program for the Pods' sandbox containers.
//
// Every program is built from a pinned Go module version fetched through
// the module proxy, in a throwaway module (k8s.io/kubernetes cannot be a
// dependency of airlock's own module: it needs a replace line per staging
// module), with CGO_ENABLED=0 -trimpath -ldflags=-s -w. The results are
// cached by version under $AIRLOCK_CACHE/kube (testrig.CacheDir), one
// directory per group, so that changing one pin rebuilds only its group:
//
//	go run ./internal/testrig/cmd/testrig kube-build   # what `make kube-rig` runs
//
// The four Kubernetes programs are one multi-call program, kube, linked
// once, with a hard link per program: it runs the program its name (argv[0])
// names. Each program's main package is copied from the module as a
// package of the throwaway module (its main renamed Main), and a generated
// main picks one (multiCall).
//
// A cold build takes several minutes (the Kubernetes group dominates);
// Find, which the rig and the hostcap probe use, never builds.
package kubebin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// The pinned versions of the components, all Go modules.
const (
	// KubernetesVersion is k8s.io/kubernetes: kube-apiserver,
	// kube-controller-manager, kube-scheduler and kubelet. The tests'
	// client (k8s.io/client-go in go.mod) is its v0 twin.
	KubernetesVersion = "v1.37.2"
	// EtcdVersion is go.etcd.io/etcd/server/v3, the etcd release
	// Kubernetes 1.37 is tested with.
	EtcdVersion = "v3.7.3"
	// ContainerdVersion is github.com/containerd/containerd/v2:
	// containerd, containerd-shim-runc-v2 and ctr. (Debian 12's containerd
	// 1.6 is older than kubelet 1.37 supports.)
	ContainerdVersion = "v2.4.2"
	// GvisorVersion is gvisor.dev/gvisor, for containerd-shim-runsc-v1:
	// the same version as the runsc `make runsc` builds (the Makefile's
	// RUNSC_VERSION, runsc.Version; a test checks they agree).
	GvisorVersion = "v0.0.0-20260905035102-160fafc42237"
)

// builderVersion changes when the way the groups are built changes, so
// that the cache is rebuilt.
const builderVersion = "2"

// The programs of a Set.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubelet               = "kubelet"
	Containerd            = "containerd"
	ShimRunc              = "containerd-shim-runc-v2"
	Ctr                   = "ctr"
	ShimRunsc             = "containerd-shim-runsc-v1"
	Pause                 = "pause"
)

//go:embed pause/main.go
var pauseSource []byte

// group is a set of programs built from one module version.
type group struct {
	name    string
	module  string // "" for the embedded pause
	version string
	// bins maps each program's name to its main package.
	bins    map[string]string
	tags    []string
	ldflags []string
	// stagingReplaces says the module's go.mod replaces its staging
	// modules by local paths (k8s.io/kubernetes): the throwaway module
	// replaces them by their published versions.
	stagingReplaces bool
	// source is the embedded main package, for pause.
	source []byte
	// multiCall, when set, is the name of one program that is all of
	// bins: each of bins is a hard link to it (see the package comment).
	multiCall string
	// patches change the module's source for this build: it is built
	// from a patched copy (a replace directive); the module cache, which
	// go build -overlay may not touch, stays as fetched.
	patches []patch
}

// patch replaces old by new in a file of a module, once; a build whose
// file does not contain old fails, so that a version bump revisits it.
type patch struct {
	file, old, new string
	// why is recorded in the group's manifest.
	why string
}

// shimOOMPatch lets gVisor's shim run where the root user lacks
// CAP_SYS_RESOURCE (a host whose bounding set drops it, as the VM this
// project is developed in does): the shim lowers its own OOM score to
// -999 and, as root, treats the kernel's refusal (EACCES) as fatal, so no
// gVisor Pod could start. Patched, it ignores that refusal and stays at
// its parent's score. Where the capability exists nothing changes.
var shimOOMPatch = patch{
	file: "pkg/shim/v1/manager.go",
	old: `	if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {
		return shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)
	}`,
	// Nothing may be logged here: containerd reads the start command's
	// output as its reply.
	new: `	// Patched by airlock's kube test rig: without CAP_SYS_RESOURCE the
	// kernel refuses (EACCES); the shim keeps its parent's score.
	if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil && !os.IsPermission(err) {
		return shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)
	}`,
	why: "tolerate EACCES from lowering the shim's OOM score without CAP_SYS_RESOURCE",
}

// groups are built in this order: while one compiles, the next one's
// modules download, so that Kubernetes' (the most) download during
// containerd's compile and gVisor's (fetched by make runsc already) during
// Kubernetes'.
func groups() []group {
	k8sVersion := "k8s.io/component-base/version"
	major, minor := kubeMajorMinor()
	return []group{
		{
			name: "etcd", module: "go.etcd.io/etcd/server/v3", version: EtcdVersion,
			bins: map[string]string{Etcd: "go.etcd.io/etcd/server/v3"},
		},
		{
			name: "containerd", module: "github.com/containerd/containerd/v2", version: ContainerdVersion,
			bins: map[string]string{
				Containerd: "github.com/containerd/containerd/v2/cmd/containerd",
				ShimRunc:   "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
				Ctr:        "github.com/containerd/containerd/v2/cmd/ctr",
			},
			tags:    []string{"urfave_cli_no_docs"},
			ldflags: []string{"-X github.com/containerd/containerd/v2/version.Version=" + ContainerdVersion},
		},
		{
			name: "kubernetes", module: "k8s.io/kubernetes", version: KubernetesVersion,
			bins: map[string]string{
				KubeAPIServer:         "k8s.io/kubernetes/cmd/kube-apiserver",
				KubeControllerManager: "k8s.io/kubernetes/cmd/kube-controller-manager",
				KubeScheduler:         "k8s.io/kubernetes/cmd/kube-scheduler",
				Kubelet:               "k8s.io/kubernetes/cmd/kubelet",
			},
			// Without a version, clients cannot parse the server's
			// ("v0.0.0-master+$Format:%H$").
			ldflags: []string{
				"-X " + k8sVersion + ".gitVersion=" + KubernetesVersion,
				"-X " + k8sVersion + ".gitMajor=" + major,
				"-X " + k8sVersion + ".gitMinor=" + minor,
				"-X " + k8sVersion + ".gitTreeState=clean",
				"-X " + k8sVersion + ".buildDate=1970-01-01T00:00:00Z",
			},
			stagingReplaces: true,
			// One link instead of four, one file instead of four: the
			// four share most of their packages. etcd, containerd and the
			// shims stay apart: other versions of shared modules than
			// Kubernetes pins, and containerd's plugins register globally.
			multiCall: "kube",
		},
		{
			name: "gvisor-shim", module: "gvisor.dev/gvisor", version: GvisorVersion,
			bins:    map[string]string{ShimRunsc: "gvisor.dev/gvisor/shim"},
			patches: []patch{shimOOMPatch},
		},
		{
			name: "pause", version: sourceVersion(pauseSource),
			bins:   map[string]string{Pause: "airlock.invalid/pause"},
			source: pauseSource,
		},
	}
}

// kubeMajorMinor splits KubernetesVersion: "1", "37".
func kubeMajorMinor() (major, minor string) {
	parts := strings.SplitN(strings.TrimPrefix(KubernetesVersion, "v"), ".", 3)
	if len(parts) < 2 {
		return "", ""
	}
	return parts[0], parts[1]
}

// sourceVersion names an embedded source by its hash.
func sourceVersion(src []byte) string {
	sum := sha256.Sum256(src)
	return hex.EncodeToString(sum[:6])
}

// key hashes everything that shapes the group's programs.
func (g group) key() string {
	h := sha256.New()
	fmt.Fprintln(h, builderVersion, g.module, g.version, g.tags, g.ldflags, g.stagingReplaces, g.multiCall)
	for _, p := range g.patches {
		fmt.Fprintln(h, p.file, p.old, p.new)
	}
	for _, name := range slices.Sorted(maps.Keys(g.bins)) {
		fmt.Fprintln(h, name, g.bins[name])
	}
	h.Write(g.source)
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// dir is where the group's programs are cached.
func (g group) dir(cacheDir string) string {
	return filepath.Join(cacheDir, "kube", g.name+"-"+g.version+"-"+g.key())
}

// manifest is written next to a group's programs once all are built.
type manifest struct {
	Group        string           `json:"group"`
	Module       string           `json:"module,omitempty"`
	Version      string           `json:"version"`
	Sizes        map[string]int64 `json:"sizes"`
	Built        time.Time        `json:"built"`
	BuildSeconds float64          `json:"build_seconds"`
	Go           string           `json:"go"`
	Patches      []string         `json:"patches,omitempty"`
}

const manifestName = "manifest.json"

// Set is a complete set of built programs.
type Set struct {
	paths map[string]string
	// Versions describes what was found, for messages: "kubernetes
	// v1.37.2", ….
	Versions []string
}

// Path returns the path of the named program (one of the constants above).
func (s *Set) Path(name string) string { return s.paths[name] }

// Names lists the programs of a Set.
func (s *Set) Names() []string { return slices.Sorted(maps.Keys(s.paths)) }

// ErrNotBuilt says some programs are not in the cache.
var ErrNotBuilt = errors.New("the kube test rig's programs are not built")

// Find returns the cached programs, without building. When any group is
// missing, the error (wrapping ErrNotBuilt) names them and says how to
// build them.
func Find(cacheDir string) (*Set, error) {
	s := &Set{paths: map[string]string{}}
	var missing []string
	for _, g := range groups() {
		dir := g.dir(cacheDir)
		if err := g.check(dir); err != nil {
			missing = append(missing, g.name+" "+g.version)
			continue
		}
		for name := range g.bins {
			s.paths[name] = filepath.Join(dir, name)
		}
		s.Versions = append(s.Versions, g.name+" "+g.version)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w in %s (missing: %s): run `make kube-rig` (about 10 minutes the first time, as root)",
			ErrNotBuilt, filepath.Join(cacheDir, "kube"), strings.Join(missing, ", "))
	}
	return s, nil
}

// check says whether dir holds the group's programs, whole.
func (g group) check(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for name := range g.bins {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if st.Size() != m.Sizes[name] {
			return fmt.Errorf("%s is %d bytes, its manifest says %d", name, st.Size(), m.Sizes[name])
		}
	}
	return nil
}

// Build builds the groups missing from the cache, logging progress and
// timings to log, and returns the complete set. The groups compile one
// after the other (each uses every CPU); the next group's modules download
// while one compiles.
func Build(ctx context.Context, cacheDir string, log io.Writer) (*Set, error) {
	if log == nil {
		log = io.Discard
	}
	top := filepath.Join(cacheDir, "kube")
	lock, err := testrig.Acquire(ctx, filepath.Join(top, "build.lock"), "the kube rig's build")
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	removeStale(top)
	if err := buildGroups(ctx, cacheDir, groups(), log); err != nil {
		return nil, err
	}
	return Find(cacheDir)
}

// buildGroups builds those of groups that are not in the cache; the
// caller holds the build lock.
func buildGroups(ctx context.Context, cacheDir string, groups []group, log io.Writer) error {
	top := filepath.Join(cacheDir, "kube")
	var todo []group
	for _, g := range groups {
		if g.check(g.dir(cacheDir)) != nil {
			todo = append(todo, g)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type prep struct {
		p   *prepared
		err error
	}
	ready := make([]chan prep, len(todo))
	for i := range ready {
		ready[i] = make(chan prep, 1)
	}
	startPrepare := func(i int) {
		go func() {
			p, err := todo[i].prepare(ctx, top)
			ready[i] <- prep{p, err}
		}()
	}
	// pending is the group whose download is under way and not yet
	// taken: on the way out, wait for it and remove what it made.
	pending := -1
	defer func() {
		cancel()
		if pending >= 0 {
			if r := <-ready[pending]; r.p != nil {
				os.RemoveAll(r.p.tmp)
			}
		}
	}()
	if len(todo) > 0 {
		startPrepare(0)
		pending = 0
	}
	for i, g := range todo {
		start := time.Now()
		fmt.Fprintf(log, "kubebin: building %s %s (%s)\n", g.name, g.version, strings.Join(slices.Sorted(maps.Keys(g.bins)), ", "))
		r := <-ready[i]
		pending = -1
		if r.err != nil {
			return fmt.Errorf("build %s %s: %w", g.name, g.version, r.err)
		}
		if i+1 < len(todo) {
			startPrepare(i + 1)
			pending = i + 1
		}
		downloaded := time.Since(start)
		err := g.build(ctx, r.p, g.dir(cacheDir))
		os.RemoveAll(r.p.tmp)
		if err != nil {
			return fmt.Errorf("build %s %s: %w", g.name, g.version, err)
		}
		fmt.Fprintf(log, "kubebin: built %s in %.0fs (%.0fs waiting for its modules)\n", g.name, time.Since(start).Seconds(), downloaded.Seconds())
	}
	return nil
}

// removeStale removes the temporary directories of interrupted builds; the
// caller holds the build lock.
func removeStale(top string) {
	entries, _ := os.ReadDir(top)
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "tmp-") {
			_ = os.RemoveAll(filepath.Join(top, e.Name()))
		}
	}
}

// goTool is the go command: $GO, else go on PATH.
func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// prepared is a group's throwaway module, its modules downloaded, ready
// to compile.
type prepared struct {
	tmp, mod, out, logPath string
	env                    []string
	pkgs                   []string
}

// prepare makes a throwaway module that requires the group's module in a
// new directory under top and downloads what it needs (go mod tidy): the
// part of a build that waits on the network, not the CPU. The caller
// removes p.tmp.
func (g group) prepare(ctx context.Context, top string) (p *prepared, err error) {
	tmp, err := os.MkdirTemp(top, "tmp-"+g.name+"-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	mod := filepath.Join(tmp, "mod")
	out := filepath.Join(tmp, "out")
	for _, d := range []string{mod, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	env := append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if len(g.patches) > 0 {
		if err := g.patchedCopy(ctx, tmp, filepath.Join(tmp, "src"), env); err != nil {
			return nil, err
		}
	}
	gomod, err := g.goMod(ctx, tmp, env)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), gomod, 0o644); err != nil {
		return nil, err
	}
	pkgs := slices.Sorted(maps.Values(g.bins))
	if g.multiCall != "" {
		info, err := download(ctx, tmp, env, g.module, g.version)
		if err != nil {
			return nil, err
		}
		if err := g.writeMultiCall(mod, info.Dir); err != nil {
			return nil, err
		}
		pkgs = []string{"."}
	} else if g.source != nil {
		if err := os.WriteFile(filepath.Join(mod, "main.go"), g.source, 0o644); err != nil {
			return nil, err
		}
	} else {
		var tools bytes.Buffer
		tools.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
		for _, p := range pkgs {
			fmt.Fprintf(&tools, "\t_ %q\n", p)
		}
		tools.WriteString(")\n")
		if err := os.WriteFile(filepath.Join(mod, "tools.go"), tools.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(tmp, "build.log")
	if err := runGo(ctx, mod, env, logPath, "mod", "tidy"); err != nil {
		return nil, err
	}
	return &prepared{tmp: tmp, mod: mod, out: out, logPath: logPath, env: env, pkgs: pkgs}, nil
}

// build compiles a prepared group's programs and moves them to dir.
func (g group) build(ctx context.Context, p *prepared, dir string) error {
	mod, out, env, logPath, pkgs := p.mod, p.out, p.env, p.logPath, p.pkgs
	args := []string{"build", "-trimpath", "-ldflags", strings.Join(append([]string{"-s", "-w"}, g.ldflags...), " ")}
	if len(g.tags) > 0 {
		args = append(args, "-tags", strings.Join(g.tags, ","))
	}
	if g.multiCall != "" {
		args = append(args, "-o", filepath.Join(out, g.multiCall))
	} else {
		args = append(args, "-o", out+"/")
	}
	args = append(args, pkgs...)
	start := time.Now()
	if err := runGo(ctx, mod, env, logPath, args...); err != nil {
		return err
	}
	m := manifest{Group: g.name, Module: g.module, Version: g.version, Sizes: map[string]int64{},
		Built: time.Now().UTC(), BuildSeconds: time.Since(start).Seconds(), Go: goVersion(ctx, env)}
	for _, pt := range g.patches {
		m.Patches = append(m.Patches, pt.file+": "+pt.why)
	}
	for name, pkg := range g.bins {
		// go build names a program after its package path's last element,
		// without a major version suffix.
		built := filepath.Join(out, binaryName(pkg))
		if g.multiCall != "" {
			// A hard link, not a symbolic one: a program that runs
			// itself again (os.Executable) keeps its name.
			if err := os.Link(filepath.Join(out, g.multiCall), filepath.Join(out, name)); err != nil {
				return fmt.Errorf("name %s: %w", name, err)
			}
		} else if built != filepath.Join(out, name) {
			if err := os.Rename(built, filepath.Join(out, name)); err != nil {
				return fmt.Errorf("name %s: %w", name, err)
			}
		}
		st, err := os.Stat(filepath.Join(out, name))
		if err != nil {
			return err
		}
		m.Sizes[name] = st.Size()
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, manifestName), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(out, dir)
}

// binaryName is the name go build gives the program of package pkg.
func binaryName(pkg string) string {
	base := path.Base(pkg)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		return path.Base(path.Dir(pkg))
	}
	return base
}

// goMod writes the throwaway module's go.mod.
func (g group) goMod(ctx context.Context, tmp string, env []string) ([]byte, error) {
	var b bytes.Buffer
	if g.module == "" {
		// An embedded program is the module itself.
		fmt.Fprintf(&b, "module airlock.invalid/%s\n\ngo 1.26\n", g.name)
		return b.Bytes(), nil
	}
	fmt.Fprintf(&b, "module airlock.invalid/build-%s\n\ngo 1.26\n", g.name)
	fmt.Fprintf(&b, "\nrequire %s %s\n", g.module, g.version)
	if len(g.patches) > 0 {
		// The patched copy patchedCopy made.
		fmt.Fprintf(&b, "\nreplace %s => ../src\n", g.module)
	}
	if !g.stagingReplaces {
		return b.Bytes(), nil
	}
	depMod, err := downloadGoMod(ctx, tmp, env, g.module, g.version)
	if err != nil {
		return nil, err
	}
	staging := stagingModules(depMod)
	if len(staging) == 0 {
		return nil, fmt.Errorf("%s@%s: its go.mod replaces no staging module; the build recipe needs updating", g.module, g.version)
	}
	v0 := "v0" + strings.TrimPrefix(g.version, "v1")
	b.WriteString("\nreplace (\n")
	for _, m := range staging {
		fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, v0)
	}
	b.WriteString(")\n")
	return b.Bytes(), nil
}

// patchedCopy copies the module's source from the module cache to dir
// (files there must not change) and applies the patches to the copy.
func (g group) patchedCopy(ctx context.Context, tmp, dir string, env []string) error {
	info, err := download(ctx, tmp, env, g.module, g.version)
	if err != nil {
		return err
	}
	if err := copyTree(info.Dir, dir); err != nil {
		return fmt.Errorf("copy %s@%s: %w", g.module, g.version, err)
	}
	for _, p := range g.patches {
		path := filepath.Join(dir, filepath.FromSlash(p.file))
		src, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("patch %s: %w", p.file, err)
		}
		if strings.Count(string(src), p.old) != 1 {
			return fmt.Errorf("patch %s of %s@%s: the code to change is not there once; revisit the patch (%s)",
				p.file, g.module, g.version, p.why)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(src), p.old, p.new, 1)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the regular files and directories under src to dst,
// writable.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			return copyFile(path, target)
		}
		return nil
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// downloadGoMod fetches a module's go.mod through the module proxy.
func downloadGoMod(ctx context.Context, tmp string, env []string, module, version string) ([]byte, error) {
	info, err := download(ctx, tmp, env, module, version)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(info.GoMod)
}

// moduleInfo is what go mod download -json says of a module.
type moduleInfo struct {
	Dir, GoMod, Error string
}

// download fetches a module through the module proxy into the module
// cache.
func download(ctx context.Context, tmp string, env []string, module, version string) (*moduleInfo, error) {
	cmd := exec.CommandContext(ctx, goTool(), "mod", "download", "-json", module+"@"+version)
	cmd.Dir, cmd.Env = tmp, env
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go mod download %s@%s: %w: %s", module, version, err, bytes.TrimSpace(ee.Stderr))
		}
		return nil, fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var info moduleInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	if info.Error != "" {
		return nil, fmt.Errorf("go mod download %s@%s: %s", module, version, info.Error)
	}
	return &info, nil
}

// stagingModules lists the modules a go.mod replaces by a ./staging path.
func stagingModules(gomod []byte) []string {
	var mods []string
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "replace ")
		from, to, ok := strings.Cut(line, "=>")
		if !ok || !strings.HasPrefix(strings.TrimSpace(to), "./staging/") {
			continue
		}
		if f := strings.Fields(from); len(f) > 0 {
			mods = append(mods, f[0])
		}
	}
	return mods
}

// runGo runs the go command in dir, appending its output to logPath; a
// failure carries the log's last lines.
func runGo(ctx context.Context, dir string, env []string, logPath string, args ...string) error {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", args[0]+" "+args[1], err, testrig.Tail(logPath, 20))
	}
	return nil
}

// goVersion is the go command's version, for the manifest.
func goVersion(ctx context.Context, env []string) string {
	cmd := exec.CommandContext(ctx, goTool(), "env", "GOVERSION")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
