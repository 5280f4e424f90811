package microvm

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// guestModules are the kernel modules the guest needs, beyond what the
// kernel has built in: the virtio transport of -M microvm, the console
// (virtio-serial) the agent talks on, and the block device of the root.
// Their dependencies are found from the modules themselves.
var guestModules = []string{"virtio_mmio", "virtio_console", "virtio_blk"}

// moduleName is a module's name as the kernel knows it: the file name
// without .ko, with '-' as '_'.
func moduleName(file string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(file), ".ko"), "-", "_")
}

// moduleDepends reads the modules a module file depends on from its
// .modinfo section ("depends=a,b"). A Debian kernel package has no
// modules.dep: the modules say it themselves.
func moduleDepends(file string) ([]string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read module %s: %w", filepath.Base(file), err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("read module %s: it has no .modinfo section", filepath.Base(file))
	}
	b, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read module %s: %w", filepath.Base(file), err)
	}
	var deps []string
	for _, kv := range bytes.Split(b, []byte{0}) {
		v, ok := bytes.CutPrefix(kv, []byte("depends="))
		if !ok {
			continue
		}
		for _, d := range strings.Split(string(v), ",") {
			if d = strings.TrimSpace(d); d != "" {
				deps = append(deps, moduleName(d))
			}
		}
	}
	return deps, nil
}

// resolveModules returns the module files of want and of everything they
// depend on, below modDir (lib/modules/RELEASE), in an order the kernel
// can load them: each after its dependencies. Modules the kernel has built
// in (modules.builtin) are left out.
func resolveModules(modDir string, want []string) ([]string, error) {
	builtin := map[string]bool{}
	if f, err := os.Open(filepath.Join(modDir, "modules.builtin")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			builtin[moduleName(sc.Text())] = true
		}
		f.Close()
	}
	files := map[string]string{}
	err := filepath.WalkDir(filepath.Join(modDir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			files[moduleName(p)] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the kernel's modules: %w", err)
	}
	var order []string
	state := map[string]int{} // 1: visiting, 2: done
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		switch {
		case state[name] == 2 || builtin[name]:
			return nil
		case state[name] == 1:
			return fmt.Errorf("kernel modules depend on each other in a circle: %s", strings.Join(append(chain, name), " -> "))
		}
		file, ok := files[name]
		if !ok {
			return fmt.Errorf("the kernel has no module %s (needed by %s)", name, strings.Join(append(chain, name), " -> "))
		}
		state[name] = 1
		deps, err := moduleDepends(file)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, file)
		return nil
	}
	for _, w := range want {
		if err := visit(moduleName(w), nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}
