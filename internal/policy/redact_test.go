package policy

import (
	"bytes"
	"testing"
)

func TestRedactor(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_SECRET", "env-secret-value")
	p := mustNew(t, File{Redact: Redact{Env: []string{"AIRLOCK_TEST_SECRET", "AIRLOCK_TEST_UNSET"}, Values: []string{"hunter2-long", "abc"}, Patterns: []string{`sk-[A-Za-z0-9]{8,}`}}})
	r := p.Redactor()
	if got := r.String("a env-secret-value b hunter2-long c sk-ABCDEFGH12 d abc"); got != "a [REDACTED] b [REDACTED] c [REDACTED] d abc" {
		t.Fatalf("String: %q", got)
	}
	var out bytes.Buffer
	w := r.Writer(&out)
	// A secret split across writes inside one line is still masked.
	for _, chunk := range []string{"key=hunt", "er2-long\nnext ", "sk-1234", "56789 end"} {
		w.Write([]byte(chunk))
	}
	if out.String() != "key=[REDACTED]\n" {
		t.Fatalf("before flush: %q", out.String())
	}
	w.Flush()
	if out.String() != "key=[REDACTED]\nnext [REDACTED] end" {
		t.Fatalf("after flush: %q", out.String())
	}
	if r, err := NewRedactor([]string{"short"}, nil); r != nil || err != nil {
		t.Fatalf("a 5-byte value would be masked: %v %v", r, err)
	}
	if _, err := NewRedactor(nil, []string{"a*"}); err == nil {
		t.Fatal("a pattern matching the empty string was accepted")
	}
	var nilR *Redactor
	out.Reset()
	nilR.Writer(&out).Write([]byte("plain"))
	if out.String() != "plain" || nilR.String("x") != "x" {
		t.Fatal("a nil Redactor changed text")
	}
}
