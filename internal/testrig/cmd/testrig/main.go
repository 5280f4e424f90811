// Command testrig builds and runs the test rigs by hand:
//
//	testrig rootimage    build (if needed) the root image; print its tarball's path
//	testrig kube-build   build (if needed) the kube rig's programs and image (`make kube-rig`)
//	testrig kube-up      start the one-node cluster, print its kubeconfig and
//	                     memory, and stop it on SIGINT or SIGTERM
//	testrig s3-build     build (if needed) the S3 test server, versitygw (`make s3-rig`)
//	testrig ready        say which rigs are cached, without building or the network
//	                     (`make test` runs it first, which compiles this command once
//	                     for the rig builds scripts/test.sh starts in the background)
//
// The cache is $AIRLOCK_CACHE (default /var/cache/airlock). Run it as root
// from the repository: go run ./internal/testrig/cmd/testrig <command>.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/s3server"
	"github.com/airlock-sandbox/airlock/internal/testrig"
	"github.com/airlock-sandbox/airlock/internal/testrig/kube"
	"github.com/airlock-sandbox/airlock/internal/testrig/kube/kubebin"
	"github.com/airlock-sandbox/airlock/internal/testrig/rootimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = "usage: testrig rootimage | kube-build | kube-up | s3-build | ready"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "rootimage":
		var img *rootimage.Image
		img, err = rootimage.Ensure(ctx, testrig.CacheDir(), rootimage.Spec{}, stderr)
		if err == nil {
			fmt.Fprintln(stdout, img.Path)
		}
	case "kube-build":
		err = kubeBuild(ctx, stdout, stderr)
	case "kube-up":
		err = kubeUp(ctx, stdout, stderr)
	case "s3-build":
		var p string
		if p, err = testrig.BuildS3(ctx, testrig.CacheDir(), stderr); err == nil {
			fmt.Fprintln(stdout, p)
		}
	case "ready":
		ready(stdout)
	default:
		fmt.Fprintln(stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "testrig %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// kubeBuild builds what the kube rig needs and says how long it took. The
// image (debootstrap: the network and the disk) is built while the
// programs compile (the CPU).
func kubeBuild(ctx context.Context, stdout, stderr io.Writer) error {
	start := time.Now()
	type result struct {
		img *rootimage.Image
		err error
	}
	image := make(chan result, 1)
	go func() {
		img, err := rootimage.Ensure(ctx, testrig.CacheDir(), rootimage.Spec{}, stderr)
		image <- result{img, err}
	}()
	set, err := kubebin.Build(ctx, testrig.CacheDir(), stderr)
	r := <-image
	if err != nil {
		return err
	}
	if r.err != nil {
		return r.err
	}
	fmt.Fprintf(stdout, "kube rig ready in %.0fs: %s; image %s\n", time.Since(start).Seconds(),
		strings.Join(set.Versions, ", "), r.img.Path)
	return nil
}

// ready says, for each rig scripts/test.sh may build in the background
// (scripts/test-rigs.txt names them by their make targets), whether it is
// cached. A cached root image may still be rebuilt by its build, when the
// mirror's release has changed since.
func ready(stdout io.Writer) {
	cache := testrig.CacheDir()
	say := func(rig string, err error, what string) {
		if err != nil {
			fmt.Fprintf(stdout, "%-10s not built: %v\n", rig, err)
			return
		}
		fmt.Fprintf(stdout, "%-10s cached: %s\n", rig, what)
	}
	img, err := rootimage.Find(cache, rootimage.Spec{})
	if err == nil {
		say("root-image", nil, img.Path)
	} else {
		say("root-image", err, "")
	}
	p, err := s3server.Find(cache)
	say("s3-rig", err, p)
	set, err := kubebin.Find(cache)
	if err == nil {
		say("kube-rig", nil, strings.Join(set.Versions, ", "))
	} else {
		say("kube-rig", err, "")
	}
}

// kubeUp runs a cluster until ctx is done.
func kubeUp(ctx context.Context, stdout, stderr io.Writer) error {
	c, err := kube.New(ctx, kube.Options{Log: stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster up in %.1fs\nkubeconfig: %s\nimage: %s\n", c.Started.Seconds(), c.Kubeconfig, c.Image)
	printRSS(stdout, c.RSS())
	fmt.Fprintln(stdout, "stop with Ctrl-C")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	err = c.Stop(stopCtx)
	if err == nil {
		fmt.Fprintf(stdout, "stopped; logs in %s\n", c.LogDir())
	}
	return err
}

// printRSS prints each component's resident memory and the total.
func printRSS(w io.Writer, usage []kube.Usage) {
	slices.SortFunc(usage, func(a, b kube.Usage) int { return int(b.RSS - a.RSS) })
	var total int64
	for _, u := range usage {
		fmt.Fprintf(w, "  %-24s %6d MiB\n", u.Component, u.RSS>>20)
		total += u.RSS
	}
	fmt.Fprintf(w, "  %-24s %6d MiB\n", "total", total>>20)
}
