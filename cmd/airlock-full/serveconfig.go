package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// serveConfig reads the config file, if one is given, and lays the flags
// the user set over it: a flag given on the command line wins over the
// file, the file over the flag's default. changed reports whether a flag
// was given.
func serveConfig(f serveFlags, changed func(flag string) bool) (supervisor.Config, error) {
	var cfg supervisor.Config
	if f.config != "" {
		var err error
		if cfg, err = supervisor.LoadConfig(f.config); err != nil {
			return cfg, err
		}
	}
	for _, o := range []struct {
		flag  string
		value string
		dst   *string
	}{
		{"listen", f.listen, &cfg.Listen},
		{"state-dir", f.stateDir, &cfg.StateDir},
		{"policy", f.policy, &cfg.Policy},
		{"audit-key", f.auditKey, &cfg.AuditKey},
		{"log-format", f.logFormat, &cfg.LogFormat},
	} {
		if changed(o.flag) || *o.dst == "" {
			*o.dst = o.value
		}
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		return cfg, fmt.Errorf("--log-format %q: use text or json", cfg.LogFormat)
	}
	return cfg, checkServeConfig(cfg)
}

// checkServeConfig checks what the config file names outside itself: the
// drivers are ones this airlock has, each template's driver is offered,
// and the policy file loads.
func checkServeConfig(cfg supervisor.Config) error {
	var errs []error
	knownDrivers := cli.DriverNames()
	for i, d := range cfg.Drivers {
		if !slices.Contains(knownDrivers, d) {
			errs = append(errs, cfg.KeyError(fmt.Sprintf("drivers[%d]", i), fmt.Errorf("no driver %q: this airlock has %s", d, strings.Join(knownDrivers, ", "))))
		}
	}
	offered := knownDrivers
	if len(cfg.Drivers) > 0 {
		offered = cfg.Drivers
	}
	for i, t := range cfg.Templates {
		if t.Driver != "" && !slices.Contains(offered, t.Driver) {
			errs = append(errs, cfg.KeyError(fmt.Sprintf("template[%d].driver", i), fmt.Errorf("template %q: driver %q is not offered: use one of %s", t.Name, t.Driver, strings.Join(offered, ", "))))
			continue
		}
		// What the daemon checks at start (supervisor.New): the
		// template asks nothing its driver cannot do.
		if t.Driver == "" {
			t.Driver = cli.DefaultDriver
		}
		if d, err := cli.NewDriver(t.Driver, cli.DriverOptions{}); err == nil {
			if err := t.CheckDriver(d); err != nil {
				errs = append(errs, cfg.KeyError(fmt.Sprintf("template[%d]", i), err))
			}
		}
	}
	if cfg.Policy != "" {
		if _, err := policy.Load(cfg.Policy); err != nil {
			errs = append(errs, cfg.KeyError("policy", err))
		}
	}
	return errors.Join(errs...)
}

// checkConfig is airlock serve --check-config: it reports the file good or
// returns what is wrong with it.
func checkConfig(f serveFlags, changed func(string) bool, stdout io.Writer) error {
	if f.config == "" {
		return errors.New("--check-config checks the file given with --config FILE (the package's is /etc/airlock/config.toml)")
	}
	cfg, err := serveConfig(f, changed)
	if err != nil {
		return err
	}
	names := make([]string, len(cfg.Templates))
	for i, t := range cfg.Templates {
		names[i] = t.Name
	}
	if len(names) == 0 {
		names = []string{supervisor.DefaultTemplate}
	}
	fmt.Fprintf(stdout, "%s: ok (listen %s, state dir %s, templates %s)\n", f.config, cfg.Listen, cfg.StateDir, strings.Join(names, ", "))
	return nil
}

// logHandler writes the daemon's log to w (stderr, which the journal
// keeps under systemd) as text or JSON lines.
func logHandler(format string, w io.Writer) slog.Handler {
	if format == "json" {
		return slog.NewJSONHandler(w, nil)
	}
	return slog.NewTextHandler(w, nil)
}

// offerDrivers keeps of the drivers this host runs the ones the config
// names; a named one this host cannot run is an error.
func offerDrivers(cfg supervisor.Config, have map[string]sandbox.Driver) (map[string]sandbox.Driver, error) {
	if len(cfg.Drivers) == 0 {
		return have, nil
	}
	out := map[string]sandbox.Driver{}
	for i, d := range cfg.Drivers {
		drv, ok := have[d]
		if !ok {
			return nil, cfg.KeyError(fmt.Sprintf("drivers[%d]", i), fmt.Errorf("driver %q cannot run on this host (it has %s): run airlock doctor to see why, or leave it out", d, strings.Join(slices.Sorted(maps.Keys(have)), ", ")))
		}
		out[d] = drv
	}
	return out, nil
}
