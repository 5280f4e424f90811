package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/bench"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/fullbin"
)

type benchFlags struct {
	quick           bool
	jsonFile, chart string
	runs, density   int
	dockerImage     string
	dockerRuntime   string
	imageTar        string
	e2bSDK          string
	only            []string
}

func init() { cli.RegisterCommand(newBenchCmd) }

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [--quick] [--only SECTIONS] [--json FILE] [--chart FILE] [-n N] [--density N]",
		Short: "Measure airlock against bwrap, runsc and plain exec on this machine",
		Long: `Measure, on this machine and in one run, how airlock compares with plain
fork/exec, unshare, bubblewrap and gVisor's runsc: start latency of one-shot
commands, the exec round trip in a live sandbox, memory per idle sandbox and
exec latency as their number grows, throughput with 1, 2 and 16 clients, and
the official E2B JS SDK against the daemon's E2B endpoints (--e2b-sdk).
Every figure is printed beside its baseline as a ratio. Baselines that are not
installed are reported as missing, with the command that installs them.

The full run takes a few minutes; --quick takes under one, for CI; --only
measures some sections (--only egress: the proxy, and python3 in a sandbox
through its agent tunnel beside python3 on the host). Run it as root: the
native driver needs it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.quick, "quick", false, "a short run (under a minute) for CI smoke tests")
	fl.StringVar(&f.jsonFile, "json", "", "also write the report as JSON to `FILE`")
	fl.StringVar(&f.chart, "chart", "", "also write an SVG bar chart to `FILE`")
	fl.IntVarP(&f.runs, "runs", "n", 0, "time `N` runs of /bin/true per row, and N/4 of python3 (default 200, --quick 30)")
	fl.IntVar(&f.density, "density", 0, "grow to `N` idle sandboxes at once (default 200, --quick 20)")
	fl.StringVar(&f.dockerImage, "docker-image", "", "time the docker driver beside `docker run` on `IMAGE`, one the engine has (without it those rows are missing)")
	fl.StringVar(&f.imageTar, "image-tar", "", "the image rows' image: a tar of a root with python3 (`FILE`), pushed to Debian's docker-registry on loopback (without it those rows are missing)")
	fl.StringVar(&f.dockerRuntime, "docker-runtime", "", `the engine's runtime of the docker rows (default "runc")`)
	fl.StringSliceVar(&f.only, "only", nil, "measure only these `SECTIONS` (comma-separated: "+strings.Join(bench.Sections, ", ")+")")
	fl.StringVar(&f.e2bSDK, "e2b-sdk", "", "the npm project with the official E2B SDKs for the e2b rows (`DIR`; default internal/api/e2b/sdktest when run from the source tree and `npm ci` was run there)")
	return cmd
}

func runBench(cmd *cobra.Command, f benchFlags) error {
	if f.runs < 0 || f.density < 0 {
		return errors.New("-n and --density must be positive")
	}
	o := bench.Defaults(f.quick)
	if f.runs > 0 {
		o.SetRuns(f.runs)
	}
	if f.density > 0 {
		o.Density = f.density
	}
	// The airlock a user runs: the front that handed the bench to this
	// program when there is one.
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the airlock binary to time: %w", err)
	}
	o.Airlock = self
	if front := os.Getenv(fullbin.EnvFront); front != "" {
		o.Airlock, o.AirlockFull = front, self
	}
	o.DockerImage, o.DockerRuntime, o.ImageTar = f.dockerImage, f.dockerRuntime, f.imageTar
	o.Progress = cmd.ErrOrStderr()
	o.E2BSDK = f.e2bSDK
	o.Only = f.only
	if o.E2BSDK == "" {
		if _, err := os.Stat("internal/api/e2b/sdktest/node_modules/e2b/package.json"); err == nil {
			o.E2BSDK = "internal/api/e2b/sdktest"
		}
	}
	r, err := bench.Run(cmd.Context(), o)
	if err != nil {
		return err
	}
	if err := r.WriteTable(cmd.OutOrStdout()); err != nil {
		return err
	}
	if f.jsonFile != "" {
		var b bytes.Buffer
		if err := r.WriteJSON(&b); err != nil {
			return err
		}
		if err := os.WriteFile(f.jsonFile, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("write the JSON report: %w", err)
		}
	}
	if f.chart != "" {
		var b bytes.Buffer
		if err := r.WriteChart(&b); err != nil {
			return err
		}
		if err := os.WriteFile(f.chart, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("write the chart: %w", err)
		}
	}
	return nil
}
