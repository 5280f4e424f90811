//go:build linux

package cow

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/procid"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Recovery is what the next start found of an apply a crash interrupted.
type Recovery struct {
	Sandbox string    `json:"sandbox"`
	Source  string    `json:"source"`
	Target  string    `json:"target"`
	Started time.Time `json:"started"`
	// Applied, NotApplied: the paths the host holds new, and old.
	// Unknown: neither (the host changed them since).
	Applied    []string `json:"applied"`
	NotApplied []string `json:"not_applied"`
	Unknown    []string `json:"unknown,omitempty"`
}

// Recover finishes the record of an apply in dir that a crash
// interrupted: it says which of its paths the host holds new, records
// those as applied, and removes its temporary files. Nil when dir holds
// no journal.
func Recover(dir string) (*Recovery, error) {
	defer lock(dir)()
	b, err := os.ReadFile(journalPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("read the apply journal %s: %w", journalPath(dir), err)
	}
	if j.Pid > 0 {
		if st, err := procid.StartTime(j.Pid); err == nil && st == j.PidStart {
			return nil, nil // the process that applies lives: in progress
		}
	}
	m, err := loadMeta(dir)
	if err != nil {
		return nil, err
	}
	s := &state{dir: dir, m: m}
	r := &Recovery{Sandbox: j.Sandbox, Source: j.Source, Target: j.Target, Started: j.Started, Applied: []string{}, NotApplied: []string{}}
	root, err := s.openSource()
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	entries := map[string]sandbox.TreeEntry{}
	for _, e := range m.Entries {
		entries[e.Path] = e
	}
	dirs := map[string]bool{}
	for _, st := range j.Plan {
		rel, ok := relOf(j.Target, st.Path)
		if !ok || (rel != "." && CheckName(rel) != "") {
			continue
		}
		dirs[path.Dir(rel)] = true
		now, err := hostEntry(root, rel)
		switch {
		case err != nil:
			r.Unknown = append(r.Unknown, st.Path)
		case same(now, st.After):
			r.Applied = append(r.Applied, st.Path)
			if now == nil {
				delete(entries, st.Path)
			} else {
				now.Path = st.Path
				entries[st.Path] = *now
			}
		case same(now, st.Before):
			r.NotApplied = append(r.NotApplied, st.Path)
		default:
			r.Unknown = append(r.Unknown, st.Path)
		}
	}
	for d := range dirs {
		fd, err := openBeneath(root, d, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			continue
		}
		f := os.NewFile(uintptr(fd), d)
		names, _ := f.Readdirnames(-1)
		for _, n := range names {
			if strings.HasPrefix(n, tempPrefix) {
				_ = unix.Unlinkat(fd, n, 0)
			}
		}
		f.Close()
	}
	m.Entries = m.Entries[:0]
	for _, e := range entries {
		m.Entries = append(m.Entries, e)
	}
	sortEntries(m.Entries)
	if err := m.save(dir); err != nil {
		return nil, err
	}
	if err := os.Remove(journalPath(dir)); err != nil {
		return nil, err
	}
	return r, nil
}

// RecoverAll runs Recover on every layer below stateDir (as the drivers
// lay them out: stateDir/cow/SANDBOX/N) and removes what is left of
// layers whose sandbox is gone.
func RecoverAll(stateDir string) ([]Recovery, error) {
	dirs, err := Dirs(stateDir)
	if err != nil {
		return nil, err
	}
	var out []Recovery
	var errs []error
	for _, d := range dirs {
		r, err := Recover(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
			continue
		}
		if r != nil {
			out = append(out, *r)
		}
		if _, err := os.Stat(upperPath(d)); errors.Is(err, os.ErrNotExist) {
			_ = Remove(d)
		}
	}
	return out, errors.Join(errs...)
}

// Dirs lists the layer directories below stateDir.
func Dirs(stateDir string) ([]string, error) {
	return filepath.Glob(filepath.Join(stateDir, "cow", "*", "*"))
}
