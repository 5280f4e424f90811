package supervisor

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// ConfigError is a mistake in a configuration file: the key it is at and
// that key's line.
type ConfigError struct {
	File string
	// Line is 1-based; 0 when the mistake has no one place (a key left out).
	Line int
	// Key is the key's path with the index of each array element,
	// "template[1].memory"; empty for a syntax error.
	Key string
	Err error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("config")
	if e.File != "" {
		b.WriteString(" " + e.File)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", unindexed(e.Key))
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// keyErr says err is about key; LoadConfig adds the file and the line.
func keyErr(key string, err error) error { return &ConfigError{Key: key, Err: err} }

// KeyError returns err located at key ("drivers", "template[1].driver") in
// the file c was read from, for checks made outside this package.
func (c Config) KeyError(key string, err error) error {
	e := &ConfigError{File: c.file, Key: key, Err: err}
	if c.where != nil {
		e.Line = c.where(key)
	}
	return e
}

// parseConfig reads a configuration file's text in three passes, each
// naming the key and line of what it finds wrong: TOML syntax; every key
// and value against Config's fields (all of them, ordered by line); then
// the values together.
func parseConfig(file, src string) (Config, error) {
	lines := scanKeys(src)
	locate := func(err error) error {
		var ce *ConfigError
		if !errors.As(err, &ce) {
			return &ConfigError{File: file, Err: err}
		}
		ce.File = file
		if ce.Line == 0 {
			ce.Line = lines.find(ce.Key)
		}
		return err
	}
	var raw map[string]any
	if _, err := toml.Decode(src, &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return Config{}, locate(&ConfigError{Line: pe.Position.Line, Err: fmt.Errorf("not valid TOML: %s", pe.Message)})
		}
		return Config{}, locate(err)
	}
	if errs := checkValue(raw, reflect.TypeFor[Config](), ""); len(errs) > 0 {
		for _, e := range errs {
			_ = locate(e) // a ConfigError gets its file and line in place
		}
		slices.SortStableFunc(errs, func(a, b error) int {
			var x, y *ConfigError
			errors.As(a, &x)
			errors.As(b, &y)
			return x.Line - y.Line
		})
		return Config{}, errors.Join(errs...)
	}
	var c Config
	md, err := toml.Decode(src, &c)
	if err != nil {
		return Config{}, locate(err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return Config{}, locate(keyErr(und[0].String(), errors.New("unknown key")))
	}
	c.file, c.where = file, lines.find
	c, err = c.withDefaults()
	if err != nil {
		return Config{}, locate(err)
	}
	return c, nil
}

// checkServe checks airlock serve's own keys.
func (c Config) checkServe() error {
	if c.StateDir != "" && !strings.HasPrefix(c.StateDir, "/") {
		return keyErr("state_dir", fmt.Errorf("%q: give an absolute path", c.StateDir))
	}
	if c.Policy != "" && !strings.HasPrefix(c.Policy, "/") {
		return keyErr("policy", fmt.Errorf("%q: give an absolute path", c.Policy))
	}
	if c.LogFormat != "" && c.LogFormat != "text" && c.LogFormat != "json" {
		return keyErr("log_format", fmt.Errorf("%q: use text or json", c.LogFormat))
	}
	if c.Listen != "" {
		if i := strings.LastIndexByte(c.Listen, ':'); i < 0 || i == len(c.Listen)-1 {
			return keyErr("listen", fmt.Errorf("%q: give HOST:PORT, like 127.0.0.1:7070", c.Listen))
		}
	}
	for i, d := range c.Drivers {
		if !validDriverName(d) || slices.Index(c.Drivers, d) < i {
			return keyErr(fmt.Sprintf("drivers[%d]", i), fmt.Errorf("%q: name each driver once, in lower case", d))
		}
	}
	return nil
}

func validDriverName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// badLifetime names the key of a template's ttl, max_ttl, idle_timeout or
// pool that is out of range, or "".
func (t Template) badLifetime() string {
	switch {
	case t.TTL < 0:
		return "ttl"
	case t.MaxTTL < t.TTL:
		return "max_ttl"
	case t.IdleTimeout < 0:
		return "idle_timeout"
	case t.Pool < 0 || t.Pool > 1000:
		return "pool"
	}
	return ""
}

// badSpecKey names the first of the template's limit keys whose value alone
// makes an invalid Spec; "" when none does alone.
func (t Template) badSpecKey() string {
	keep := func(f func(dst *Template)) bool {
		one := Template{Name: t.Name}
		f(&one)
		return one.spec().Validate() != nil
	}
	for _, k := range []struct {
		key  string
		copy func(dst *Template)
	}{
		{"memory", func(d *Template) { d.Memory = t.Memory }},
		{"cpus", func(d *Template) { d.CPUs = t.CPUs }},
		{"pids", func(d *Template) { d.Pids = t.Pids }},
		{"timeout", func(d *Template) { d.Timeout = t.Timeout }},
		{"cpu_time", func(d *Template) { d.CPUTime = t.CPUTime }},
		{"disk", func(d *Template) { d.Disk = t.Disk }},
		{"tmp", func(d *Template) { d.Tmp = t.Tmp }},
		{"output_limit", func(d *Template) { d.OutputLimit = t.OutputLimit }},
		{"open_files", func(d *Template) { d.OpenFiles = t.OpenFiles }},
		{"env", func(d *Template) { d.Env = t.Env }},
		{"allow_degraded", func(d *Template) { d.AllowDegraded = t.AllowDegraded }},
		{"network", func(d *Template) { d.Network = t.Network }},
		{"mounts", func(d *Template) { d.Mounts = t.Mounts }},
		{"home", func(d *Template) { d.Home = t.Home }},
	} {
		if keep(k.copy) {
			return k.key
		}
	}
	return ""
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// checkValue checks a decoded TOML value v against the Go type t it will be
// decoded into, and returns one error per wrong key or value, each a
// *ConfigError at its path.
func checkValue(v any, t reflect.Type, path string) []error {
	bad := func(format string, args ...any) []error {
		return []error{keyErr(path, fmt.Errorf(format, args...))}
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case int64, float64, bool:
			s = fmt.Sprint(x)
		default:
			return bad("want a string, got %s", tomlKind(v))
		}
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			return bad("%w", err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return bad("want a table, got %s", tomlKind(v))
		}
		fields := tomlFields(t)
		var errs []error
		for _, k := range sortedKeys(m) {
			sub := k
			if path != "" {
				sub = path + "." + k
			}
			f, ok := fields[k]
			if !ok {
				errs = append(errs, keyErr(sub, unknownKey(k, fields)))
				continue
			}
			errs = append(errs, checkValue(m[k], f.Type, sub)...)
		}
		return errs
	case reflect.Slice:
		var items []any
		switch x := v.(type) {
		case []any:
			items = x
		case []map[string]any:
			for _, e := range x {
				items = append(items, e)
			}
		default:
			return bad("want a list, like [\"a\", \"b\"], got %s", tomlKind(v))
		}
		var errs []error
		for i, e := range items {
			errs = append(errs, checkValue(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return errs
	case reflect.String:
		if _, ok := v.(string); !ok {
			return bad("want a string (in quotes), got %s", tomlKind(v))
		}
	case reflect.Int, reflect.Int64:
		if _, ok := v.(int64); !ok {
			return bad("want a whole number, got %s", tomlKind(v))
		}
	case reflect.Float64:
		switch v.(type) {
		case int64, float64:
		default:
			return bad("want a number, got %s", tomlKind(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return bad("want true or false, got %s", tomlKind(v))
		}
	default:
		return bad("cannot be set in the file")
	}
	return nil
}

// tomlKind names the TOML type of a decoded value.
func tomlKind(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", x)
	case int64:
		return fmt.Sprintf("the number %d", x)
	case float64:
		return fmt.Sprintf("the number %g", x)
	case bool:
		return fmt.Sprintf("%t", x)
	case []any, []map[string]any:
		return "a list"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date or time"
	}
	return fmt.Sprintf("a %T", v)
}

// unknownKey says a key is not one of fields, and which it may have meant.
func unknownKey(k string, fields map[string]reflect.StructField) error {
	names := sortedKeys(fields)
	best, dist := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(k), n); d < dist {
			best, dist = n, d
		}
	}
	if best != "" {
		return fmt.Errorf("unknown key %q; did you mean %q?", k, best)
	}
	return fmt.Errorf("unknown key %q; the keys here are %s", k, strings.Join(names, ", "))
}

// tomlFields maps the toml names of t's exported fields to them.
func tomlFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if f.IsExported() && name != "" && name != "-" {
			out[name] = f
		}
	}
	return out
}

// ConfigKeys lists every key a configuration file may set, as dotted
// paths without array indices ("template.network.mode"), tables left out.
func ConfigKeys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for name, f := range tomlFields(t) {
			ft := f.Type
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(textUnmarshaler) {
				walk(ft, prefix+name+".")
				continue
			}
			out = append(out, prefix+name)
		}
	}
	walk(reflect.TypeFor[Config](), "")
	slices.Sort(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
