package dockerd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/testrig"
	"github.com/airlock-sandbox/airlock/internal/testrig/rootimage"
)

// ImageSpec is the tests' image: rootimage's default (Debian minbase with
// procps and python3), the same one the kube rig runs, built once.
var ImageSpec = rootimage.Spec{}

// TestImage returns the name of the tests' image in the engine at host,
// importing it (`docker import` of the root image, which it builds when
// missing: see rootimage.Ensure) when the engine lacks it. The tag is the
// release the image was built from.
func TestImage(ctx context.Context, host string, log io.Writer) (string, error) {
	img, err := rootimage.Ensure(ctx, testrig.CacheDir(), ImageSpec, log)
	if err != nil {
		return "", err
	}
	m := img.Manifest
	ref := "airlock-test/" + m.Suite + "-" + strings.Join(m.Include, "-") + ":" + m.Release[:16]
	cli, err := client.New(client.WithHost(host))
	if err != nil {
		return "", err
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("look for image %s: %w", ref, err)
	}
	f, err := os.Open(img.Path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fmt.Fprintf(log, "dockerd: importing %s as %s\n", img.Path, ref)
	r, err := cli.ImageImport(ctx, client.ImageImportSource{Source: f, SourceName: "-"}, ref, client.ImageImportOptions{})
	if err != nil {
		return "", fmt.Errorf("import %s: %w", img.Path, err)
	}
	defer r.Close()
	// The answer is a stream of JSON messages; an error comes as one.
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("import %s: %w", img.Path, err)
		}
		if msg.Error != "" {
			return "", fmt.Errorf("import %s: %s", img.Path, msg.Error)
		}
	}
	return ref, nil
}
