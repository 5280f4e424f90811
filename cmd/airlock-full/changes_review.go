package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/client"
)

// reviewedExpect is the Expect of `changes --apply`: the entry of each
// change req chooses, from the listing saved in file (`changes ID --json`)
// or, without one, from a listing made now. With file, and no paths
// named, the paths are those the file shows: a change the sandbox made
// after the review is not applied.
func reviewedExpect(ctx context.Context, c *client.Client, id string, req *client.ChangesRequest, file string) (map[string]string, error) {
	var mounts []client.CowMount
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read the reviewed listing: %w", err)
		}
		var l struct {
			Mounts []client.CowMount `json:"mounts"`
		}
		if err := json.Unmarshal(b, &l); err != nil || l.Mounts == nil {
			return nil, fmt.Errorf("%s is not a listing of `airlock sandbox changes ID --json`: %w", file, err)
		}
		mounts = l.Mounts
	} else {
		var err error
		if mounts, err = c.Changes(ctx, id); err != nil {
			return nil, err
		}
	}
	var m *client.CowMount
	for i := range mounts {
		if req.Target == "" || mounts[i].Target == req.Target {
			if m != nil {
				return nil, fmt.Errorf("the listing has %d cow mounts: name one with --target", len(mounts))
			}
			m = &mounts[i]
		}
	}
	if m == nil {
		if file != "" {
			return nil, fmt.Errorf("%s lists no cow mount at %q", file, req.Target)
		}
		return nil, nil // the daemon says why
	}
	out := map[string]string{}
	for p, e := range m.Reviewed() {
		if chosen(m.Target, req.Paths, p) {
			out[p] = e
		}
	}
	if file != "" {
		if len(out) == 0 {
			return nil, fmt.Errorf("%s shows none of the changes to apply", file)
		}
		if len(req.Paths) == 0 {
			for p := range out {
				req.Paths = append(req.Paths, p)
			}
			slices.Sort(req.Paths)
		}
	}
	return out, nil
}

// chosen says the change at p (absolute in the sandbox) is one of paths
// (relative to target or absolute; a directory stands for all below it;
// none: all), as the daemon chooses.
func chosen(target string, paths []string, p string) bool {
	if len(paths) == 0 {
		return true
	}
	for _, s := range paths {
		if !strings.HasPrefix(s, "/") {
			s = path.Join(target, s)
		}
		s = path.Clean(s)
		if p == s || s == "/" || strings.HasPrefix(p, s+"/") {
			return true
		}
	}
	return false
}
