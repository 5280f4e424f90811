// Package audit keeps airlock's audit log: an append-only file of JSON
// lines, one per action (create, destroy, exec, file write and delete,
// egress decision, policy decision, approval), each carrying the SHA-256 of
// the line before it, so that editing, removing or reordering any line
// breaks the chain at that line.
//
// # Format
//
// Every line is one JSON object (an Event) ending in "\n". Field "prev" is
// the lower-case hex SHA-256 of the previous line's bytes, without its
// newline; the first line's prev is empty. Field "seq" counts lines from 1,
// so a removed or reordered line shows as a jump in seq.
//
// # Checkpoints
//
// The log's first line, a line after every Options.CheckpointEvery events
// or Options.CheckpointInterval, and the last line written by Close are
// checkpoints: events of kind "checkpoint" whose "sig" is an ed25519
// signature, by a key the daemon keeps outside the log, over the line's seq,
// time and prev — and so, through the chain, over every line before it. A
// wholesale rewrite with a fresh chain cannot carry valid signatures. After
// each checkpoint the writer also stores it in a head file beside the key
// (see Head); Verify given that head finds a log truncated past its last
// checkpoint.
//
// # Durability
//
// One goroutine writes. Append hands it an event and waits until the batch
// holding it is written with one write(2) and fsync'ed. A crash can leave
// at most a torn final line (no newline); Verify reports it, and Open
// cuts it off and records what it cut in a "recover" event, so it is never
// silently accepted.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Kind names what an Event records.
type Kind string

// The kinds of events.
const (
	KindCreate     Kind = "create"
	KindDestroy    Kind = "destroy"
	KindExec       Kind = "exec"
	KindFileWrite  Kind = "file_write"
	KindFileDelete Kind = "file_delete"
	KindEgress     Kind = "egress"
	KindPolicy     Kind = "policy"
	KindApproval   Kind = "approval"
	KindCheckpoint Kind = "checkpoint"
	// KindSnapshot records a snapshot taken; KindRestore a sandbox's
	// files restored from one (a transactional exec's rollback too);
	// KindSnapshotDelete a snapshot removed; KindFork a sandbox made from
	// a snapshot.
	KindSnapshot       Kind = "snapshot"
	KindRestore        Kind = "restore"
	KindSnapshotDelete Kind = "snapshot_delete"
	KindFork           Kind = "fork"
	// KindRecover records a torn tail that Open cut off after a crash.
	KindRecover Kind = "recover"
	// KindReattach records a sandbox that a daemon took up again on start:
	// it outlived the daemon before.
	KindReattach Kind = "reattach"
	// KindExport records a sandbox's file stored in an object store (or
	// refused: Decision "deny").
	KindExport Kind = "export"
	// KindExpose records a connection to a sandbox's exposed port, its
	// bytes each way at its end (Port; Host is the name it was asked by).
	KindExpose Kind = "expose"
	// KindCowApply records changes of a copy-on-write mount written to
	// the host (Decision "apply", or "conflict" when the host had changed
	// and nothing was written); KindCowDiscard changes dropped;
	// KindCowRecover what a start found of an apply a crash interrupted.
	// Path is the mount's target, Host its host directory, Files the
	// paths with their digests.
	KindCowApply   Kind = "cow_apply"
	KindCowDiscard Kind = "cow_discard"
	KindCowRecover Kind = "cow_recover"
	// KindPause records a sandbox paused (its processes and memory saved,
	// or frozen), KindResume one resumed; Reason says how, or why not.
	KindPause  Kind = "pause"
	KindResume Kind = "resume"
)

// FileChange is one path a copy-on-write apply or discard decided:
// Before is the host's content digest when the sandbox started (empty:
// none, or not a file), After the content written (apply) or dropped
// (discard).
type FileChange struct {
	Path   string `json:"path"`
	Kind   string `json:"kind"`
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
	// Refused says why it was left alone.
	Refused string `json:"refused,omitempty"`
}

// Event is one line of the log. The writer fills Seq, Time (when zero) and
// Prev; the rest is the caller's.
type Event struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Kind Kind      `json:"kind"`
	// Key is the id of the API key that asked ("" for the daemon itself,
	// "cli" for the one-shot CLI).
	Key      string `json:"key,omitempty"`
	Sandbox  string `json:"sandbox,omitempty"`
	Template string `json:"template,omitempty"`
	// Image is the image a create's sandbox runs, and ImageDigest the
	// manifest digest it ran (for a driver that runs images from their
	// unpacked root; the engine's image otherwise, digest unrecorded).
	Image       string   `json:"image,omitempty"`
	ImageDigest string   `json:"image_digest,omitempty"`
	Argv        []string `json:"argv,omitempty"`
	Code        string   `json:"code,omitempty"`
	Language    string   `json:"language,omitempty"`
	Path        string   `json:"path,omitempty"`
	Host        string   `json:"host,omitempty"`
	// Method is an egress request's method; Secrets name the secrets the
	// proxy put into it.
	Method  string   `json:"method,omitempty"`
	Secrets []string `json:"secrets,omitempty"`
	Port    int      `json:"port,omitempty"`
	IP      string   `json:"ip,omitempty"`
	// Decision is allow, deny or ask (policy), allow, deny or would_deny
	// (egress: would_deny is a request report mode let through), or
	// approve or deny (approval).
	Decision string `json:"decision,omitempty"`
	Rule     string `json:"rule,omitempty"`
	// Reason is why: the exec's end reason, a decision's reason.
	Reason   string `json:"reason,omitempty"`
	Approval string `json:"approval,omitempty"`
	// Snapshot is the id of the snapshot a snapshot event is about.
	Snapshot string `json:"snapshot,omitempty"`
	// Exit is an exec's exit code.
	Exit         *int           `json:"exit,omitempty"`
	Usage        *sandbox.Usage `json:"usage,omitempty"`
	StdoutSHA256 string         `json:"stdout_sha256,omitempty"`
	StderrSHA256 string         `json:"stderr_sha256,omitempty"`
	// SHA256 and Size describe a written file's content.
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
	// Object is where an export stored a file (s3://bucket/key), and
	// ContentType the type its bytes were found to be; Exec names the
	// exec the export was made for.
	Object      string `json:"object,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	Exec        string `json:"exec,omitempty"`
	// BytesSent and BytesReceived count an egress request's bytes to and
	// from its destination.
	BytesSent     int64 `json:"bytes_sent,omitempty"`
	BytesReceived int64 `json:"bytes_received,omitempty"`
	// Files are the paths a copy-on-write apply or discard decided.
	Files []FileChange `json:"files,omitempty"`
	// Error says why an action failed.
	Error string `json:"error,omitempty"`
	// PubKey (hex) and Sig (hex) are set on checkpoints.
	PubKey string `json:"pubkey,omitempty"`
	Sig    string `json:"sig,omitempty"`
	Prev   string `json:"prev"`
}

// Digest returns the lower-case hex SHA-256 of b, as events carry it.
func Digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// ExecEvent returns the event of a finished exec.
func ExecEvent(key, sandboxID string, argv []string, code, language string, res sandbox.Result, stdout, stderr []byte, err error) Event {
	ev := Event{Kind: KindExec, Key: key, Sandbox: sandboxID, Code: code, Language: language}
	if code == "" {
		ev.Argv = argv
	}
	if err != nil {
		ev.Error = err.Error()
		return ev
	}
	exit := res.ExitCode
	usage := res.Usage
	ev.Exit, ev.Usage, ev.Reason = &exit, &usage, string(res.Reason)
	ev.StdoutSHA256, ev.StderrSHA256 = Digest(stdout), Digest(stderr)
	return ev
}

// checkpointMessage is what a checkpoint's signature covers.
func checkpointMessage(seq uint64, t time.Time, prev string) []byte {
	return []byte("airlock-audit-checkpoint\x00" + uitoa(seq) + "\x00" + t.UTC().Format(time.RFC3339Nano) + "\x00" + prev)
}

func uitoa(n uint64) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
