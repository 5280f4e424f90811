package supervisor

import (
	"fmt"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Config is the daemon's configuration file (TOML). Every field may be left
// out; the zero Config gives one template, "default", on the native driver
// with sandbox's default limits and no pool. The reference file with every
// key is packaging/config.toml (installed as /etc/airlock/config.toml).
//
//	listen = "127.0.0.1:7070"  # read by airlock serve, like the four below
//	state_dir = "/var/lib/airlock"
//	policy = ""              # policy file; none: the safe defaults
//	log_format = "text"      # or "json"
//	drivers = []             # drivers offered; none: every one this host runs
//	reap_interval = "1s"     # how often TTLs and idle timeouts are checked
//	sweep_interval = "1m"    # how often the drivers' orphans are swept
//	retention = "1h"         # how long records of ended sandboxes are kept
//	memory_reserve = "512M"  # host memory admission keeps free
//	allowed_hosts = ["airlock.internal"]   # Host names accepted besides localhost
//	allowed_origins = []     # browser Origins accepted (none by default)
//
//	[[template]]
//	name = "python"
//	driver = "native"        # or "gvisor", or "docker" with:
//	image = "python:3.12-slim"   # an image the Docker engine has
//	runtime = "runsc"        # the engine's runtime (default runc)
//	memory = "256M"
//	cpus = 0.5
//	pids = 64
//	timeout = "30s"          # each exec's default wall-time limit
//	ttl = "10m"              # sandbox lifetime unless extended
//	max_ttl = "1h"           # the most a create or extend may ask for
//	idle_timeout = "5m"      # destroyed after this long unused (0: never)
//	pool = 2                 # sandboxes kept ready
//	output_buffer = "1M"     # recent output kept per stream of every process
type Config struct {
	// Listen, StateDir, Policy, AuditKey, LogFormat and Drivers are
	// airlock serve's; its flags override them.
	Listen    string   `toml:"listen"`
	StateDir  string   `toml:"state_dir"`
	Policy    string   `toml:"policy"`
	AuditKey  string   `toml:"audit_key"`
	LogFormat string   `toml:"log_format"`
	Drivers   []string `toml:"drivers"`

	ReapInterval   Duration   `toml:"reap_interval"`
	SweepInterval  Duration   `toml:"sweep_interval"`
	Retention      Duration   `toml:"retention"`
	MemoryReserve  Size       `toml:"memory_reserve"`
	AllowedHosts   []string   `toml:"allowed_hosts"`
	AllowedOrigins []string   `toml:"allowed_origins"`
	Templates      []Template `toml:"template"`
	// Egress configures the egress proxy (see EgressConfig).
	Egress EgressConfig `toml:"egress"`
	// E2B configures the E2B-compatible endpoints (see E2BConfig).
	E2B E2BConfig `toml:"e2b"`
	// ObjectStore is the S3-compatible store that snapshots (with
	// Snapshots.Store "s3") and exports use (see objects.go).
	ObjectStore objstore.Config `toml:"object_store"`
	// Snapshots says where snapshots are kept.
	Snapshots SnapshotsConfig `toml:"snapshots"`
	// Export says where a sandbox's files may be exported to.
	Export ExportConfig `toml:"export"`

	// file is the file the Config was read from, and where finds a key's
	// line in it (see KeyError).
	file  string
	where func(key string) int
}

// Template is a named preset a create starts from. A create may narrow its
// limits, never widen them.
type Template struct {
	Name string `toml:"name"`
	// Driver is the driver's name. Empty means "native".
	Driver string `toml:"driver"`
	// Root is the host directory used as the read-only root. Empty means
	// the driver's default root.
	Root string `toml:"root"`
	// Module is a WASI command module (a .wasm file) the sandboxes run as
	// a command named after the file; only the wasm driver runs one.
	// Empty: none.
	Module string `toml:"module"`
	// Image and Runtime are the container image and the runtime of a
	// driver that runs images: for docker an image the engine has, and
	// "runc" (empty), "runsc" or "kata" as registered with the engine; for
	// kubernetes an image the nodes can pull, and a RuntimeClass
	// ("gvisor", empty, or "runc" for the nodes' default runtime).
	Image   string `toml:"image"`
	Runtime string `toml:"runtime"`
	// Home is the sandboxes' home, /home/NAME (sandbox.Spec.Home): the
	// same files as /workspace under a second name, commands' working
	// directory and HOME, USER=NAME; "/home/user" is E2B's, which the
	// E2B endpoints give their sandboxes whatever the template says.
	// Empty: /workspace.
	Home          string   `toml:"home"`
	Env           []string `toml:"env"`
	AllowDegraded []string `toml:"allow_degraded"`
	// Mounts are host paths every sandbox of the template sees:
	// "HOST:PATH[:ro|:rw|:cow]" (cow: copy-on-write, its changes applied
	// to the host after review). Empty: none.
	Mounts []string `toml:"mounts"`

	Memory      Size     `toml:"memory"`
	CPUs        float64  `toml:"cpus"`
	Pids        int      `toml:"pids"`
	Timeout     Duration `toml:"timeout"`
	CPUTime     Duration `toml:"cpu_time"`
	Disk        Size     `toml:"disk"`
	Tmp         Size     `toml:"tmp"`
	OutputLimit Size     `toml:"output_limit"`
	OpenFiles   int      `toml:"open_files"`

	// TTL is a sandbox's lifetime unless the create asks for less or it is
	// extended. Zero means sandbox.DefaultLifetime (5 min).
	TTL Duration `toml:"ttl"`
	// MaxTTL bounds the TTL a create or an extend may ask for. Zero means 24 h.
	MaxTTL Duration `toml:"max_ttl"`
	// IdleTimeout destroys a sandbox unused this long. Zero means never.
	IdleTimeout Duration `toml:"idle_timeout"`
	// PausedTTL destroys a sandbox paused this long (its TTL and idle
	// timeout wait while it is paused). Zero means DefaultPausedTTL (30
	// days).
	PausedTTL Duration `toml:"paused_ttl"`
	// Pool is the number of sandboxes kept ready for claims. Zero: none.
	Pool int `toml:"pool"`
	// OutputBuffer is how much of the recent output of each stream of
	// every process (stdout, stderr, or a terminal's) a sandbox keeps for
	// the callers that follow it and for waits, 4 KiB to 256 MiB. Zero
	// means DefaultOutputBuffer (1 MiB). With at least the output limit
	// (output_limit), no follower ever misses a byte.
	OutputBuffer Size `toml:"output_buffer"`
	// Network is the sandboxes' default network and the most a create may
	// ask for (see TemplateNetwork). Zero: none, and nothing more.
	Network TemplateNetwork `toml:"network"`
	// ExposePorts says who may reach a server in the sandboxes from
	// outside through the daemon (exposed ports, E2B's getHost): "all"
	// (empty), whoever reaches the listener unless the sandbox was made
	// private; "token", only a request with the sandbox's traffic token;
	// "none", nobody.
	ExposePorts string `toml:"expose_ports"`
	// ExportTypes are the content types the sandboxes' files may be
	// exported as ("text/csv", "image/png", "application/pdf", "image/*"),
	// as their bytes say, never their names. None: no export.
	ExportTypes []string `toml:"export_types"`
	// ExportMax is the largest file an export stores. Zero means
	// DefaultExportMax (100 MiB).
	ExportMax Size `toml:"export_max"`
}

// Defaults of Config.
const (
	DefaultReapInterval  = time.Second
	DefaultSweepInterval = time.Minute
	DefaultRetention     = time.Hour
	DefaultMemoryReserve = 512 << 20
	DefaultMaxTTL        = 24 * time.Hour
	DefaultPausedTTL     = 30 * 24 * time.Hour
	DefaultTemplate      = "default"
	DefaultListen        = "127.0.0.1:7070"
	DefaultStateDir      = "/var/lib/airlock"
	DefaultLogFormat     = "text"
)

// LoadConfig reads a TOML configuration file. A mistake in it is a
// *ConfigError naming the key and its line.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return parseConfig(path, string(b))
}

// withDefaults fills zero fields and checks the templates.
func (c Config) withDefaults() (Config, error) {
	if err := c.checkServe(); err != nil {
		return c, err
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.LogFormat == "" {
		c.LogFormat = DefaultLogFormat
	}
	if c.ReapInterval <= 0 {
		c.ReapInterval = Duration(DefaultReapInterval)
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = Duration(DefaultSweepInterval)
	}
	if c.Retention <= 0 {
		c.Retention = Duration(DefaultRetention)
	}
	if c.MemoryReserve == 0 {
		c.MemoryReserve = DefaultMemoryReserve
	}
	if len(c.Templates) == 0 {
		c.Templates = []Template{{Name: DefaultTemplate}}
	}
	seen := map[string]bool{}
	named := map[string]bool{}
	for _, s := range c.Egress.Secrets {
		if s.Name != "" {
			named[s.Name] = true
		}
	}
	c.Egress.scoped = map[string]bool{}
	for i := range c.Templates {
		t := &c.Templates[i]
		key := func(k string) string {
			if k == "" {
				return fmt.Sprintf("template[%d]", i)
			}
			return fmt.Sprintf("template[%d].%s", i, k)
		}
		if !sandbox.ValidID(t.Name) {
			return c, keyErr(key("name"), fmt.Errorf("template name %q: use 1-63 lower-case letters, digits, '-' or '_'", t.Name))
		}
		if seen[t.Name] {
			return c, keyErr(key("name"), fmt.Errorf("template %q is defined twice", t.Name))
		}
		seen[t.Name] = true
		if t.Driver == "" {
			t.Driver = "native"
		}
		if t.TTL == 0 {
			t.TTL = Duration(sandbox.DefaultLifetime)
		}
		if t.MaxTTL == 0 {
			t.MaxTTL = Duration(max(DefaultMaxTTL, time.Duration(t.TTL)))
		}
		if t.PausedTTL <= 0 {
			t.PausedTTL = Duration(DefaultPausedTTL)
		}
		if k := t.badLifetime(); k != "" {
			return c, keyErr(key(k), fmt.Errorf("template %q: ttl, max_ttl, idle_timeout and pool must be non-negative, ttl at most max_ttl, pool at most 1000", t.Name))
		}
		if t.OutputBuffer == 0 {
			t.OutputBuffer = DefaultOutputBuffer
		}
		if t.OutputBuffer < minOutputBuffer || t.OutputBuffer > maxOutputBuffer {
			return c, fmt.Errorf("template %q: output_buffer must be between 4k and 256M", t.Name)
		}
		for _, m := range t.Mounts {
			if _, err := sandbox.ParseMount(m); err != nil {
				return c, keyErr(key("mounts"), fmt.Errorf("template %q: %w", t.Name, err))
			}
		}
		if err := t.spec().Validate(); err != nil {
			return c, keyErr(key(t.badSpecKey()), fmt.Errorf("template %q: %w", t.Name, err))
		}
		if err := t.Network.check(named); err != nil {
			return c, keyErr(key("network"), fmt.Errorf("template %q: %w", t.Name, err))
		}
		for _, s := range t.Network.Secrets {
			c.Egress.scoped[s] = true
		}
		if sandbox.NetworkMode(t.Network.Mode) == sandbox.NetworkEgress && len(t.Network.Rules) > 0 {
			c.Egress.templateRules = true
		}
		switch t.ExposePorts {
		case "":
			t.ExposePorts = ExposeAll
		case ExposeAll, ExposeToken, ExposeNone:
		default:
			return c, keyErr(key("expose_ports"), fmt.Errorf("template %q: expose_ports %q: give \"all\", \"token\" or \"none\"", t.Name, t.ExposePorts))
		}
		if k, err := t.checkExport(); err != nil {
			return c, keyErr(key(k), fmt.Errorf("template %q: %w", t.Name, err))
		}
	}
	if err := c.Egress.check(); err != nil {
		return c, err
	}
	var err error
	if c.E2B, err = c.E2B.withDefaults(c.Templates); err != nil {
		return c, err
	}
	if c.ObjectStore.Region == "" {
		c.ObjectStore.Region = objstore.DefaultRegion
	}
	if c.Snapshots.Store == "" {
		c.Snapshots.Store = SnapshotsLocal
	}
	if err := c.checkObjects(); err != nil {
		return c, err
	}
	return c, nil
}

// CheckDriver refuses a template whose sandboxes d, its driver, cannot
// run (sandbox.Capabilities.CheckSpec), naming the template.
func (t Template) CheckDriver(d sandbox.Driver) error {
	spec := t.spec()
	if c := d.Capabilities(); c.ImageRoot && spec.Image != "" && spec.Root == "" {
		spec.Root = "(the image's)" // unpacked at create (Options.Images)
	}
	if err := d.Capabilities().CheckSpec(t.Driver, spec); err != nil {
		return fmt.Errorf("template %q: %w", t.Name, err)
	}
	return nil
}

// spec is the Spec the template makes, every limit filled in.
func (t Template) spec() sandbox.Spec {
	s := sandbox.Spec{
		Root:    t.Root,
		Module:  t.Module,
		Image:   t.Image,
		Runtime: t.Runtime,
		Home:    t.Home,
		Env:     append([]string(nil), t.Env...),
		Network: t.Network.defaultNetwork(),
		Limits: sandbox.Limits{
			MemoryBytes: int64(t.Memory), CPUs: t.CPUs, Pids: t.Pids,
			Timeout: time.Duration(t.Timeout), CPUTime: time.Duration(t.CPUTime),
			DiskBytes: int64(t.Disk), TmpBytes: int64(t.Tmp), OutputBytes: int64(t.OutputLimit),
			OpenFiles: t.OpenFiles,
		},
	}
	for _, l := range t.AllowDegraded {
		s.AllowDegraded = append(s.AllowDegraded, sandbox.Layer(l))
	}
	for _, m := range t.Mounts {
		if mt, err := sandbox.ParseMount(m); err == nil { // checked at load
			s.Mounts = append(s.Mounts, mt)
		}
	}
	s.Limits = s.Limits.WithDefaults()
	s.Limits.Lifetime = time.Duration(t.TTL)
	return s
}

// Duration is a time.Duration written as "30s" or "5m" in the config.
type Duration time.Duration

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: write it like 30s, 5m or 1h", b)
	}
	*d = Duration(v)
	return nil
}

// Size is a number of bytes written as 512M, 1G or 65536 in the config.
type Size int64

// UnmarshalText reads a size with an optional binary unit k, M, G or T.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = Size(v)
	return nil
}

// ParseSize reads "512M", "1G", "64k" or a plain number of bytes.
func ParseSize(s string) (int64, error) { return sandbox.ParseSize(s) }
