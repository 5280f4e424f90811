package bench

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/registry"
)

// The image section (issue 37): the first run of an image airlock has not
// pulled (pull and unpack, `airlock image pull` into an empty cache)
// against `docker pull` of the same image from the same registry (Debian's
// docker-registry on loopback, which the engine reaches over plain HTTP as
// it does any 127.0.0.0/8 registry), and a run of a cached image against
// `airlock run` on the composed root, python3 -c pass in both.
const (
	idImageDockerPull = "image/first/docker-pull"
	idImageFirst      = "image/first/airlock-pull"
	idImageComposed   = "image/cached/composed-root"
	idImageCached     = "image/cached/airlock-image"
)

// imageFirstRuns is how many first runs of each are timed: each moves the
// whole image.
const imageFirstRuns = 3

// imageRows measures the image section, or says why it cannot.
func imageRows(ctx context.Context, o Options, progress func(string, ...any)) []Row {
	rows := []Row{
		{Section: "image", ID: idImageDockerPull, What: "docker pull of an image from a registry on loopback (after docker rmi)", Unit: UnitMS},
		{Section: "image", ID: idImageFirst, What: "airlock image pull of the same image into an empty cache (pull and unpack)", Unit: UnitMS,
			Compare: []Comparison{{Baseline: idImageDockerPull, Name: "docker pull"}}},
		{Section: "image", ID: idImageComposed, What: "airlock run python3 -c pass on the composed root (native, whole CLI)", Unit: UnitMS},
		{Section: "image", ID: idImageCached, What: "airlock run --image python3 -c pass, the image cached (native, whole CLI; target 1.2x)", Unit: UnitMS,
			Compare: []Comparison{{Baseline: idImageComposed, Name: "composed root"}}},
	}
	fail := func(status Status, detail string) []Row {
		for i := range rows {
			if rows[i].Status == "" {
				rows[i].Status, rows[i].Detail = status, detail
			}
		}
		return rows
	}
	if o.ImageTar == "" {
		return fail(StatusMissing, "give --image-tar FILE, a tar of a root with python3 (a debootstrap root: the test rigs' rootimage)")
	}
	full := o.AirlockFull
	if full == "" {
		full = o.Airlock
	}
	if full == "" {
		return fail(StatusFailed, "no airlock binary to run")
	}
	if _, err := os.Stat(registry.Bin); err != nil {
		return fail(StatusMissing, "no registry: "+registry.Fix)
	}
	dir, err := os.MkdirTemp("", "airlock-bench-image-")
	if err != nil {
		return fail(StatusFailed, err.Error())
	}
	defer os.RemoveAll(dir)
	progress("image: a registry on loopback, the image of %s pushed to it", o.ImageTar)
	reg, err := registry.Run(ctx, dir)
	if err != nil {
		return fail(StatusFailed, err.Error())
	}
	defer reg.Stop()
	img, err := imageOfTar(o.ImageTar)
	if err != nil {
		return fail(StatusFailed, err.Error())
	}
	ref, err := reg.Push("bench/python:1", img)
	if err != nil {
		return fail(StatusFailed, err.Error())
	}
	if ls, err := img.Layers(); err == nil && len(ls) == 1 {
		size, _ := ls[0].Size()
		fi, _ := os.Stat(o.ImageTar)
		for i := range rows[:2] {
			rows[i].What += fmt.Sprintf(" (one layer: %d MB gzipped, %d MB unpacked)", size>>20, fi.Size()>>20)
		}
	}
	w, err := newCmdWorker(10 * time.Minute)
	if err != nil {
		return fail(StatusFailed, err.Error())
	}
	defer w.close()
	cache := filepath.Join(dir, "cache")
	airlockPull := []string{full, "image", "pull", "--quiet", "--cache", cache, "--insecure-registry", reg.Host, ref}

	// First runs, alternated; the engine's copy and airlock's cache are
	// removed (untimed) before each.
	var sd, sa series
	_, dockerErr := exec.LookPath("docker")
	for i := 0; i < imageFirstRuns && ctx.Err() == nil; i++ {
		if dockerErr == nil {
			if err := dockerForget(ctx, ref); err != nil {
				recordRun(&sd, 0, err)
				continue
			}
			d, err := w.run(ctx, []string{"docker", "pull", "-q", ref})
			recordRun(&sd, d, err)
		}
		if err := os.RemoveAll(cache); err != nil {
			return fail(StatusFailed, err.Error())
		}
		d, err := w.run(ctx, airlockPull)
		recordRun(&sa, d, err)
	}
	if dockerErr == nil {
		_ = dockerForget(ctx, ref)
		rows[0] = latencyRow(rows[0], sd)
	} else {
		rows[0].Status, rows[0].Detail = StatusMissing, "no docker: apt-get install docker.io"
	}
	rows[1] = latencyRow(rows[1], sa)
	if sa.fails > 0 && len(sa.samples) == 0 {
		return fail(StatusFailed, "the image could not be pulled")
	}

	// Cached runs against the composed root, in turns; both through env
	// so that both pay for it.
	progress("image: airlock run --image (cached) and on the composed root, %d runs each, alternately", o.PythonRuns)
	// The airlock a user runs (the front, which hands --image to the
	// complete one).
	env := []string{"env", "AIRLOCK_IMAGE_CACHE=" + cache, o.Airlock, "run"}
	py := []string{"python3", "-c", "pass"}
	composed := append(append(append([]string(nil), env...), "--"), py...)
	cached := append(append(append([]string(nil), env...), "--image", ref, "--"), py...)
	sc, si, err := timePair(ctx, o, o.PythonRuns, composed, cached)
	if err != nil {
		return fail(StatusFailed, err.Error())
	}
	rows[2], rows[3] = latencyRow(rows[2], sc), latencyRow(rows[3], si)
	return rows
}

// recordRun adds one timed run to s.
func recordRun(s *series, d time.Duration, err error) {
	if err != nil {
		s.fails++
		if s.firstErr == nil {
			s.firstErr = err
		}
		return
	}
	s.samples = append(s.samples, d)
}

// imageOfTar is a one-layer image of the root in the tar file, with a
// PATH. The layer starts with a file of its own (etc/airlock-bench, the
// time), so that no engine has it already: an engine shares layers by
// content, and the test rigs' Docker image is made from the same root.
func imageOfTar(file string) (v1.Image, error) {
	var head bytes.Buffer
	tw := tar.NewWriter(&head)
	stamp := []byte(time.Now().UTC().Format(time.RFC3339Nano) + "\n")
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/airlock-bench", Mode: 0o644, Size: int64(len(stamp))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(stamp); err != nil {
		return nil, err
	}
	if err := tw.Flush(); err != nil { // no end marker: the root's entries follow
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head.Bytes()), f), f}, nil
	}, tarball.WithCompressionLevel(1))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	return mutate.ConfigFile(img, cf)
}

// dockerForget removes the engine's image of ref by its id, with every
// tag it has (an earlier bench's registry had another port) and its
// layers, so that the next pull is a first one.
func dockerForget(ctx context.Context, ref string) error {
	id, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", ref).Output()
	if err != nil {
		return nil // the engine has no such image
	}
	if out, err := exec.CommandContext(ctx, "docker", "rmi", "-f", strings.TrimSpace(string(id))).CombinedOutput(); err != nil {
		return fmt.Errorf("docker rmi: %w: %s", err, out)
	}
	return nil
}
