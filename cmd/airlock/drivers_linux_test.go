package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestDriverTable: every driver this build makes has what the table says
// of it, and the run flags the table gives a driver are those its
// capabilities ask for: image and runtime for Images, module for
// Modules.
func TestDriverTable(t *testing.T) {
	var about []string
	for _, a := range abouts() {
		about = append(about, a.name)
	}
	made := driverNames()
	slices.Sort(made)
	slices.Sort(about)
	if !slices.Equal(made, about) {
		t.Fatalf("the table makes %v and says what %v are", made, about)
	}
	for _, name := range made {
		d, err := newDriver(name, driverOptions{})
		if err != nil {
			t.Errorf("make %s: %v", name, err)
			continue
		}
		c := d.Capabilities()
		for flag, want := range map[string]bool{"image": c.Images, "runtime": c.Images, "module": c.Modules} {
			if got := takes(name, flag); got != want {
				t.Errorf("driver %s: the table says it takes --%s: %v; its capabilities say %v", name, flag, got, want)
			}
		}
	}
	if d := flagDrivers("module"); len(d) == 0 {
		t.Error("no driver takes --module")
	}
}

// TestREADMERunFlags: the README's table of `airlock run`'s flags has a
// row for every flag, and its --driver row is the table's.
func TestREADMERunFlags(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if !strings.Contains(readme, driverRow()+"\n") {
		t.Errorf("README.md has no row\n%s\n(the driver table's: cmd/airlock/drivers*.go)", driverRow())
	}
	cmd := newRunCmd()
	fs := cmd.Flags()
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		row := regexp.MustCompile("(?m)^\\| (`-[a-z]`[^|]*, )?`--" + regexp.QuoteMeta(f.Name) + "[` =]")
		if !row.MatchString(readme) {
			t.Errorf("README.md's table of run flags has no row for --%s", f.Name)
		}
	})
}
