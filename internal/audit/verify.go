package audit

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// VerifyOptions say what to check a log against.
type VerifyOptions struct {
	// PublicKey is the daemon's checkpoint key. Without it the checkpoints
	// are checked against the key written in the log's first line, which
	// proves nothing against a rewrite.
	PublicKey ed25519.PublicKey
	// Head, when set, is the daemon's latest checkpoint: the log must hold
	// it, unchanged.
	Head *Head
}

// Problem is one thing wrong with a log, at a 1-based line number.
type Problem struct {
	Line int    `json:"line"`
	Msg  string `json:"msg"`
}

func (p Problem) String() string { return fmt.Sprintf("line %d: %s", p.Line, p.Msg) }

// Report is what Verify found.
type Report struct {
	// Lines counts complete lines.
	Lines       int `json:"lines"`
	Checkpoints int `json:"checkpoints"`
	// LastCheckpoint is the line of the last valid checkpoint (0: none).
	LastCheckpoint int `json:"last_checkpoint"`
	// Unsealed counts lines after the last checkpoint: a crash, or a log
	// still being written. No signature covers them: they can be rewritten
	// (with their chain) by anyone who can write the file, and truncating
	// them is only found with a Head.
	Unsealed int `json:"unsealed"`
	// Torn says the last line had no newline (a write cut off by a crash).
	Torn bool `json:"torn"`
	// Recovered lists lines recording torn tails a restart cut off.
	Recovered []int     `json:"recovered,omitempty"`
	Problems  []Problem `json:"problems"`
}

// OK says the log is intact: no problems at all. It may still have an
// unsealed tail (Sealed).
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Sealed says every line is covered by a signed checkpoint.
func (r Report) Sealed() bool { return r.Unsealed == 0 }

// OnlyTorn says the only problem is a torn final line, what a crash
// mid-write leaves.
func (r Report) OnlyTorn() bool { return r.Torn && len(r.Problems) == 1 }

// Verify reads a log and checks its chain, sequence and checkpoints. An
// error means the log could not be read; what is wrong with its content is
// in the Report.
func Verify(rd io.Reader, opts VerifyOptions) (Report, error) {
	var rep Report
	br := bufio.NewReaderSize(rd, 1<<20)
	reported := map[int]bool{}
	problem := func(line int, format string, a ...any) {
		if reported[line] {
			return
		}
		reported[line] = true
		rep.Problems = append(rep.Problems, Problem{Line: line, Msg: fmt.Sprintf(format, a...)})
	}
	var (
		broken    []int // lines whose prev does not match the line before
		prevHash  string
		prevSeqOK = true
		expect    = uint64(1)
		key       = opts.PublicKey
		headSeen  bool
	)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] != '\n' {
			rep.Torn = true
			problem(n, "torn final line: %d bytes without a newline (a write cut off by a crash, or the file truncated mid-line)", len(line))
			break
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return rep, fmt.Errorf("read audit log at line %d: %w", n, err)
		}
		line = line[:len(line)-1]
		rep.Lines = n
		hash := Digest(line)
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Seq == 0 {
			problem(n, "not an audit event (edited or corrupted)")
			prevHash, prevSeqOK = hash, false
			expect++
			continue
		}
		seqOK := ev.Seq == expect
		switch {
		case !seqOK && ev.Seq < expect:
			problem(n, "seq %d where %d was expected: lines reordered or repeated", ev.Seq, expect)
		case !seqOK:
			problem(n, "seq %d where %d was expected: %d line(s) removed before this one, or lines reordered", ev.Seq, expect, ev.Seq-expect)
		}
		expect = max(expect, ev.Seq+1)
		if seqOK && prevSeqOK && ev.Prev != prevHash {
			broken = append(broken, n)
		}
		if opts.Head != nil && ev.Seq == opts.Head.Seq {
			headSeen = true
			if hash != opts.Head.Hash {
				problem(n, "checkpoint seq %d differs from the daemon's head file: edited or rewritten", ev.Seq)
			}
		}
		switch ev.Kind {
		case KindCheckpoint:
			pub, err := hex.DecodeString(ev.PubKey)
			if key == nil && err == nil && len(pub) == ed25519.PublicKeySize {
				key = pub // trust on first use: proves nothing against a rewrite
			}
			sig, err := hex.DecodeString(ev.Sig)
			switch {
			case err != nil || key == nil || !ed25519.Verify(key, checkpointMessage(ev.Seq, ev.Time, ev.Prev), sig):
				problem(n, "checkpoint signature does not verify with the daemon's key: the log was rewritten or this line edited")
			default:
				rep.Checkpoints++
				rep.LastCheckpoint = n
			}
		case KindRecover:
			rep.Recovered = append(rep.Recovered, n)
		}
		if n == 1 && ev.Kind != KindCheckpoint && opts.PublicKey != nil {
			problem(n, "the log does not start with a signed checkpoint: it was rewritten or its start removed")
		}
		prevHash, prevSeqOK = hash, seqOK
	}
	// A broken link at line b means line b-1 changed — unless the links on
	// both sides of a line are broken, which means that line changed
	// (its prev field included).
	for i := 0; i < len(broken); i++ {
		b := broken[i]
		if i+1 < len(broken) && broken[i+1] == b+1 {
			problem(b, "edited: the chain breaks on both sides of this line")
			i++
			continue
		}
		problem(b-1, "edited: its hash does not match the prev recorded on line %d", b)
	}
	if opts.Head != nil && !headSeen {
		problem(rep.Lines+1, "the log ends at line %d but the daemon's head file records a checkpoint at seq %d: the log was truncated", rep.Lines, opts.Head.Seq)
	}
	if rep.Lines > 0 {
		rep.Unsealed = rep.Lines - rep.LastCheckpoint
	}
	slices.SortStableFunc(rep.Problems, func(a, b Problem) int { return a.Line - b.Line })
	return rep, nil
}

// VerifyHead checks a head's own checkpoint signature with key.
func VerifyHead(h Head, key ed25519.PublicKey) error {
	var ev Event
	if err := json.Unmarshal(h.Line, &ev); err != nil {
		return fmt.Errorf("audit head: %w", err)
	}
	sig, err := hex.DecodeString(ev.Sig)
	if err != nil || ev.Seq != h.Seq || Digest(bytes.TrimSpace(h.Line)) != h.Hash || !ed25519.Verify(key, checkpointMessage(ev.Seq, ev.Time, ev.Prev), sig) {
		return errors.New("audit head: signature does not verify with the key")
	}
	return nil
}
