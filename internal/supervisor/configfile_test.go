package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigMistakes gives one file per kind of mistake and checks the error
// names the key and the line it is on.
func TestConfigMistakes(t *testing.T) {
	const good = `listen = "127.0.0.1:7070"
state_dir = "/var/lib/airlock"

[[template]]
name = "default"

[[template]]
name = "python"
memory = "256M"
`
	tests := []struct {
		name, body string
		line       int
		key        string // ConfigError.Key
		msg        string // in the message
	}{
		{name: "syntax", body: "listen = \"127.0.0.1:7070\nstate_dir = \"/x\"\n", line: 1, msg: "not valid TOML"},
		{name: "syntax later", body: good + "pool = = 3\n", line: 10, msg: "not valid TOML"},
		{name: "unknown top-level key", body: "listen = \"127.0.0.1:1\"\nreap_intervall = \"1s\"\n", line: 2, key: "reap_intervall", msg: `did you mean "reap_interval"`},
		{name: "unknown key in the second template", body: good + "mmeory = \"1G\"\n", line: 10, key: "template[1].mmeory", msg: `did you mean "memory"`},
		{name: "unknown table", body: good + "[colour]\nred = 1\n", line: 10, key: "colour", msg: `unknown key "colour"`},
		{name: "unknown key far from any", body: "[[template]]\nname = \"a\"\nxyzzy = 1\n", line: 3, key: "template[0].xyzzy", msg: "the keys here are"},
		{name: "wrong type", body: good + "pool = \"three\"\n", line: 10, key: "template[1].pool", msg: "want a whole number"},
		{name: "string for a list", body: "allowed_hosts = \"a.example\"\n", line: 1, key: "allowed_hosts", msg: "want a list"},
		{name: "number for a string", body: "\n\nlisten = 7070\n", line: 3, key: "listen", msg: "want a string"},
		{name: "table for a value", body: "[retention]\nx = 1\n", line: 1, key: "retention", msg: "want a string"},
		{name: "bad size in the first of two templates", body: "[[template]]\nname = \"a\"\nmemory = \"lots\"\n[[template]]\nname = \"b\"\nmemory = \"1G\"\n", line: 3, key: "template[0].memory", msg: `size "lots"`},
		{name: "bad size in the second of two templates", body: "[[template]]\nname = \"a\"\nmemory = \"1G\"\n[[template]]\nname = \"b\"\nmemory = \"lots\"\n", line: 6, key: "template[1].memory", msg: `size "lots"`},
		{name: "bad duration", body: "\nreap_interval = \"soon\"\n", line: 2, key: "reap_interval", msg: "write it like 30s"},
		{name: "bad name", body: good + "[[template]]\nname = \"A/B\"\n", line: 11, key: "template[2].name", msg: "lower-case"},
		{name: "twice", body: good + "[[template]]\nname = \"python\"\n", line: 11, key: "template[2].name", msg: "defined twice"},
		{name: "limit out of range", body: good + "pids = 1\n", line: 10, key: "template[1].pids", msg: "at least 2"},
		{name: "ttl past max", body: "[[template]]\nname = \"a\"\nttl = \"2h\"\nmax_ttl = \"1h\"\n", line: 4, key: "template[0].max_ttl", msg: "ttl at most max_ttl"},
		{name: "negative pool", body: "[[template]]\nname = \"a\"\npool = -1\n", line: 3, key: "template[0].pool", msg: "non-negative"},
		{name: "bad env", body: "[[template]]\nname = \"a\"\nenv = [\"NOEQUALS\"]\n", line: 3, key: "template[0].env", msg: "NOEQUALS"},
		{name: "bad network", body: "[[template]]\nname = \"a\"\n\n[template.network]\nmode = \"none\"\nallow_hosts = [\"a.com\"]\n", line: 4, key: "template[0].network", msg: `template "a"`},
		{name: "bad inline network", body: "[[template]]\nname = \"a\"\nnetwork = { mode = \"sideways\" }\n", line: 3, key: "template[0].network", msg: "sideways"},
		{name: "secret with a wildcard", body: "[egress]\nburst = 4\n\n[[egress.secret]]\nhost = \"a.com\"\nheader = \"A\"\nvalue = \"x\"\n\n[[egress.secret]]\nhost = \"*.a.com\"\nheader = \"A\"\nvalue = \"x\"\n", line: 10, key: "egress.secret[1].host", msg: "without wildcard"},
		{name: "secret in an inline array", body: "[egress]\nsecret = [\n  {host = \"a.com\", header = \"A\", value = \"x\"},\n  {host = \"b.com\", header = \"\", value = \"x\"},\n]\n", line: 4, key: "egress.secret[1].header", msg: "header name"},
		{name: "negative egress limit", body: "[egress]\nmax_conns = -1\n", line: 2, key: "egress.max_conns", msg: "negative"},
		{name: "relative state dir", body: "state_dir = \"airlock\"\n", line: 1, key: "state_dir", msg: "absolute path"},
		{name: "relative policy", body: "\npolicy = \"policy.toml\"\n", line: 2, key: "policy", msg: "absolute path"},
		{name: "log format", body: "log_format = \"xml\"\n", line: 1, key: "log_format", msg: "text or json"},
		{name: "listen without port", body: "listen = \"localhost\"\n", line: 1, key: "listen", msg: "HOST:PORT"},
		{name: "bad mount", body: "[[template]]\nname = \"a\"\nmounts = [\"/srv/p:/w:cw\"]\n", line: 3, key: "template[0].mounts", msg: "HOST:PATH:cow"},
		{name: "relative mount", body: "[[template]]\nname = \"a\"\nmounts = [\"srv/p:/w:cow\"]\n", line: 3, key: "template[0].mounts", msg: "absolute host path"},
		{name: "driver named twice", body: "drivers = [\"native\",\n  \"native\"]\n", line: 1, key: "drivers[1]", msg: "once"},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "airlock.toml")
			if err := os.WriteFile(p, []byte(tt.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(p)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("LoadConfig = %v, want a *ConfigError", err)
			}
			if ce.Line != tt.line || ce.Key != tt.key || ce.File != p {
				t.Errorf("error at %s:%d key %q, want %s:%d key %q (%v)", ce.File, ce.Line, ce.Key, p, tt.line, tt.key, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
			// The message starts with the place, as compilers write it.
			if want := "config " + p + ":"; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q does not start with %q", err, want)
			}
		})
	}
}

// TestConfigMistakesAll: every wrong key of a file is reported at once,
// in the order of their lines.
func TestConfigMistakesAll(t *testing.T) {
	p := filepath.Join(t.TempDir(), "airlock.toml")
	os.WriteFile(p, []byte("[[template]]\nname = \"a\"\nmemroy = \"1G\"\n\n[[template]]\nname = \"b\"\ncpus = \"half\"\ncolour = 1\n"), 0o600)
	_, err := LoadConfig(p)
	if err == nil {
		t.Fatal("accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{p + ":3: template.memroy", p + ":7: template.cpus", p + ":8: template.colour"}
	if len(lines) != len(want) {
		t.Fatalf("error:\n%s\nwant %d lines", err, len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %q, want it to contain %q", i, lines[i], w)
		}
	}
}

func TestConfigServeKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "airlock.toml")
	os.WriteFile(p, []byte("listen = \"0.0.0.0:8080\"\nstate_dir = \"/srv/airlock\"\npolicy = \"/etc/airlock/policy.toml\"\nlog_format = \"json\"\ndrivers = [\"native\"]\n"), 0o600)
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "0.0.0.0:8080" || c.StateDir != "/srv/airlock" || c.Policy != "/etc/airlock/policy.toml" || c.LogFormat != "json" || len(c.Drivers) != 1 {
		t.Fatalf("config %+v", c)
	}
	// KeyError places a check made elsewhere (airlock serve's drivers).
	err = c.KeyError("drivers[0]", errors.New("not here"))
	if got, want := err.Error(), "config "+p+":5: drivers: not here"; got != want {
		t.Fatalf("KeyError = %q, want %q", got, want)
	}
	// Defaults, when the file leaves them out.
	os.WriteFile(p, nil, 0o600)
	if c, err = LoadConfig(p); err != nil {
		t.Fatal(err)
	}
	if c.Listen != DefaultListen || c.StateDir != DefaultStateDir || c.LogFormat != "text" || c.Policy != "" || c.Drivers != nil {
		t.Fatalf("defaults %+v", c)
	}
}

func TestScanKeys(t *testing.T) {
	src := `# a comment = not a key
listen = "a#b" # trailing = comment
"quoted.key" = 1
dotted . key = 'x'
multi = """
fake = 1
[fake]
"""
lit = '''
also = fake
'''
arr = [
  1, # comment = x
  "two",
]

[[template]]
name = "a"
[template.network]
mode = "egress"

[[template]]
name = "b"
network = { mode = "egress", allow_hosts = ["x"] }
env = ["A=1",
  "B=2"]

[egress]
secret = [ { host = "h0" },
  { host = "h1" } ]
[[egress.more]]
k = 1
after = "x"
`
	got := scanKeys(src)
	for key, line := range map[string]int{
		"listen": 2, "quoted.key": 3, "dotted.key": 4, "multi": 5, "lit": 9, "arr": 12,
		"template[0]": 17, "template[0].name": 18, "template[0].network": 19, "template[0].network.mode": 20,
		"template[1]": 22, "template[1].name": 23, "template[1].network": 24, "template[1].network.mode": 24,
		"template[1].network.allow_hosts": 24, "template[1].env": 25,
		"template.name": 18, "template.network.mode": 20,
		"egress": 28, "egress.secret": 29, "egress.secret[0].host": 29, "egress.secret[1].host": 30,
		"egress.more[0].k": 32, "egress.more[0].after": 33,
	} {
		if got[key] != line {
			t.Errorf("%s: line %d, want %d", key, got[key], line)
		}
	}
	for _, key := range []string{"fake", "also", "a comment", "trailing", "comment"} {
		if _, ok := got[key]; ok {
			t.Errorf("%q is not a key but was found on line %d", key, got[key])
		}
	}
	if n := got.find("template[1].network.deny"); n != 24 {
		t.Errorf("find of a key not in the file: line %d, want its table's 24", n)
	}
}

func TestConfigKeys(t *testing.T) {
	keys := ConfigKeys()
	for _, k := range []string{"listen", "template.memory", "template.network.allow_hosts", "egress.secret.value", "egress.max_bytes"} {
		found := false
		for _, have := range keys {
			found = found || have == k
		}
		if !found {
			t.Errorf("ConfigKeys lacks %q: %v", k, keys)
		}
	}
	for _, k := range keys {
		if k == "template" || k == "template.network" || k == "egress" {
			t.Errorf("ConfigKeys lists the table %q", k)
		}
	}
}

func FuzzScanKeys(f *testing.F) {
	f.Add("a = 1\n[[t]]\nb = { c = [1, {d = 2}] }\n")
	f.Add("x = \"\"\"\n\"\"\"\"\n[a.b]\n'q' . \"r\" = '''\n'''")
	f.Add("[[")
	f.Add("k = [\n")
	f.Fuzz(func(t *testing.T, src string) {
		for key, line := range scanKeys(src) {
			if line < 1 || line > strings.Count(src, "\n")+1 {
				t.Fatalf("key %q on line %d of a %d-line text", key, line, strings.Count(src, "\n")+1)
			}
		}
	})
}
