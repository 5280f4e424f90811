package api

import (
	"net/http"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Snapshots of sandboxes' files: take, list, get, delete, restore, diff,
// fork. A snapshot is named by its id (sn-…) anywhere, or by its name
// among its sandbox's snapshots (routes under /v1/sandboxes/{id}).

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	Name       string `json:"name,omitempty"`
	Label      string `json:"label,omitempty"`
	IncludeTmp bool   `json:"include_tmp,omitempty"`
}

// SnapshotList is the answer of the snapshot listings.
type SnapshotList struct {
	Snapshots []snapshot.Info `json:"snapshots"`
}

// RestoreRequest is the body of POST /v1/sandboxes/{id}/restore: a
// snapshot (id or name), or the number of last execs to undo.
type RestoreRequest struct {
	Snapshot  string `json:"snapshot,omitempty"`
	UndoSteps int    `json:"undo_steps,omitempty"`
}

// RestoreResponse says what a restore did.
type RestoreResponse struct {
	Snapshot snapshot.Info `json:"snapshot"`
	sandbox.ApplyStats
}

// ForkRequest is the body of POST /v1/snapshots/{snap}/fork.
type ForkRequest struct {
	// Sandbox is where a snapshot name is looked up (not needed for an id).
	Sandbox    string            `json:"sandbox,omitempty"`
	TTLSeconds int64             `json:"ttl_seconds,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
}

// ForkResponse is the new sandbox and what its restore did.
type ForkResponse struct {
	Sandbox  Sandbox       `json:"sandbox"`
	Snapshot snapshot.Info `json:"snapshot"`
	sandbox.ApplyStats
}

// snapshotRef checks the {snap} of a route: an id or a name.
func snapshotRef(r *http.Request) (string, error) {
	ref := r.PathValue("snap")
	if snapshot.ValidID(ref) {
		return ref, nil
	}
	if err := snapshot.CheckName(ref); err != nil {
		return "", err
	}
	return ref, nil
}

func (s *Server) takeSnapshot(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body SnapshotRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	info, err := s.sup.Snapshot(r.Context(), c.sup, id, supervisor.SnapshotRequest{Name: body.Name, Label: body.Label, IncludeTmp: body.IncludeTmp})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, info)
	return nil
}

func (s *Server) listSandboxSnapshots(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	list, err := s.sup.ListSnapshots(r.Context(), c.sup, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, SnapshotList{Snapshots: list})
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, c *caller) error {
	sb := r.URL.Query().Get("sandbox")
	if sb != "" && !sandbox.ValidID(sb) {
		return badRequest("sandbox %q is not a sandbox id", truncate(sb, 80))
	}
	list, err := s.sup.ListSnapshots(r.Context(), c.sup, sb)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, SnapshotList{Snapshots: list})
	return nil
}

// sandboxOf is the {id} of a route that has one, or "".
func sandboxOf(r *http.Request) (string, error) {
	if r.PathValue("id") == "" {
		return "", nil
	}
	return sandboxID(r)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, c *caller) error {
	sb, err := sandboxOf(r)
	if err != nil {
		return err
	}
	ref, err := snapshotRef(r)
	if err != nil {
		return err
	}
	snap, err := s.sup.GetSnapshot(r.Context(), c.sup, sb, ref)
	if err != nil {
		return err
	}
	if t := r.URL.Query().Get("tree"); t == "1" || t == "true" {
		writeJSON(w, http.StatusOK, snap)
		return nil
	}
	writeJSON(w, http.StatusOK, snap.Info)
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, c *caller) error {
	sb, err := sandboxOf(r)
	if err != nil {
		return err
	}
	ref, err := snapshotRef(r)
	if err != nil {
		return err
	}
	if err := s.sup.DeleteSnapshot(r.Context(), c.sup, sb, ref); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) restoreSandbox(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body RestoreRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	res, err := s.sup.Restore(r.Context(), c.sup, id, supervisor.RestoreRequest{Snapshot: body.Snapshot, UndoSteps: body.UndoSteps})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, RestoreResponse{Snapshot: res.Snapshot, ApplyStats: res.Stats})
	return nil
}

func (s *Server) diffSandbox(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	req := supervisor.DiffRequest{From: q.Get("from"), To: q.Get("to")}
	for _, ref := range []string{req.From, req.To} {
		if ref != "" && ref != supervisor.Now && !snapshot.ValidID(ref) {
			if err := snapshot.CheckName(ref); err != nil {
				return err
			}
		}
	}
	if v := q.Get("step"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return badRequest("step %q: give the number of an exec (1, 2, …)", truncate(v, 40))
		}
		req.Step = n
	}
	if v := q.Get("max_file_diff_bytes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 1<<20 {
			return badRequest("max_file_diff_bytes %q: give 1 to %d", truncate(v, 40), 1<<20)
		}
		req.Limits.PerFile = n
	}
	d, err := s.sup.Diff(r.Context(), c.sup, id, req)
	if err != nil {
		return err
	}
	if q.Get("format") == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(d.Text()))
		return nil
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (s *Server) forkSnapshot(w http.ResponseWriter, r *http.Request, c *caller) error {
	ref, err := snapshotRef(r)
	if err != nil {
		return err
	}
	var body ForkRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	sb := body.Sandbox
	if p, err := sandboxOf(r); err != nil {
		return err
	} else if p != "" {
		sb = p
	}
	if sb != "" && !sandbox.ValidID(sb) {
		return badRequest("sandbox %q is not a sandbox id", truncate(sb, 80))
	}
	req := supervisor.ForkRequest{Sandbox: sb, Snapshot: ref}
	if req.TTL, err = seconds("ttl_seconds", body.TTLSeconds); err != nil {
		return err
	}
	if req.Env, err = envList(body.Env); err != nil {
		return err
	}
	res, err := s.sup.Fork(r.Context(), c.sup, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, ForkResponse{Sandbox: wireSandbox(res.Sandbox), Snapshot: res.Snapshot, ApplyStats: res.Stats})
	return nil
}
