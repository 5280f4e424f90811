package objstore

import (
	"strings"
	"testing"
)

// TestDetectType: types come from the bytes alone, including what
// net/http's sniffing leaves as text or octets.
func TestDetectType(t *testing.T) {
	for _, c := range []struct {
		name string
		b    string
		want string
	}{
		{"png", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image/png"},
		{"pdf", "%PDF-1.7\n1 0 obj\n", "application/pdf"},
		{"elf", "\x7fELF\x02\x01\x01\x00\x00\x00", "application/x-executable"},
		{"pe", "MZ\x90\x00\x03\x00\x00\x00", "application/vnd.microsoft.portable-executable"},
		{"macho", "\xcf\xfa\xed\xfe\x07\x00\x00\x01", "application/x-mach-binary"},
		{"wasm", "\x00asm\x01\x00\x00\x00", "application/wasm"},
		{"script", "#!/bin/sh\necho hi\n", "text/x-script"},
		{"csv", "a,b,c\n1,2,3\n4,5,6\n", "text/csv; charset=utf-8"},
		{"csv quoted", "name,note\n\"x, y\",2\n", "text/csv; charset=utf-8"},
		{"prose with commas", "Hello, world.\nThis line, and this, differ.\nOne\n", "text/plain; charset=utf-8"},
		{"one csv line", "a,b,c\n", "text/plain; charset=utf-8"},
		{"json", "{\"a\": [1, 2, {\"b\": null}]}", "application/json"},
		{"json cut off", "[1, 2, 3, " + strings.Repeat("4, ", 2000), "application/json"},
		{"not json", "{ this is not json }\n", "text/plain; charset=utf-8"},
		{"html", "<!DOCTYPE html><html><body>x</body></html>", "text/html; charset=utf-8"},
		{"zip", "PK\x03\x04\x14\x00\x00\x00", "application/zip"},
		{"gzip", "\x1f\x8b\x08\x00\x00\x00\x00\x00", "application/x-gzip"},
		{"empty", "", "text/plain; charset=utf-8"},
		{"binary", "\x00\x01\x02\x03\xff\xfe", "application/octet-stream"},
	} {
		if got := DetectType([]byte(c.b)); got != c.want {
			t.Errorf("%s: DetectType = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestTypeAllowed(t *testing.T) {
	allowed := []string{"text/csv", "image/*", "application/pdf"}
	for _, c := range []struct {
		t  string
		ok bool
	}{
		{"text/csv; charset=utf-8", true},
		{"image/png", true},
		{"image/webp", true},
		{"application/pdf", true},
		{"text/plain; charset=utf-8", false},
		{"application/x-executable", false},
		{"imagery/png", false},
		{"", false},
	} {
		if got := TypeAllowed(c.t, allowed); got != c.ok {
			t.Errorf("TypeAllowed(%q) = %v, want %v", c.t, got, c.ok)
		}
	}
	if err := CheckAllowed(allowed); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"*/*", "*/png", "text", "Text/CSV", "text/csv; charset=utf-8", "a/b/c", ""} {
		if err := CheckAllowed([]string{bad}); err == nil {
			t.Errorf("CheckAllowed(%q) passed", bad)
		}
	}
}

func TestCheckBucket(t *testing.T) {
	for _, ok := range []string{"agent-outputs", "a.b.c", "abc"} {
		if err := CheckBucket(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "ab", "Agent", "a..b", "-ab", "ab-", "a/b", strings.Repeat("a", 64)} {
		if err := CheckBucket(bad); err == nil {
			t.Errorf("%q passed", bad)
		}
	}
}

// TestNewNeedsCredentials: with none in the config and none in the
// environment, New says where to put them; the environment's are used.
func TestNewNeedsCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := New(Config{Endpoint: "http://127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("New without credentials: %v", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	if _, err := New(Config{Endpoint: "http://127.0.0.1:1"}); err != nil {
		t.Fatalf("New with the environment's credentials: %v", err)
	}
	if _, err := New(Config{Endpoint: "ftp://x", AccessKeyID: "k", SecretAccessKey: "s"}); err == nil {
		t.Fatal("an ftp endpoint passed")
	}
}
