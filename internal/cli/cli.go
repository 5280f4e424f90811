// Command airlock runs untrusted code in a sandbox.
//
//	airlock run [flags] -- CMD [ARGS...]   one command in a fresh sandbox
//	airlock doctor [--json]                what this host can run, and fixes
//	airlock microvm prepare                what the microvm driver needs
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time (make: -ldflags -X main.version=...).
var version = "dev"

// Exit codes of airlock itself, as Docker uses them.
const (
	exitAirlock       = 125 // airlock failed: bad flags, setup failure
	exitNotExecutable = 126
	exitNotFound      = 127
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// handOver runs the complete airlock with args in this process's place.
func handOver(args []string, stderr io.Writer) int {
	err := handOff(append([]string{os.Args[0]}, args...))
	fmt.Fprintf(stderr, "airlock: %v\n", err)
	return exitAirlock
}

// exitError carries the exit code a command wants airlock to exit with.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// handOff, in the front, runs the complete airlock in this process's place
// with argv; nil in the complete airlock.
var handOff func(argv []string) error

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if handOff != nil && !frontDoes(args) {
		return handOver(args, stderr)
	}
	root := &cobra.Command{
		Use:           "airlock",
		Short:         "Run untrusted, agent-generated code in a sandbox",
		Version:       version,
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
	err := root.ExecuteContext(ctx)
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(stderr, "airlock: %v\n", err)
		return exitAirlock
	}
}
