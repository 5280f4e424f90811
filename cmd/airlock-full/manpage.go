package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func init() { cli.RegisterCommand(newManCmd) }

// newManCmd writes a man page per command, made from the same text as
// --help; `make deb` ships them. Hidden: it is for packaging.
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "manpages DIR",
		Short:  "Write the man pages (section 1) of every command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeManPages(cmd.Root(), args[0])
		},
	}
}

func writeManPages(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		name := strings.ReplaceAll(c.CommandPath(), " ", "-")
		if err := os.WriteFile(filepath.Join(dir, name+".1"), manPage(c), 0o644); err != nil {
			return fmt.Errorf("write the man page of %s: %w", c.CommandPath(), err)
		}
		for _, sub := range manCommands(c) {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(root)
}

// manCommands are c's subcommands that get pages: not hidden, not help
// and not the shell completion scripts.
func manCommands(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() && sub.Name() != "completion" {
			out = append(out, sub)
		}
	}
	return out
}

// manPage renders one command as roff (man(7)).
func manPage(c *cobra.Command) []byte {
	var b bytes.Buffer
	name := strings.ReplaceAll(c.CommandPath(), " ", "-")
	fmt.Fprintf(&b, ".TH %s 1 \"\" \"airlock %s\" \"airlock manual\"\n", strings.ToUpper(roff(name)), roff(cli.Version))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", roff(name), roff(c.Short))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n.B %s\n", roff(c.UseLine()))
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(&b, ".br\n.B %s COMMAND [FLAGS]\n", roff(c.CommandPath()))
	}
	desc := c.Long
	if desc == "" {
		desc = c.Short
	}
	b.WriteString(".SH DESCRIPTION\n")
	writeParagraphs(&b, desc)
	if subs := manCommands(c); len(subs) > 0 {
		b.WriteString(".SH COMMANDS\n")
		for _, sub := range subs {
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\nSee \\fB%s\\fR(1).\n", roff(sub.Name()), roff(sub.Short), roff(strings.ReplaceAll(sub.CommandPath(), " ", "-")))
		}
	}
	var flags []*pflag.Flag
	c.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			flags = append(flags, f)
		}
	})
	if len(flags) > 0 {
		b.WriteString(".SH OPTIONS\n")
		for _, f := range flags {
			b.WriteString(".TP\n.B ")
			if f.Shorthand != "" {
				fmt.Fprintf(&b, "\\-%s, ", roff(f.Shorthand))
			}
			fmt.Fprintf(&b, "\\-\\-%s", roff(f.Name))
			if vn, _ := pflag.UnquoteUsage(f); vn != "" {
				fmt.Fprintf(&b, " \\fI%s\\fR", roff(vn))
			}
			_, usage := pflag.UnquoteUsage(f)
			b.WriteString("\n" + roff(usage))
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && f.DefValue != "0" {
				fmt.Fprintf(&b, " (default: %s)", roff(f.DefValue))
			}
			b.WriteString("\n")
		}
	}
	if c == c.Root() {
		b.WriteString(".SH FILES\n" +
			".TP\n.I /etc/airlock/config.toml\nthe daemon's configuration, every key commented with its default; see \\fBairlock-serve\\fR(1)\n" +
			".TP\n.I /var/lib/airlock\nthe daemon's registry, audit log and audit key\n" +
			".TP\n.I /run/airlock\nlocks of live sandboxes and the installed agent\n")
	}
	b.WriteString(".SH SEE ALSO\n")
	var see []string
	if p := c.Parent(); p != nil {
		see = append(see, fmt.Sprintf("\\fB%s\\fR(1)", roff(strings.ReplaceAll(p.CommandPath(), " ", "-"))))
	}
	see = append(see, "/usr/share/doc/airlock/README.md.gz")
	b.WriteString(strings.Join(see, ", ") + "\n")
	return b.Bytes()
}

// writeParagraphs writes text as roff paragraphs, keeping indented lines
// (examples) as they are.
func writeParagraphs(b *bytes.Buffer, text string) {
	for i, para := range strings.Split(strings.TrimSpace(text), "\n\n") {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		lines := strings.Split(para, "\n")
		literal := false
		for _, l := range lines {
			literal = literal || strings.HasPrefix(l, "  ")
		}
		if literal {
			b.WriteString(".nf\n")
		}
		for _, l := range lines {
			b.WriteString(roff(l) + "\n")
		}
		if literal {
			b.WriteString(".fi\n")
		}
	}
}

// roff escapes text for a man page: backslashes, hyphens that are
// options, and lines that would start with a control character.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
