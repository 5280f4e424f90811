package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults for a Spec's zero fields.
const (
	DefaultMemory      = 512 << 20
	DefaultCPUs        = 0.5
	DefaultPids        = 64
	DefaultTimeout     = 10 * time.Second
	DefaultLifetime    = 5 * time.Minute
	DefaultDisk        = 256 << 20
	DefaultTmp         = 64 << 20
	DefaultOutputLimit = 1 << 20
	DefaultOpenFiles   = 1024
	DefaultPath        = "/usr/local/bin:/usr/bin:/bin"
	Workspace          = "/workspace"
)

// Spec describes a sandbox. The zero value is the safe default: no
// network, no mounts, no environment, the limits above.
type Spec struct {
	// ID names the sandbox; empty means a new random one.
	ID string `json:"id,omitempty"`
	// Root is a host directory to use as the sandbox's read-only root file
	// system. Empty means a root composed from the host's /usr and an
	// allowlist of /etc.
	Root string `json:"root,omitempty"`
	// Limits bound the sandbox and each command in it.
	Limits Limits `json:"limits"`
	// Env is added to every command's default environment ("KEY=VALUE").
	Env []string `json:"env,omitempty"`
	// Mounts are host paths made visible inside. None by default.
	Mounts []Mount `json:"mounts,omitempty"`
	// Network says what the sandbox may reach. The zero value is NetworkNone.
	Network Network `json:"network"`
	// AllowDegraded names isolation layers the caller accepts running
	// without, when the host lacks them. Empty means fail closed.
	AllowDegraded []Layer `json:"allow_degraded,omitempty"`
	// Module is a host path of a WebAssembly (WASI command) module that
	// the sandbox runs as a command named after the file (without .wasm).
	// Only the wasm driver runs one. Empty: none.
	Module string `json:"module,omitempty"`
	// Image is the container image the sandbox's root comes from, for a
	// driver that runs images (docker): one its engine already has
	// ("python:3.12-slim", "registry.example/tools@sha256:…"). Empty means
	// the driver's default. Drivers that compose their root ignore it.
	Image string `json:"image,omitempty"`
	// Runtime is the container runtime a driver that runs images starts the
	// sandbox with, as its engine names it ("runc", "runsc", "kata").
	// Empty means the driver's default.
	Runtime string `json:"runtime,omitempty"`
	// Home, when set (/home/NAME, see ValidHome), is a second name of
	// /workspace: the same tmpfs bound at Home, owned by the workload's
	// user, which is the commands' default working directory, HOME, PWD
	// and, with USER=NAME, the base of the file API's relative paths, as
	// E2B's /home/user is. Empty: /workspace is the home, USER=sandbox.
	// Drivers with Capabilities.Home make it.
	Home string `json:"home,omitempty"`
}

// Limits bound a sandbox. A zero field means its default.
type Limits struct {
	// MemoryBytes caps the memory of all commands together (no swap). 512 MiB.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// CPUs is the CPU quota in cores. 0.5.
	CPUs float64 `json:"cpus,omitempty"`
	// Pids caps the number of processes and threads of all commands. 64.
	Pids int `json:"pids,omitempty"`
	// Timeout is each command's default wall-time limit. 10 s.
	Timeout time.Duration `json:"timeout,omitempty"`
	// CPUTime is each command's default CPU-time limit. Zero means none.
	CPUTime time.Duration `json:"cpu_time,omitempty"`
	// Lifetime is how long the sandbox may live. 5 min.
	Lifetime time.Duration `json:"lifetime,omitempty"`
	// DiskBytes is the size of /workspace. 256 MiB.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// TmpBytes is the size of /tmp. 64 MiB.
	TmpBytes int64 `json:"tmp_bytes,omitempty"`
	// OutputBytes caps each output stream of a command; past it the command
	// is killed with reason output_limit. 1 MiB.
	OutputBytes int64 `json:"output_bytes,omitempty"`
	// OpenFiles is the RLIMIT_NOFILE of every command. 1024.
	OpenFiles int `json:"open_files,omitempty"`
}

// Mount makes a host path visible inside the sandbox.
type Mount struct {
	// Source is the host path. It must exist and must not be a symlink.
	Source string `json:"source"`
	// Target is the absolute path inside the sandbox.
	Target string `json:"target"`
	// Writable lets the sandbox write to it; read-only by default.
	Writable bool `json:"writable,omitempty"`
	// Cow makes it a copy-on-write mount of a host directory: the
	// sandbox writes freely, its writes land in a layer of its own
	// (bounded by its disk limit), and reach the host only when a person
	// applies them (see internal/cow). Not with Writable.
	Cow bool `json:"cow,omitempty"`
}

// NetworkMode says how a sandbox reaches the network.
type NetworkMode string

const (
	// NetworkNone gives the sandbox loopback only.
	NetworkNone NetworkMode = "none"
	// NetworkEgress gives the sandbox an HTTP proxy at 127.0.0.1:3128 inside
	// it, which reaches only what AllowHosts and AllowAddresses name. The
	// sandbox still has no route out of its own.
	NetworkEgress NetworkMode = "egress"
)

// Network is a sandbox's network policy.
type Network struct {
	// Mode is NetworkNone when empty.
	Mode NetworkMode `json:"mode,omitempty"`
	// AllowHosts are the host names the proxy lets through: "example.com",
	// "*.example.com" (any name below it, not itself), each optionally with
	// ":port". Without a port, 80 and 443 are allowed. Empty: none.
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// AllowAddresses are "IP:port" destinations allowed although they are
	// IP literals or in a private, loopback or metadata range: the only way
	// through that block. Empty: none.
	AllowAddresses []string `json:"allow_addresses,omitempty"`
	// Deny are host patterns (as AllowHosts), IP addresses or CIDR prefixes
	// that are refused even when an allow rule matches. Empty: none.
	Deny []string `json:"deny,omitempty"`
	// Report lets through what the allowlist and deny rules would refuse and
	// logs it as "would deny". Private and metadata addresses stay blocked.
	// False: enforce.
	Report bool `json:"report,omitempty"`
	// Secrets names the daemon's secrets ([[egress.secret]]) that a
	// template claims and this sandbox may use: it gets their placeholders
	// and the proxy puts them into its requests. A secret no template
	// names goes to every egress sandbox; one a template names, only to
	// sandboxes whose network names it. Set from the template.
	Secrets []string `json:"secrets,omitempty"`
	// Rules are method and path rules for hosts, applied beside the
	// daemon's ([[egress.rule]]): a template's, and a create's own.
	Rules []HTTPRule `json:"rules,omitempty"`
}

// HTTPRule restricts the requests a sandbox may send to a host by method
// and path (egress.HostRule; the proxy parses and applies it). A host with
// a rule is intercepted, so that the rule holds over HTTPS too.
//
//	host = "api.github.com"            # or "*.example.com"
//	allow = ["GET /repos/**", "HEAD"]  # empty: everything not denied
//	deny = ["* /admin/**"]
type HTTPRule struct {
	Host  string   `toml:"host" json:"host"`
	Allow []string `toml:"allow" json:"allow,omitempty"`
	Deny  []string `toml:"deny" json:"deny,omitempty"`
}

// Validate checks n and says what is wrong.
func (n Network) Validate() error {
	switch n.Mode {
	case "", NetworkNone:
		if len(n.AllowHosts) > 0 || len(n.AllowAddresses) > 0 || len(n.Deny) > 0 || n.Report || len(n.Secrets) > 0 || len(n.Rules) > 0 {
			return invalid("network rules given with network mode %q: use mode %q", NetworkNone, NetworkEgress)
		}
		return nil
	case NetworkEgress:
	default:
		return invalid("network mode %q: use %q or %q", n.Mode, NetworkNone, NetworkEgress)
	}
	for _, h := range n.AllowHosts {
		if _, _, err := ParseHostPattern(h); err != nil {
			return err
		}
	}
	for _, a := range n.AllowAddresses {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
			return invalid("allow address %q: give IP:PORT, e.g. 10.1.2.3:443 or [fd00::1]:443", a)
		}
	}
	for _, d := range n.Deny {
		if _, err := netip.ParsePrefix(d); err == nil {
			continue
		}
		if _, err := netip.ParseAddr(d); err == nil {
			continue
		}
		if _, _, err := ParseHostPattern(d); err != nil {
			return invalid("deny rule %q: give a host pattern, an IP address or a CIDR prefix", d)
		}
	}
	return nil
}

// ParseHostPattern splits an allow-host pattern ("example.com",
// "*.example.com", either with ":port") into its lower-case name and port
// (0: none given).
func ParseHostPattern(p string) (name string, port int, err error) {
	bad := func(why string) (string, int, error) {
		return "", 0, invalid("host pattern %q: %s (e.g. example.com, *.pypi.org:443)", p, why)
	}
	name = strings.ToLower(strings.TrimSpace(p))
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		n, err := strconv.Atoi(name[i+1:])
		if err != nil || n < 1 || n > 65535 {
			return bad("port must be 1-65535")
		}
		name, port = name[:i], n
	}
	name = strings.TrimSuffix(name, ".")
	label := strings.TrimPrefix(name, "*.")
	if label == "" || len(label) > 253 {
		return bad("no host name")
	}
	for _, l := range strings.Split(label, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return bad("not a host name")
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return bad("not a host name")
			}
		}
	}
	return name, port, nil
}

// Layer names one isolation layer.
type Layer string

const (
	LayerUserNS     Layer = "userns"
	LayerPidNS      Layer = "pidns"
	LayerMountNS    Layer = "mountns"
	LayerNetNS      Layer = "netns"
	LayerIPCNS      Layer = "ipcns"
	LayerUTSNS      Layer = "utsns"
	LayerCgroupNS   Layer = "cgroupns"
	LayerCgroups    Layer = "cgroups"
	LayerSeccomp    Layer = "seccomp"
	LayerLandlock   Layer = "landlock"
	LayerNoNewPrivs Layer = "no_new_privs"
	LayerCaps       Layer = "capabilities"
	LayerUIDRange   Layer = "uid_range"
	LayerRootFS     Layer = "rootfs"
	LayerGVisor     Layer = "gvisor"
	// LayerWasm is WebAssembly's own isolation: a module reaches only its
	// linear memory and the host functions it is given (WASI).
	LayerWasm Layer = "wasm"
	// LayerMicroVM is a virtual machine of its own, with its own kernel.
	LayerMicroVM Layer = "microvm"
)

// ValidID reports whether id can name a sandbox or an exec: lower-case
// letters, digits, '-' and '_', at most 63 characters. IDs become parts of
// host paths, so nothing else is allowed.
func ValidID(id string) bool {
	return matchName(id, 63, func(c byte) bool { return lower(c) || digit(c) }, "_-")
}

// validImage reports whether s looks like an image reference: the
// characters of registry hosts, paths, tags and digests, no spaces, at
// most 512 bytes.
func validImage(s string) bool { return matchName(s, 512, alnum, "._:/@+-") }

// validRuntime reports whether s looks like a runtime's name.
func validRuntime(s string) bool { return matchName(s, 64, alnum, "._-") }

// matchName reports whether s is 1 to max bytes, begins with a byte first
// accepts and goes on with bytes first accepts or that are in more. (A
// regexp with a bounded repetition such as {0,511} compiles to one
// instruction per repetition: it cost every airlock start almost a
// millisecond.)
func matchName(s string, max int, first func(byte) bool, more string) bool {
	if s == "" || len(s) > max || !first(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !first(s[i]) && strings.IndexByte(more, s[i]) < 0 {
			return false
		}
	}
	return true
}

func lower(c byte) bool { return 'a' <= c && c <= 'z' }
func digit(c byte) bool { return '0' <= c && c <= '9' }
func alnum(c byte) bool { return lower(c) || digit(c) || ('A' <= c && c <= 'Z') }

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	set := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	set(&l.MemoryBytes, DefaultMemory)
	set(&l.DiskBytes, DefaultDisk)
	set(&l.TmpBytes, DefaultTmp)
	set(&l.OutputBytes, DefaultOutputLimit)
	if l.CPUs == 0 {
		l.CPUs = DefaultCPUs
	}
	if l.Pids == 0 {
		l.Pids = DefaultPids
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	}
	if l.Lifetime == 0 {
		l.Lifetime = DefaultLifetime
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	return l
}

// Validate checks s and says what is wrong in words a caller can act on.
func (s Spec) Validate() error {
	if s.ID != "" && !ValidID(s.ID) {
		return invalid("sandbox id %q: use 1-63 lower-case letters, digits, '-' or '_'", s.ID)
	}
	l := s.Limits
	switch {
	case l.MemoryBytes < 0 || (l.MemoryBytes > 0 && l.MemoryBytes < 4<<20):
		return invalid("memory limit %d bytes: give at least 4 MiB", l.MemoryBytes)
	case math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) || l.CPUs < 0 || (l.CPUs > 0 && l.CPUs < 0.01) || l.CPUs > 4096:
		return invalid("cpus %g: give a number of cores from 0.01 to 4096", l.CPUs)
	case l.Pids < 0 || (l.Pids > 0 && l.Pids < 2):
		return invalid("pids limit %d: give at least 2", l.Pids)
	case l.Timeout < 0, l.CPUTime < 0, l.Lifetime < 0:
		return invalid("timeouts cannot be negative")
	case l.DiskBytes < 0, l.TmpBytes < 0, l.OutputBytes < 0, l.OpenFiles < 0:
		return invalid("sizes cannot be negative")
	case l.OpenFiles > 0 && l.OpenFiles < 16:
		return invalid("open files %d: give at least 16", l.OpenFiles)
	}
	for _, e := range s.Env {
		if err := validEnv(e); err != nil {
			return err
		}
	}
	for _, m := range s.Mounts {
		if !path.IsAbs(m.Source) {
			return invalid("mount source %q: give an absolute host path", m.Source)
		}
		if err := validTarget(m.Target); err != nil {
			return err
		}
		if m.Cow && m.Writable {
			return invalid("mount %s: a cow mount is writable in the sandbox already; leave writable out", m.Target)
		}
	}
	if s.Module != "" && (!path.IsAbs(s.Module) || !strings.HasSuffix(s.Module, ".wasm")) {
		return invalid("module %q: give the absolute host path of a .wasm file", s.Module)
	}
	if err := s.Network.Validate(); err != nil {
		return err
	}
	if err := ValidHome(s.Home); err != nil {
		return err
	}
	if s.Image != "" && !validImage(s.Image) {
		return invalid("image %q: give an image name as the engine knows it (name[:tag] or name@sha256:digest)", s.Image)
	}
	if s.Runtime != "" && !validRuntime(s.Runtime) {
		return invalid("runtime %q: give a runtime name as the engine knows it (runc, runsc, kata)", s.Runtime)
	}
	for _, d := range s.AllowDegraded {
		if !slices.Contains(DegradableLayers, d) {
			return invalid("--allow-degraded %q: only %v can be left out", d, DegradableLayers)
		}
	}
	return nil
}

// DegradableLayers are the layers a caller may accept running without.
var DegradableLayers = []Layer{LayerCgroups, LayerSeccomp, LayerLandlock, LayerCgroupNS}

// WallTimeout is the wall-time limit of r in a sandbox of limits l: the
// request's own Timeout; when it asks for none, none for a background
// command or one on a terminal (it runs at a person's pace, and ends with
// its sandbox), else the sandbox's Timeout (its default when unset). The
// drivers and the supervisor all resolve it here.
func (r ExecRequest) WallTimeout(l Limits) time.Duration {
	switch {
	case r.Timeout > 0:
		return r.Timeout
	case r.Background || r.PTY != nil:
		return 0
	case l.Timeout > 0:
		return l.Timeout
	}
	return DefaultTimeout
}

// Validate checks r before it is sent to a sandbox.
func (r ExecRequest) Validate() error {
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return invalid("no command given")
	}
	for _, a := range r.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return invalid("argument contains a NUL byte")
		}
	}
	for _, e := range r.Env {
		if err := validEnv(e); err != nil {
			return err
		}
	}
	if r.Dir != "" && !path.IsAbs(r.Dir) {
		return invalid("working directory %q: give an absolute path inside the sandbox", r.Dir)
	}
	if r.Timeout < 0 || r.CPUTime < 0 {
		return invalid("timeouts cannot be negative")
	}
	if r.PTY != nil {
		return r.PTY.Validate()
	}
	return nil
}

func validEnv(e string) error {
	k, _, ok := strings.Cut(e, "=")
	if !ok || k == "" || strings.ContainsAny(e, "\x00") {
		return invalid("environment entry %q: write KEY=VALUE", e)
	}
	return nil
}

var reservedTargets = []string{"/", "/proc", "/dev", "/usr", "/etc", "/tmp", Workspace, "/sys"}

func validTarget(t string) error {
	if !path.IsAbs(t) || path.Clean(t) != t {
		return invalid("mount target %q: give a clean absolute path inside the sandbox", t)
	}
	for _, r := range reservedTargets {
		if t == r || (r != "/" && strings.HasPrefix(t, r+"/") && (r == "/proc" || r == "/dev" || r == "/sys")) {
			return invalid("mount target %q: %s belongs to the sandbox; mount below /mnt or %s instead", t, r, Workspace)
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// NewID returns a new random sandbox id ("sb-" and 12 hex digits).
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

// String writes m as HOST:PATH:MODE, MODE ro, rw or cow.
func (m Mount) String() string {
	mode := "ro"
	switch {
	case m.Cow:
		mode = "cow"
	case m.Writable:
		mode = "rw"
	}
	return m.Source + ":" + m.Target + ":" + mode
}

// ParseMount reads HOST:PATH[:ro|:rw|:cow].
func ParseMount(s string) (Mount, error) {
	parts := strings.Split(s, ":")
	m := Mount{}
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw" || parts[2] == "cow"):
		m.Writable = parts[2] == "rw"
		m.Cow = parts[2] == "cow"
	default:
		return m, invalid("mount %q: write HOST:PATH, HOST:PATH:ro, HOST:PATH:rw or HOST:PATH:cow (copy-on-write: changes reach the host when applied)", s)
	}
	m.Source, m.Target = parts[0], parts[1]
	return m, nil
}
