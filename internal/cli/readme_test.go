package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestREADMERunFlags: the README's table of `airlock run`'s flags has a
// row for every flag, and its --driver row is the table's.
func TestREADMERunFlags(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if !strings.Contains(readme, driverRow()+"\n") {
		t.Errorf("README.md has no row\n%s\n(the driver table's: internal/cli/drivers*.go)", driverRow())
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
