// Package store keeps the daemon's durable records in one embedded bbolt
// database inside the state directory: every sandbox the daemon made (its
// spec, owner, driver, state and deadlines) and every API key (its role,
// quotas, rate limits and the SHA-256 of its secret — never the secret).
//
// One process at a time holds the database. Open fails fast with ErrLocked
// when another process (a running daemon) holds it, instead of waiting.
package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// FileName is the database's name inside the state directory.
const FileName = "airlock.db"

// ErrLocked says another process holds the database.
var ErrLocked = errors.New("the state directory is in use by another airlock process")

var (
	bucketSandboxes = []byte("sandboxes")
	bucketActivity  = []byte("activity") // sandbox id -> last use, Unix nanoseconds
	bucketKeys      = []byte("keys")
	bucketKeyHashes = []byte("key_hashes") // hex SHA-256 -> key id
)

// Store is the daemon's database. Its methods are safe for concurrent use.
type Store struct {
	db *bolt.DB
}

// Open opens (creating if needed) the database in dir. It waits at most
// timeout for the lock (zero means 500 ms) and then fails with an error
// wrapping ErrLocked.
func Open(dir string, timeout time.Duration) (*Store, error) {
	if timeout <= 0 {
		timeout = 500 * time.Millisecond
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("make the state directory: %w", err)
	}
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{Timeout: timeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open the registry in %s: %w (a running `airlock serve`?): stop it, or do this through its API", dir, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open the registry in %s: %w", dir, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketActivity, bucketKeys, bucketKeyHashes} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise the registry: %w", err)
	}
	return &Store{db: db}, nil
}

// Close closes the database and releases its lock.
func (s *Store) Close() error { return s.db.Close() }

// State is where a sandbox is in its life.
type State string

const (
	// StateCreating: the daemon is making it.
	StateCreating State = "creating"
	// StatePooled: ready in a warm pool, owned by no key yet.
	StatePooled State = "pooled"
	// StateRunning: live and owned by a key.
	StateRunning State = "running"
	// StatePaused: its processes and memory are saved to the daemon's
	// disk (or frozen where they are: Paused.MemoryKept), to be resumed;
	// its TTL and idle timeout wait, its paused TTL runs.
	StatePaused State = "paused"
	// StateDestroyed: ended while the daemon ran (deleted, timed out, or its
	// agent died); nothing of it remains.
	StateDestroyed State = "destroyed"
	// StateLost: it was live when a previous daemon stopped, and the next
	// one could not reattach to it (whatever held it had died, or did not
	// answer) or it was still being made; what was left of it is removed.
	StateLost State = "lost"
)

// Live reports whether s is a state in which the sandbox may hold host
// resources.
func (s State) Live() bool {
	return s == StateCreating || s == StatePooled || s == StateRunning || s == StatePaused
}

// Sandbox is the record of one sandbox.
type Sandbox struct {
	ID string `json:"id"`
	// Owner is the id of the key that owns it; empty while pooled.
	Owner    string `json:"owner,omitempty"`
	Template string `json:"template"`
	Driver   string `json:"driver"`
	// DriverRule and DriverReason say what chose the driver ("tier:NAME",
	// "request", "template") and why.
	DriverRule   string       `json:"driver_rule,omitempty"`
	DriverReason string       `json:"driver_reason,omitempty"`
	Spec         sandbox.Spec `json:"spec"`
	State        State        `json:"state"`
	Created      time.Time    `json:"created"`
	// ExpiresAt is the TTL deadline: the sandbox is destroyed then.
	ExpiresAt time.Time `json:"expires_at"`
	// IdleTimeout destroys the sandbox after this long without use; zero
	// means no idle timeout.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// Ended is when it was destroyed or found lost; zero while live.
	Ended time.Time `json:"ended,omitzero"`
	// EndReason says why it ended ("deleted", "ttl", "idle", "lost", …).
	EndReason string `json:"end_reason,omitempty"`
	// EndMessage says why it ended in words a model can act on, when the
	// reason alone does not ("error": what the driver saw).
	EndMessage string `json:"end_message,omitempty"`
	// DriverState is the driver's own data to reattach with, if it can.
	DriverState []byte `json:"driver_state,omitempty"`
	// AgentProtocol is the protocol version of the sandbox's agent; 0 for
	// a driver without one, or a record older than protocol 4.
	AgentProtocol int `json:"agent_protocol,omitempty"`
	// Metadata is its owner's labels (key and value strings), kept as
	// given; lists can filter by them.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Token is a secret its owner chose at create (the E2B endpoints'
	// envd access token), returned only to its owner; empty: none.
	Token string `json:"token,omitempty"`
	// Checkpoints is how many per-exec checkpoints it keeps; zero: none.
	Checkpoints int `json:"checkpoints,omitempty"`
	// Transactions maps the id of each transactional exec running in it
	// to the snapshot its rollback restores: the next daemon finishes
	// the transaction of an exec that outlives this one.
	Transactions map[string]string `json:"transactions,omitempty"`
	// ImageDigest is the manifest digest of the image its root was
	// unpacked from, and WorkDir that image's working directory (the
	// default of its execs), for a driver that runs images from their
	// unpacked root.
	ImageDigest string `json:"image_digest,omitempty"`
	WorkDir     string `json:"workdir,omitempty"`
	// Paused is set while it is paused.
	Paused *Paused `json:"paused,omitempty"`
	// Lifecycle, when set, is what its TTL does instead of ending it.
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// Taking is set while this daemon takes its pause up from the object
	// store (a resume): from before its claim there until the pause's
	// record and image there are removed, so that a daemon that died
	// meanwhile is followed by one that finishes or undoes it.
	Taking *Taking `json:"taking,omitempty"`
}

// Taking is a pause in the object store a daemon is taking up: the pause,
// and the nonce of the claim it writes there (s3store.ClaimPausedAs).
type Taking struct {
	Pause StoredPause `json:"pause"`
	Claim string      `json:"claim"`
}

// Lifecycle is a sandbox's end other than at its TTL (E2B's lifecycle).
type Lifecycle struct {
	// OnTimeout "pause": at its TTL it is paused, not ended.
	OnTimeout string `json:"on_timeout,omitempty"`
	// AutoResume: a call that needs it running resumes it first.
	AutoResume bool `json:"auto_resume,omitempty"`
	// TTL is the lifetime it was made with: a resume after a pause at
	// its TTL gives it that much again.
	TTL time.Duration `json:"ttl,omitempty"`
}

// Paused is what a paused sandbox's resume needs.
type Paused struct {
	// At is when it was paused; Until when its paused TTL ends it.
	At    time.Time `json:"at"`
	Until time.Time `json:"until"`
	// TTLLeft is what was left of its TTL: its ExpiresAt is that much
	// past the resume.
	TTLLeft time.Duration `json:"ttl_left,omitempty"`
	// MemoryKept: it is frozen, its memory the host's still; nothing is
	// on disk.
	MemoryKept bool `json:"memory_kept,omitempty"`
	// Pending: a pause was begun and not recorded as done (the sandbox's
	// state is still running): a daemon that died meanwhile left it
	// running, or saved (sandbox.PauseFinder says which).
	Pending bool `json:"pending,omitempty"`
	// DriverState is its driver's (sandbox.Pauser's) state of it.
	DriverState []byte `json:"driver_state,omitempty"`
	// Digests are the digests of every file of its pause image, by name
	// ("blake3:HEX"; bare SHA-256 hex from before decision 74); Bytes
	// their total size.
	Digests map[string]string `json:"digests,omitempty"`
	Bytes   int64             `json:"bytes,omitempty"`
	// Stored, when set, says its image is in the object store too, where
	// another daemon sharing it can resume it (decision 83).
	Stored *StoredPause `json:"stored,omitempty"`
}

// StoredPause is where a pause image is in the object store: its
// files' content, by name, in a namespace of that pause alone (Gen), and
// its record beside them.
type StoredPause struct {
	Where string            `json:"where"`
	Gen   string            `json:"gen"`
	Blobs map[string]string `json:"blobs"`
}

// PutSandbox creates or replaces the record of sb.
func (s *Store) PutSandbox(sb Sandbox) error {
	if !sandbox.ValidID(sb.ID) {
		return fmt.Errorf("store sandbox %q: %w: invalid id", sb.ID, sandbox.ErrInvalid)
	}
	b, err := json.Marshal(sb)
	if err != nil {
		return fmt.Errorf("store sandbox %s: %w", sb.ID, err)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).Put([]byte(sb.ID), b)
	})
}

// UpdateSandbox applies fn to the record of id in one transaction and
// returns the new record.
func (s *Store) UpdateSandbox(id string, fn func(*Sandbox) error) (Sandbox, error) {
	var sb Sandbox
	err := s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketSandboxes)
		v := bk.Get([]byte(id))
		if v == nil {
			return fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
		}
		if err := json.Unmarshal(v, &sb); err != nil {
			return fmt.Errorf("read sandbox %s: %w", id, err)
		}
		if err := fn(&sb); err != nil {
			return err
		}
		b, err := json.Marshal(sb)
		if err != nil {
			return err
		}
		return bk.Put([]byte(id), b)
	})
	return sb, err
}

// GetSandbox returns the record of id, or an error wrapping
// sandbox.ErrNotFound.
func (s *Store) GetSandbox(id string) (Sandbox, error) {
	var sb Sandbox
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketSandboxes).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
		}
		return json.Unmarshal(v, &sb)
	})
	return sb, err
}

// Sandboxes returns every record for which keep returns true (every record
// when keep is nil), in id order.
func (s *Store) Sandboxes(keep func(*Sandbox) bool) ([]Sandbox, error) {
	var out []Sandbox
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			var sb Sandbox
			if err := json.Unmarshal(v, &sb); err != nil {
				return fmt.Errorf("read sandbox %s: %w", k, err)
			}
			if keep == nil || keep(&sb) {
				out = append(out, sb)
			}
			return nil
		})
	})
	return out, err
}

// DeleteSandbox removes the record of id; a missing record is no error.
func (s *Store) DeleteSandbox(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketActivity).Delete([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketSandboxes).Delete([]byte(id))
	})
}

// SetActivity records when each sandbox of last was last used, in one
// transaction. It is kept apart from the records, which are larger and
// change rarely, so that a daemon can write it often: a restarted daemon
// reads it to go on with each sandbox's idle timeout.
func (s *Store) SetActivity(last map[string]time.Time) error {
	if len(last) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketActivity)
		for id, t := range last {
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], uint64(t.UnixNano()))
			if err := bk.Put([]byte(id), b[:]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Activity returns when sandbox id was last used, as SetActivity recorded
// it; zero when it never did.
func (s *Store) Activity(id string) time.Time {
	var t time.Time
	_ = s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketActivity).Get([]byte(id)); len(v) == 8 {
			t = time.Unix(0, int64(binary.BigEndian.Uint64(v)))
		}
		return nil
	})
	return t
}

// MarkLost marks every live record (creating, pooled, running) as lost,
// with reason, and returns the records it changed. It is what a daemon does
// on start: the sandboxes of the previous run died with it.
func (s *Store) MarkLost(now time.Time, reason string) ([]Sandbox, error) {
	var changed []Sandbox
	err := s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketSandboxes)
		type kv struct{ k, v []byte }
		var updates []kv
		err := bk.ForEach(func(k, v []byte) error {
			var sb Sandbox
			if err := json.Unmarshal(v, &sb); err != nil {
				return fmt.Errorf("read sandbox %s: %w", k, err)
			}
			if !sb.State.Live() {
				return nil
			}
			sb.State, sb.Ended, sb.EndReason = StateLost, now, reason
			b, err := json.Marshal(sb)
			if err != nil {
				return err
			}
			changed = append(changed, sb)
			updates = append(updates, kv{bytes.Clone(k), b})
			return nil
		})
		if err != nil {
			return err
		}
		for _, u := range updates {
			if err := bk.Put(u.k, u.v); err != nil {
				return err
			}
		}
		return nil
	})
	return changed, err
}

// PruneEnded deletes the records of sandboxes that ended before cutoff and
// returns how many it deleted.
func (s *Store) PruneEnded(cutoff time.Time) (int, error) {
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketSandboxes)
		var dead [][]byte
		err := bk.ForEach(func(k, v []byte) error {
			var sb Sandbox
			if err := json.Unmarshal(v, &sb); err != nil {
				return nil // an unreadable record is left for a person to see
			}
			if !sb.State.Live() && !sb.Ended.IsZero() && sb.Ended.Before(cutoff) {
				dead = append(dead, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range dead {
			if err := bk.Delete(k); err != nil {
				return err
			}
			if err := tx.Bucket(bucketActivity).Delete(k); err != nil {
				return err
			}
		}
		n = len(dead)
		return nil
	})
	return n, err
}
