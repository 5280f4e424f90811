package image

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// EnvInsecure names the variable that lists, comma-separated, the
// registries ("host:port") `airlock run --image` may reach over plain
// HTTP (as `airlock image pull --insecure-registry` does).
const EnvInsecure = "AIRLOCK_INSECURE_REGISTRIES"

// InsecureFromEnv is the registries EnvInsecure names.
func InsecureFromEnv() []string {
	var out []string
	for _, s := range strings.Split(os.Getenv(EnvInsecure), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// EnvDir names the variable that moves the image cache alone.
const EnvDir = "AIRLOCK_IMAGE_CACHE"

// DefaultDir is the image cache's directory: $AIRLOCK_IMAGE_CACHE, else
// $AIRLOCK_CACHE/images, else /var/cache/airlock/images for root, else the
// user's cache directory's airlock/images.
func DefaultDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	if d := os.Getenv("AIRLOCK_CACHE"); d != "" {
		return filepath.Join(d, "images"), nil
	}
	if os.Geteuid() == 0 {
		return "/var/cache/airlock/images", nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no directory for the image cache: %w (set AIRLOCK_CACHE)", err)
	}
	return filepath.Join(d, "airlock", "images"), nil
}

// Printer shows a pull's progress on w: on a terminal one line redrawn in
// place (layer, bytes), otherwise a line per layer fetched; an image the
// cache has shows nothing. quiet prints nothing.
func Printer(w io.Writer, terminal, quiet bool) Progress {
	if quiet {
		return nil
	}
	var mu sync.Mutex
	drawn := false
	return func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Phase {
		case "resolve":
			fmt.Fprintf(w, "pulling %s\n", e.Ref)
		case "layer":
			if terminal {
				fmt.Fprintf(w, "\r\x1b[Klayer %d/%d  %s / %s", e.Layer, e.Layers, size(e.Done), size(e.Total))
				drawn = true
			} else if e.Done == e.Total {
				fmt.Fprintf(w, "layer %d/%d %s\n", e.Layer, e.Layers, size(e.Total))
			}
		case "done":
			if drawn {
				fmt.Fprint(w, "\r\x1b[K")
				drawn = false
			}
			fmt.Fprintf(w, "%s: %s\n", e.Ref, e.Digest)
		}
	}
}

// size is n bytes for people: "12.3 MB".
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Size is n bytes for people, as `airlock image ls` shows sizes.
func Size(n int64) string { return size(n) }
