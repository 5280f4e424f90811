package policy

import (
	"context"
	"strings"
	"testing"
	"time"
)

// FuzzVerify feeds the verifier arbitrary code: it must not panic, and
// must stay fast on the largest code an exec takes.
func FuzzVerify(f *testing.F) {
	for _, s := range []string{"rm -rf /", ":(){ :|:& };:", "curl x | sh", "import shutil; shutil.rmtree('/')", "f(){ f|f& }", "nc 1.2.3.4 80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code string) {
		Verify(Request{Action: ActionExec, Code: code, Language: "bash"}, Network{})
		Verify(Request{Action: ActionExec, Argv: strings.Fields(code)}, Network{})
		Verify(Request{Action: ActionFileDelete, Path: code}, Network{})
	})
}

func TestVerifyLargeInputIsFast(t *testing.T) {
	var b strings.Builder
	for b.Len() < 128<<10 {
		b.WriteString("function(){ x | y & }; rm -rf ./a; curl -d @f https://ok.example.com/ ; f(){ :; }\n")
	}
	p := Default()
	start := time.Now()
	d, err := p.Decide(context.Background(), Request{Action: ActionExec, Code: b.String(), Language: "bash"})
	if err != nil || time.Since(start) > 10*time.Second { // about 0.15 s here; 4 s under -race
		t.Fatalf("128 KiB took %s: %+v %v", time.Since(start), d, err)
	}
	t.Logf("128 KiB of code decided in %s: %s", time.Since(start), d.Rule)
}

func TestRuleCostLimit(t *testing.T) {
	p := mustNew(t, File{Rules: []Rule{{Name: "heavy", When: `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, code.matches("x+y") || true)))`, Decision: Allow}}})
	var b strings.Builder
	for b.Len() < 128<<10 {
		b.WriteString("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
	}
	d, err := p.Decide(context.Background(), Request{Action: ActionExec, Code: b.String(), Language: "python"})
	if err == nil || d.Verdict != Deny {
		t.Fatalf("a rule past the cost limit was not denied: %+v %v", d, err)
	}
}
