package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestDigestKinds: pauses record BLAKE3-256 (a known answer for the empty
// file); an older pause's bare SHA-256 is checked as SHA-256; a digest of
// a kind not known is refused, as is a SHA-256 that does not match.
func TestDigestKinds(t *testing.T) {
	dir := t.TempDir()
	img := []byte("pages of a paused sandbox\n")
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), img, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sums, n, err := digestDir(dir)
	if err != nil || n != int64(len(img)) {
		t.Fatalf("digestDir: %v %d", err, n)
	}
	if want := "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"; sums["empty"] != want {
		t.Fatalf("the empty file's digest is %s, want %s", sums["empty"], want)
	}
	if err := checkDigests(dir, sums); err != nil {
		t.Fatalf("its own digests: %v", err)
	}
	old := sha256.Sum256(img)
	empty := sha256.Sum256(nil)
	legacy := map[string]string{"pages.img": hex.EncodeToString(old[:]), "empty": hex.EncodeToString(empty[:])}
	if err := checkDigests(dir, legacy); err != nil {
		t.Fatalf("an older pause's SHA-256: %v", err)
	}
	legacy["pages.img"] = hex.EncodeToString(empty[:])
	if err := checkDigests(dir, legacy); err == nil || !strings.Contains(err.Error(), "pages.img has digest") {
		t.Fatalf("a SHA-256 that does not match: %v", err)
	}
	sums["pages.img"] = "sha512:" + strings.Repeat("0", 128)
	if err := checkDigests(dir, sums); err == nil || !strings.Contains(err.Error(), "does not know") {
		t.Fatalf("a digest of an unknown kind: %v", err)
	}
}

// TestResumeOlderDigests: a sandbox paused by an airlock that recorded
// SHA-256 digests resumes after an upgrade; its image changed is refused
// all the same.
func TestResumeOlderDigests(t *testing.T) {
	for _, tampered := range []bool{false, true} {
		ctx := context.Background()
		dir := t.TempDir()
		drv := &fake.Driver{Pausable: true, DriverName: "native"}
		clk := &clock{now: time.Now()}
		sup, st := pauseFixture(t, dir, drv, clk)
		in, err := sup.Create(ctx, alice, CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := sup.Pause(ctx, alice, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d := p.Paused.Digests["image"]; !strings.HasPrefix(d, "blake3:") {
			t.Fatalf("a pause recorded %q", d)
		}
		if err := sup.Detach(ctx); err != nil {
			t.Fatal(err)
		}
		// What an airlock before decision 74 recorded: SHA-256, bare hex.
		path := filepath.Join(dir, "paused", in.ID, "image")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if _, err := st.UpdateSandbox(in.ID, func(r *store.Sandbox) error {
			r.Paused.Digests = map[string]string{"image": hex.EncodeToString(sum[:])}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if tampered {
			if err := os.WriteFile(path, append(b, 'x'), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		st.Close()
		sup2, _ := pauseFixture(t, dir, drv, clk)
		if _, err := sup2.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = sup2.Resume(ctx, alice, in.ID)
		switch {
		case tampered && (!errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "changed or cut short")):
			t.Fatalf("resume of a changed image with an older digest: %v", err)
		case !tampered && err != nil:
			t.Fatalf("resume with an older digest: %v", err)
		case !tampered:
			if _, err := sup2.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"true"}}); err != nil {
				t.Fatal(err)
			}
		}
		sup2.Close(ctx)
	}
}
