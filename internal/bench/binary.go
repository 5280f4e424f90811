package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Rows of section "start/binary": the airlock program's own start, which
// every CLI command pays before it does anything, beside the start of a
// Go program that does nothing. What the packages airlock links
// initialise shows as the difference.
const (
	idHelloGo     = "start/binary/hello-go"
	idVersion     = "start/binary/airlock-version"
	idVersionFull = "start/binary/airlock-full-version"
)

// helloGo is the baseline: a Go program that prints a line.
const helloGo = `package main

import "os"

func main() { os.Stdout.WriteString("hello\n") }
`

// binaryRows times `airlock --version` (the front, o.Airlock), the
// complete airlock's (o.AirlockFull, when it is another program) and a
// hello-world Go program built here with the go on PATH.
func binaryRows(ctx context.Context, o Options, progress func(string, ...any)) ([]Row, error) {
	type timed struct {
		row  Row
		argv []string
	}
	row := func(id, what string, argv ...string) timed {
		r := Row{Section: "start/binary", ID: id, What: what, Unit: UnitMS}
		if id != idHelloGo {
			r.Compare = []Comparison{{Baseline: idHelloGo, Name: "hello (Go)"}}
		}
		return timed{r, argv}
	}
	dir, err := os.MkdirTemp("", "airlock-bench-hello-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	hello, helloErr := buildHello(ctx, dir)
	ts := []timed{
		row(idHelloGo, "a hello-world Go program (the floor of a Go program's start)", hello),
		row(idVersion, "airlock --version (what every airlock command starts with)", o.Airlock, "--version"),
	}
	if helloErr != nil {
		ts[0].row.Status, ts[0].row.Detail = StatusMissing, helloErr.Error()
	}
	if o.Airlock == "" {
		ts[1].row.Status, ts[1].row.Detail = StatusFailed, "no airlock binary to run"
	}
	if o.AirlockFull != "" && o.AirlockFull != o.Airlock {
		ts = append(ts, row(idVersionFull, "the complete airlock's --version (what the front hands every command but run to)", o.AirlockFull, "--version"))
	}
	var rows []Row
	for _, t := range ts {
		if t.row.Status == "" {
			progress("start: %s, %d runs", t.row.ID, o.TrueRuns)
			if t.row, err = timeCommand(ctx, o, t.row, t.argv, o.TrueRuns); err != nil {
				return rows, err
			}
		}
		rows = append(rows, t.row)
	}
	return rows, nil
}

// buildHello builds helloGo in dir with the go on PATH.
func buildHello(ctx context.Context, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("install Go: the baseline is built with go build")
	}
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(helloGo), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hello")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", bin, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build the hello-world baseline: %w: %s", err, out)
	}
	return bin, nil
}
