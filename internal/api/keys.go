package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// CreateKeyRequest is the body of POST /v1/keys.
type CreateKeyRequest struct {
	Name  string           `json:"name,omitempty"`
	Role  string           `json:"role,omitempty"` // agent (default) or operator
	Quota store.Quota      `json:"quota,omitzero"`
	Rate  store.RateLimits `json:"rate,omitzero"`
	// Labels are read by the policy's rules and tiers ("trust": "untrusted").
	Labels map[string]string `json:"labels,omitempty"`
	// Format is how the secret is written: "airlock" (default) or "e2b"
	// (e2b_ and hex digits, the form the E2B SDKs check for). Both work
	// everywhere.
	Format string `json:"format,omitempty"`
}

// Key is the wire form of an API key; Secret is set only in the answer to
// its creation.
type Key struct {
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	Role      store.Role        `json:"role"`
	Quota     store.Quota       `json:"quota"`
	Rate      store.RateLimits  `json:"rate"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	// CreatedBy is the key that made this one through the API (empty: made
	// offline).
	CreatedBy string `json:"created_by,omitempty"`
	Secret    string `json:"secret,omitempty"`
}

func wireKey(k store.Key) Key {
	out := Key{ID: k.ID, Name: k.Name, Role: k.Role, Quota: k.Quota.WithDefaults(), Rate: k.Rate.WithDefaults(), Labels: k.Labels, CreatedAt: k.Created}
	if len(k.Lineage) > 0 {
		out.CreatedBy = k.Lineage[0]
	}
	return out
}

// KeyList is the body of GET /v1/keys.
type KeyList struct {
	Keys []Key `json:"keys"`
}

// CheckKeyRequest checks a key's settings.
func (b CreateKeyRequest) check() (store.Role, error) {
	if b.Role == "" {
		b.Role = string(store.RoleAgent)
	}
	role, err := store.ParseRole(b.Role)
	if err != nil {
		return "", err
	}
	q, rl := b.Quota, b.Rate
	if q.MaxSandboxes < 0 || q.MaxMemoryBytes < 0 || q.MaxSnapshots < 0 || q.MaxSnapshotBytes < 0 || q.MaxSnapshotFiles < 0 || rl.CreatesPerSecond < 0 || rl.CreateBurst < 0 || rl.ExecsPerSecond < 0 || rl.ExecBurst < 0 ||
		rl.FilesPerSecond < 0 || rl.FileBurst < 0 || rl.MaxInFlight < 0 {
		return "", badRequest("quotas and rate limits cannot be negative")
	}
	if err := store.CheckLabels(b.Labels); err != nil {
		return "", err
	}
	return role, nil
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request, c *caller) error {
	var body CreateKeyRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	role, err := body.check()
	if err != nil {
		return err
	}
	format, err := store.ParseSecretFormat(body.Format)
	if err != nil {
		return err
	}
	k, secret, err := s.store.NewKeyFormat(&c.key, body.Name, role, body.Quota, body.Rate, time.Now(), format)
	if err != nil {
		return err
	}
	if len(body.Labels) > 0 {
		if err := s.store.SetKeyLabels(k.ID, body.Labels); err != nil {
			return err
		}
		k.Labels = body.Labels
	}
	s.log.Info("key created", "key_id", k.ID, "role", k.Role, "by", c.key.ID)
	out := wireKey(k)
	out.Secret = string(secret)
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request, c *caller) error {
	ks, err := s.store.Keys()
	if err != nil {
		return err
	}
	out := KeyList{Keys: make([]Key, 0, len(ks))}
	for _, k := range ks {
		out.Keys = append(out.Keys, wireKey(k))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteKey(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	if len(id) > 64 {
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such key"}
	}
	if err := s.store.DeleteKey(id); err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such key"}
		}
		return err
	}
	s.sup.ForgetKey(id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
