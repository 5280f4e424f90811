package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Role says what a key may do.
type Role string

const (
	// RoleAgent may manage its own sandboxes.
	RoleAgent Role = "agent"
	// RoleOperator may also manage keys and see every sandbox.
	RoleOperator Role = "operator"
)

// ParseRole checks that s names a role.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAgent, RoleOperator:
		return r, nil
	}
	return "", fmt.Errorf("%w: role %q: use %q or %q", sandbox.ErrInvalid, s, RoleAgent, RoleOperator)
}

// Quota bounds what one key may hold at once. Zero fields mean the
// defaults below.
type Quota struct {
	// MaxSandboxes is the number of live sandboxes. 10.
	MaxSandboxes int `json:"max_sandboxes,omitempty"`
	// MaxMemoryBytes bounds the RAM its live sandboxes can hold together
	// (sandbox.HostBytes: memory limits, tmpfs sizes and what the drivers
	// take beyond them). 8 GiB.
	MaxMemoryBytes int64 `json:"max_memory_bytes,omitempty"`
	// MaxSnapshots is the number of snapshots it keeps, checkpoints
	// included. 100.
	MaxSnapshots int `json:"max_snapshots,omitempty"`
	// MaxSnapshotBytes bounds the content its snapshots hold together,
	// each distinct file content counted once. 4 GiB.
	MaxSnapshotBytes int64 `json:"max_snapshot_bytes,omitempty"`
	// MaxSnapshotFiles bounds the entries (files, directories, symlinks)
	// of one snapshot. 100,000.
	MaxSnapshotFiles int `json:"max_snapshot_files,omitempty"`
}

// Default quota values.
const (
	DefaultMaxSandboxes     = 10
	DefaultMaxMemoryBytes   = 8 << 30
	DefaultMaxSnapshots     = 100
	DefaultMaxSnapshotBytes = 4 << 30
	DefaultMaxSnapshotFiles = 100_000
)

// WithDefaults fills q's zero fields.
func (q Quota) WithDefaults() Quota {
	if q.MaxSandboxes == 0 {
		q.MaxSandboxes = DefaultMaxSandboxes
	}
	if q.MaxMemoryBytes == 0 {
		q.MaxMemoryBytes = DefaultMaxMemoryBytes
	}
	if q.MaxSnapshots == 0 {
		q.MaxSnapshots = DefaultMaxSnapshots
	}
	if q.MaxSnapshotBytes == 0 {
		q.MaxSnapshotBytes = DefaultMaxSnapshotBytes
	}
	if q.MaxSnapshotFiles == 0 {
		q.MaxSnapshotFiles = DefaultMaxSnapshotFiles
	}
	return q
}

// RateLimits bound how fast one key may act, and how much work it may
// have in flight at once. Zero fields mean the defaults.
type RateLimits struct {
	// CreatesPerSecond and CreateBurst bound sandbox creates. 5/s, burst 10.
	CreatesPerSecond float64 `json:"creates_per_second,omitempty"`
	CreateBurst      int     `json:"create_burst,omitempty"`
	// ExecsPerSecond and ExecBurst bound execs, process starts, writes to a
	// process's standard input and waits for a process. 200/s, burst 400.
	ExecsPerSecond float64 `json:"execs_per_second,omitempty"`
	ExecBurst      int     `json:"exec_burst,omitempty"`
	// FilesPerSecond and FileBurst bound calls of the file API (reads,
	// writes, listings, archives). 200/s, burst 400.
	FilesPerSecond float64 `json:"files_per_second,omitempty"`
	FileBurst      int     `json:"file_burst,omitempty"`
	// MaxInFlight bounds the key's calls that move data or wait (creates,
	// execs, stdin writes, waits, file calls) running at once. 16.
	MaxInFlight int `json:"max_in_flight,omitempty"`
}

// Default rate limits.
const (
	DefaultCreatesPerSecond = 5
	DefaultCreateBurst      = 10
	DefaultExecsPerSecond   = 200
	DefaultExecBurst        = 400
	DefaultFilesPerSecond   = 200
	DefaultFileBurst        = 400
	DefaultMaxInFlight      = 16
)

// WithDefaults fills r's zero fields.
func (r RateLimits) WithDefaults() RateLimits {
	if r.CreatesPerSecond == 0 {
		r.CreatesPerSecond = DefaultCreatesPerSecond
	}
	if r.CreateBurst == 0 {
		r.CreateBurst = DefaultCreateBurst
	}
	if r.ExecsPerSecond == 0 {
		r.ExecsPerSecond = DefaultExecsPerSecond
	}
	if r.ExecBurst == 0 {
		r.ExecBurst = DefaultExecBurst
	}
	if r.FilesPerSecond == 0 {
		r.FilesPerSecond = DefaultFilesPerSecond
	}
	if r.FileBurst == 0 {
		r.FileBurst = DefaultFileBurst
	}
	if r.MaxInFlight == 0 {
		r.MaxInFlight = DefaultMaxInFlight
	}
	return r
}

// Key is an API key. The secret itself is never stored: only its SHA-256.
type Key struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	Role Role   `json:"role"`
	// Hash is the hex SHA-256 of the secret.
	Hash  string     `json:"hash"`
	Quota Quota      `json:"quota"`
	Rate  RateLimits `json:"rate"`
	// Labels are read by policy rules and tiers ("trust": "untrusted").
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
	// Lineage lists the keys that made this one through the API, nearest
	// first (empty for a key made offline). It is fixed at creation, so
	// deleting a key in between does not shorten it. An approval cannot be
	// decided by a key whose lineage holds the key that asked.
	Lineage []string `json:"lineage,omitempty"`
}

// Secret is an API key's secret. It prints as REDACTED in logs.
type Secret string

// LogValue hides the secret from log/slog.
func (Secret) LogValue() slog.Value { return slog.StringValue("REDACTED") }

// String hides the secret from fmt's %v.
func (Secret) String() string { return "REDACTED" }

// secretPrefix starts every secret of FormatAirlock, so that scanners can
// find leaked ones; e2bSecretPrefix starts those of FormatE2B.
const (
	secretPrefix    = "airlock_"
	e2bSecretPrefix = "e2b_"
)

// HashSecret returns the hex SHA-256 of secret, as Key.Hash holds it.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewKey makes a key with a fresh random secret, stores it, and returns it
// with the secret, which is shown this once and never again.
func (s *Store) NewKey(name string, role Role, q Quota, r RateLimits, now time.Time) (Key, Secret, error) {
	return s.NewKeyBy(nil, name, role, q, r, now)
}

// NewKeyBy is NewKey for a key made by the key maker (nil: made offline);
// the new key's lineage is maker and maker's lineage.
func (s *Store) NewKeyBy(maker *Key, name string, role Role, q Quota, r RateLimits, now time.Time) (Key, Secret, error) {
	return s.NewKeyFormat(maker, name, role, q, r, now, FormatAirlock)
}

// SecretFormat is how a new key's secret is written. Every format works
// everywhere a key is accepted; they differ only for clients that check a
// key's form before they send it.
type SecretFormat string

const (
	// FormatAirlock: "airlock_" and 43 characters of URL-safe base64.
	FormatAirlock SecretFormat = "airlock"
	// FormatE2B: "e2b_" and 64 lower-case hex digits, the form the E2B
	// SDKs accept (they check `^e2b_[0-9a-f]+$`).
	FormatE2B SecretFormat = "e2b"
)

// ParseSecretFormat reads a format name; empty means FormatAirlock.
func ParseSecretFormat(s string) (SecretFormat, error) {
	switch SecretFormat(s) {
	case "", FormatAirlock:
		return FormatAirlock, nil
	case FormatE2B:
		return FormatE2B, nil
	}
	return "", fmt.Errorf("%w: key format %q: use airlock or e2b", sandbox.ErrInvalid, s)
}

// NewKeyFormat is NewKeyBy with the secret written in format.
func (s *Store) NewKeyFormat(maker *Key, name string, role Role, q Quota, r RateLimits, now time.Time, format SecretFormat) (Key, Secret, error) {
	if _, err := ParseSecretFormat(string(format)); err != nil {
		return Key{}, "", err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return Key{}, "", err
	}
	if len(name) > 128 || strings.ContainsAny(name, "\x00\n\r") {
		return Key{}, "", fmt.Errorf("%w: key name: at most 128 characters on one line", sandbox.ErrInvalid)
	}
	var idb [6]byte
	var sec [32]byte
	_, _ = rand.Read(idb[:])
	_, _ = rand.Read(sec[:])
	k := Key{
		ID:   "key-" + hex.EncodeToString(idb[:]),
		Name: name, Role: role, Quota: q, Rate: r, Created: now.UTC(),
	}
	if maker != nil {
		k.Lineage = append([]string{maker.ID}, maker.Lineage...)
	}
	secret := secretPrefix + base64.RawURLEncoding.EncodeToString(sec[:])
	if format == FormatE2B {
		secret = e2bSecretPrefix + hex.EncodeToString(sec[:])
	}
	k.Hash = HashSecret(secret)
	b, err := json.Marshal(k)
	if err != nil {
		return Key{}, "", err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketKeys).Put([]byte(k.ID), b); err != nil {
			return err
		}
		return tx.Bucket(bucketKeyHashes).Put([]byte(k.Hash), []byte(k.ID))
	})
	if err != nil {
		return Key{}, "", fmt.Errorf("store key: %w", err)
	}
	return k, Secret(secret), nil
}

// SetKeyLabels replaces the labels of key id.
func (s *Store) SetKeyLabels(id string, labels map[string]string) error {
	if err := CheckLabels(labels); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeys).Get([]byte(id))
		if b == nil {
			return fmt.Errorf("key %s: %w", id, sandbox.ErrNotFound)
		}
		var k Key
		if err := json.Unmarshal(b, &k); err != nil {
			return err
		}
		k.Labels = labels
		nb, err := json.Marshal(k)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketKeys).Put([]byte(id), nb)
	})
}

// CheckLabels checks a key's labels: at most 16, names of lower-case
// letters, digits, '-' and '_', values of at most 128 characters on one line.
func CheckLabels(labels map[string]string) error {
	if len(labels) > 16 {
		return fmt.Errorf("%w: at most 16 labels", sandbox.ErrInvalid)
	}
	for k, v := range labels {
		if !sandbox.ValidID(k) {
			return fmt.Errorf("%w: label %q: names are lower-case letters, digits, '-' and '_'", sandbox.ErrInvalid, k)
		}
		if len(v) > 128 || strings.ContainsAny(v, "\x00\n\r") {
			return fmt.Errorf("%w: label %s: at most 128 characters on one line", sandbox.ErrInvalid, k)
		}
	}
	return nil
}

// KeyBySecret finds the key whose secret is secret, or returns an error
// wrapping sandbox.ErrNotFound.
func (s *Store) KeyBySecret(secret string) (Key, error) {
	h := HashSecret(secret)
	var k Key
	err := s.db.View(func(tx *bolt.Tx) error {
		id := tx.Bucket(bucketKeyHashes).Get([]byte(h))
		if id == nil {
			return fmt.Errorf("key: %w", sandbox.ErrNotFound)
		}
		v := tx.Bucket(bucketKeys).Get(id)
		if v == nil {
			return fmt.Errorf("key: %w", sandbox.ErrNotFound)
		}
		return json.Unmarshal(v, &k)
	})
	return k, err
}

// GetKey returns the key with id.
func (s *Store) GetKey(id string) (Key, error) {
	var k Key
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketKeys).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("key %s: %w", id, sandbox.ErrNotFound)
		}
		return json.Unmarshal(v, &k)
	})
	return k, err
}

// Keys lists every key in id order.
func (s *Store) Keys() ([]Key, error) {
	var out []Key
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketKeys).ForEach(func(_, v []byte) error {
			var k Key
			if err := json.Unmarshal(v, &k); err != nil {
				return err
			}
			out = append(out, k)
			return nil
		})
	})
	return out, err
}

// DeleteKey removes the key with id; its secret stops working at once.
func (s *Store) DeleteKey(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketKeys).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("key %s: %w", id, sandbox.ErrNotFound)
		}
		var k Key
		if err := json.Unmarshal(v, &k); err != nil {
			return err
		}
		if err := tx.Bucket(bucketKeyHashes).Delete([]byte(k.Hash)); err != nil {
			return err
		}
		return tx.Bucket(bucketKeys).Delete([]byte(id))
	})
}
