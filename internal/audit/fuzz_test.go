package audit

import (
	"bytes"
	"crypto/ed25519"
	"testing"
)

// FuzzVerify feeds Verify arbitrary logs: it must not panic, and a log it
// calls intact must have no torn line.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"seq":1,"time":"2026-01-01T00:00:00Z","kind":"checkpoint","prev":""}` + "\n"))
	f.Add([]byte(`{"seq":1,"kind":"exec","prev":""}` + "\n" + `{"seq":3,"kind":"exec","prev":"x"}`))
	f.Add([]byte("\n\n{}"))
	pub := make(ed25519.PublicKey, ed25519.PublicKeySize)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, o := range []VerifyOptions{{}, {PublicKey: pub}, {Head: &Head{Seq: 2}}} {
			rep, err := Verify(bytes.NewReader(b), o)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() && rep.Torn {
				t.Fatal("a torn log was called intact")
			}
		}
	})
}
