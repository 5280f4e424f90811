package termsafe

import (
	"bytes"
	"testing"
)

func TestText(t *testing.T) {
	for _, tc := range []struct {
		name, in, text, nameOut string
	}{
		{name: "plain", in: "line1\n\tx = 1 → ünïcode 日本\n", text: "line1\n\tx = 1 → ünïcode 日本\n", nameOut: "line1⟨U+000A⟩⟨U+0009⟩x = 1 → ünïcode 日本⟨U+000A⟩"},
		// The review's N4: a title, a cursor move and a line erase.
		{name: "escapes", in: "\x1b]0;PWNED-TITLE\x07\x1b[1A\x1b[2Kharmless", text: "⟨U+001B⟩]0;PWNED-TITLE⟨U+0007⟩⟨U+001B⟩[1A⟨U+001B⟩[2Kharmless"},
		{name: "CR and backspace", in: "a\rb\bc", text: "a⟨U+000D⟩b⟨U+0008⟩c"},
		{name: "DEL and NUL", in: "\x7f\x00", text: "⟨U+007F⟩⟨U+0000⟩"},
		{name: "C1 CSI", in: "\u009b2J", text: "⟨U+009B⟩2J"},
		{name: "a C1 byte that is not UTF-8", in: "a\x9b2J", text: "a⟨0x9B⟩2J"},
		{name: "bidi override and isolate", in: "ab\u202edc\u2066x\u2069", text: "ab⟨U+202E⟩dc⟨U+2066⟩x⟨U+2069⟩"},
		{name: "zero width", in: "a\u200bb\u200dc\ufeffd\u200fe", text: "a⟨U+200B⟩b⟨U+200D⟩c⟨U+FEFF⟩d⟨U+200F⟩e"},
		{name: "separators", in: "a\u2028b\u2029c", text: "a⟨U+2028⟩b⟨U+2029⟩c"},
		{name: "private use and unassigned", in: "\ue000\U000effff", text: "⟨U+E000⟩⟨U+EFFFF⟩"},
		{name: "spaces stay", in: "a\u00a0b\u3000c", text: "a\u00a0b\u3000c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text(tc.in); got != tc.text {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.text)
			}
			if got := Text(Text(tc.in)); got != tc.text {
				t.Errorf("Text twice = %q, want %q", got, tc.text)
			}
			want := tc.nameOut
			if want == "" {
				want = tc.text
			}
			if got := Name(tc.in); got != want {
				t.Errorf("Name(%q) = %q, want %q", tc.in, got, want)
			}
			for _, r := range Text(tc.in) {
				if r != '\n' && r != '\t' && Hidden(r) {
					t.Errorf("Text(%q) left %U", tc.in, r)
				}
			}
		})
	}
	if n := Count("a\x1b[2K\u202e\n\t\xff"); n != 3 {
		t.Errorf("Count = %d, want 3", n)
	}
}

func TestJSON(t *testing.T) {
	in := "{\"path\":\"a\x1b[2K\u202eb\tc\U0001F600 \U000E0001\"}\n"
	want := `{"path":"a\u001b[2K\u202eb\u0009c` + "\U0001F600" + ` \udb40\udc01"}` + "\n"
	if got := JSON(in); got != want {
		t.Errorf("JSON = %q, want %q", got, want)
	}
}

func TestWriter(t *testing.T) {
	in := []byte("ok é\x1b[2K日本\u202e!\n")
	// Every way of cutting the stream in two renders it as Text does.
	for cut := 0; cut <= len(in); cut++ {
		var out bytes.Buffer
		w := NewWriter(&out)
		for _, part := range [][]byte{in[:cut], in[cut:]} {
			if n, err := w.Write(part); err != nil || n != len(part) {
				t.Fatalf("write: %d %v", n, err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if want := Text(string(in)); out.String() != want {
			t.Errorf("cut at %d: %q, want %q", cut, out.String(), want)
		}
	}
	// A character that never completes is marked at the end.
	var out bytes.Buffer
	w := NewWriter(&out)
	_, _ = w.Write([]byte("a\xe6\x97"))
	_ = w.Close()
	if out.String() != "a⟨0xE6⟩⟨0x97⟩" {
		t.Errorf("incomplete: %q", out.String())
	}
}
