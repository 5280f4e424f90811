// Package cli is airlock's command line: the root command, `airlock run`,
// and what every command shares (the driver table, the exit codes). Two
// programs link it (docs/decisions.md, 47):
//
//   - the front, cmd/airlock: `airlock run` on the drivers registered here
//     (native, gVisor) and `--version`; everything else it hands to
//   - the complete airlock, cmd/airlock-full, which imports the other
//     commands and drivers as well, and so registers them.
//
// What a program links is what it imports: no build tag decides it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// Version is set at build time (make: -ldflags -X
// github.com/airlock-sandbox/airlock/internal/cli.Version=...).
var Version = "dev"

// Exit codes of airlock itself, as Docker uses them.
const (
	ExitAirlock       = 125 // airlock failed: bad flags, setup failure
	exitNotExecutable = 126
	exitNotFound      = 127
)

// Main runs airlock with the process's arguments and streams, and exits
// with its code.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// handOver runs the complete airlock with args in this process's place.
func handOver(args []string, stderr io.Writer) int {
	err := handOff(append([]string{os.Args[0]}, args...))
	fmt.Fprintf(stderr, "airlock: %v\n", err)
	return ExitAirlock
}

// ExitError carries the exit code a command wants airlock to exit with.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit %d", e.Code) }

// handOff, in the front, runs the complete airlock in this process's place
// with argv; nil in the complete airlock. The front sets it (HandOffTo).
var handOff func(argv []string) error

// HandOffTo makes this program a front: what it cannot do itself (a
// command or a driver it does not link, a policy with rules), it hands to
// exec, which runs the complete airlock in its place.
func HandOffTo(exec func(argv []string) error) { handOff = exec }

// Run runs airlock with args and returns its exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(ctx, args, stdin, stdout, stderr)
}

// does says whether this program runs args itself: a command it has, or
// the version.
func does(root *cobra.Command, args []string) bool {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-v") {
		return true
	}
	c, _, err := root.Find(args)
	return err == nil && c != root
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "airlock",
		Short:         "Run untrusted, agent-generated code in a sandbox",
		Version:       Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	for _, c := range commandTable {
		root.AddCommand(c())
	}
	if handOff != nil && !does(root, args) {
		return handOver(args, stderr)
	}
	err := root.ExecuteContext(ctx)
	var ee *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.Code
	default:
		// An error may quote what a sandbox controls (a path, a name).
		fmt.Fprintf(stderr, "airlock: %s\n", termsafe.Text(err.Error()))
		return ExitAirlock
	}
}
