package supervisor

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/airlock-sandbox/airlock/internal/egress"
)

// referenceConfig is the commented reference file the Debian package
// installs as /etc/airlock/config.toml.
const referenceConfig = "../../packaging/config.toml"

// setting is a commented-out key or table of the reference file: "#" and
// then the TOML, where explanations are "# " and then prose.
var setting = regexp.MustCompile(`^#(\[|[a-z_]+ *=)`)

// uncommented returns the reference file with every setting uncommented.
func uncommented(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(referenceConfig)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if setting.MatchString(l) {
			lines[i] = l[1:]
		} else if l != "" && !strings.HasPrefix(l, "# ") && l != "#" && !strings.HasPrefix(l, "#!") {
			t.Errorf("%s:%d: %q is neither a setting (#key = value) nor an explanation (# text)", referenceConfig, i+1, l)
		}
	}
	return strings.Join(lines, "\n")
}

// TestReferenceConfigHasEveryKey: the reference file documents every key
// the daemon accepts, and no other; so it cannot drift from the code.
func TestReferenceConfigHasEveryKey(t *testing.T) {
	var raw map[string]any
	md, err := toml.Decode(uncommented(t), &raw)
	if err != nil {
		t.Fatalf("the reference config, uncommented, is not TOML: %v", err)
	}
	var documented []string
	for _, k := range md.Keys() {
		if md.Type(k...) != "Hash" && md.Type(k...) != "ArrayHash" {
			documented = append(documented, k.String())
		}
	}
	slices.Sort(documented)
	documented = slices.Compact(documented)
	want := ConfigKeys()
	for _, k := range want {
		if !slices.Contains(documented, k) {
			t.Errorf("%s does not document key %q: add it, commented, with its default", referenceConfig, k)
		}
	}
	for _, k := range documented {
		if !slices.Contains(want, k) {
			t.Errorf("%s documents key %q, which the daemon does not have", referenceConfig, k)
		}
	}
}

// TestReferenceConfigDefaults: each value in the reference file is the
// default, so uncommenting a line changes nothing; only the example egress
// secret is not a default (there is none).
func TestReferenceConfigDefaults(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "reference.toml")
	if err := os.WriteFile(ref, []byte(uncommented(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(ref)
	if err != nil {
		t.Fatalf("the reference config, uncommented, does not load: %v", err)
	}
	empty := filepath.Join(dir, "empty.toml")
	os.WriteFile(empty, nil, 0o600)
	want, err := LoadConfig(empty)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Egress.Secrets) != 1 {
		t.Errorf("the reference config's example egress secret: %+v", got.Egress.Secrets)
	}
	if g, w := got.Egress.ProxyOptions(nil).Limits, (egress.Limits{}).WithDefaults(); g != w {
		t.Errorf("egress limits in the reference config %+v, defaults %+v", g, w)
	}
	if len(got.Templates) != 1 || len(want.Templates) != 1 {
		t.Fatalf("templates: reference %d, default %d; want 1 each", len(got.Templates), len(want.Templates))
	}
	gt, wt := got.Templates[0], want.Templates[0]
	if !reflect.DeepEqual(gt.spec(), wt.spec()) {
		t.Errorf("reference template %+v\ndefault template %+v", gt.spec(), wt.spec())
	}
	if gt.Name != wt.Name || gt.Driver != wt.Driver || gt.TTL != wt.TTL || gt.MaxTTL != wt.MaxTTL || gt.IdleTimeout != wt.IdleTimeout || gt.Pool != wt.Pool || gt.OutputBuffer != wt.OutputBuffer || gt.Network.Report != wt.Network.Report {
		t.Errorf("reference template %+v\ndefault template %+v", gt, wt)
	}
	got.Templates, want.Templates = nil, nil
	got.Egress, want.Egress = EgressConfig{}, EgressConfig{}
	got.file, got.where, want.file, want.where = "", nil, "", nil
	// Empty lists in the file are nil when left out: the same setting.
	for _, c := range []*Config{&got, &want} {
		for _, l := range []*[]string{&c.Drivers, &c.AllowedHosts, &c.AllowedOrigins, &c.Export.Buckets} {
			if len(*l) == 0 {
				*l = nil
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reference config %+v\ndefaults %+v", got, want)
	}
}
