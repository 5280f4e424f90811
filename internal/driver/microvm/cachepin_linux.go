package microvm

import (
	"os"
	"path/filepath"
	"time"
)

// A paused machine loads again only into the kernel, initramfs and root
// image it ran on (pausedState names them by path in the cache), which the
// cache would prune by age (cacheKeep) while the sandbox sleeps up to its
// paused TTL. A pause pins them: an empty file KIND/.pins/NAME/ID beside
// each product, which pruneCache honours for pinKeep; the resume and the
// discard remove it. The pins are in the cache, so every daemon sharing it
// sees them.

// pinKeep bounds how long a pin keeps a product: longer than any paused
// TTL a policy allows here, so that a daemon that died with its pins does
// not keep products for ever.
const pinKeep = 90 * 24 * time.Hour

// pinPath is the pin of sandbox id on the cached product holding file.
func pinPath(file, id string) string {
	product := filepath.Dir(file)
	return filepath.Join(filepath.Dir(product), ".pins", filepath.Base(product), id)
}

// pinProducts pins the products holding files for sandbox id.
func pinProducts(id string, files ...string) error {
	for _, f := range files {
		p := pinPath(f, id)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// unpinProducts removes sandbox id's pins of the products holding files.
func unpinProducts(id string, files ...string) {
	for _, f := range files {
		p := pinPath(f, id)
		_ = os.Remove(p)
		_ = os.Remove(filepath.Dir(p)) // once empty
	}
}

// pinned says whether product name of the cache's directory dir is
// pinned by a paused machine; pins older than pinKeep are removed.
func pinned(dir, name string) bool {
	pins := filepath.Join(dir, ".pins", name)
	ents, err := os.ReadDir(pins)
	if err != nil {
		return false
	}
	held := false
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if time.Since(fi.ModTime()) > pinKeep {
			_ = os.Remove(filepath.Join(pins, e.Name()))
			continue
		}
		held = true
	}
	return held
}
