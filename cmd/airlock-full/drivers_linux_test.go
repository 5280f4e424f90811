package main

import (
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cli"
)

// TestDriverTable: every driver this build makes has what the table says
// of it, and the run flags the table gives a driver are those its
// capabilities ask for: image and runtime for Images, module for
// Modules.
func TestDriverTable(t *testing.T) {
	about := cli.AboutNames()
	made := cli.DriverNames()
	slices.Sort(made)
	slices.Sort(about)
	if !slices.Equal(made, about) {
		t.Fatalf("the table makes %v and says what %v are", made, about)
	}
	for _, name := range made {
		d, err := cli.NewDriver(name, cli.DriverOptions{})
		if err != nil {
			t.Errorf("make %s: %v", name, err)
			continue
		}
		c := d.Capabilities()
		for flag, want := range map[string]bool{"image": c.Images, "runtime": c.Images && !c.ImageRoot, "module": c.Modules} {
			if got := cli.Takes(name, flag); got != want {
				t.Errorf("driver %s: the table says it takes --%s: %v; its capabilities say %v", name, flag, got, want)
			}
		}
	}
	if d := cli.FlagDrivers("module"); len(d) == 0 {
		t.Error("no driver takes --module")
	}
}
