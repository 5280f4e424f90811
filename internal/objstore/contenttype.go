package objstore

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
)

// SniffLen is how much of a file's start DetectType reads.
const SniffLen = 4096

// DetectType says what content type a file's first bytes (up to
// SniffLen; all of a shorter file) are, never looking at its name:
// net/http.DetectContentType (the WHATWG sniffing rules: images, PDF,
// archives, audio, video, fonts, HTML, XML, text), and what those rules
// leave as plain text or octets: programs (ELF, Mach-O, PE, scripts with
// #!), JSON, and CSV. The result is a media type without parameters for
// binary types, with its charset for text.
func DetectType(head []byte) string {
	if len(head) > SniffLen {
		head = head[:SniffLen]
	}
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "application/x-executable"
	case bytes.HasPrefix(head, []byte("MZ")):
		return "application/vnd.microsoft.portable-executable"
	case bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xce}), bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xcf}),
		bytes.HasPrefix(head, []byte{0xce, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(head, []byte{0xcf, 0xfa, 0xed, 0xfe}):
		return "application/x-mach-binary"
	case bytes.HasPrefix(head, []byte("\x00asm")):
		return "application/wasm"
	case bytes.HasPrefix(head, []byte("#!")):
		return "text/x-script"
	}
	t := http.DetectContentType(head)
	if !strings.HasPrefix(t, "text/plain") {
		return t
	}
	trimmed := bytes.TrimSpace(head)
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') && jsonStart(head) {
		return "application/json"
	}
	if isCSV(head) {
		return "text/csv; charset=utf-8"
	}
	return t
}

// jsonStart reports whether b starts a JSON value: its tokens are valid as
// far as b goes (a file longer than b may go on past it).
func jsonStart(b []byte) bool {
	d := json.NewDecoder(bytes.NewReader(b))
	n := 0
	for {
		_, err := d.Token()
		if err == io.EOF {
			return n > 0
		}
		if err != nil {
			// Cut off in the middle of a token is fine; a syntax error
			// before the end is not.
			return n > 1 && d.InputOffset() >= int64(len(b))-256
		}
		n++
	}
}

// isCSV reports whether b's whole lines are comma-separated records of the
// same number of fields, at least two fields and two lines.
func isCSV(b []byte) bool {
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 && len(b) == SniffLen {
		b = b[:i+1] // the last line may be cut off
	}
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = 0 // every record as long as the first
	lines := 0
	fields := 0
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return false
		}
		fields = len(rec)
		lines++
	}
	return lines >= 2 && fields >= 2
}

// TypeAllowed reports whether content type t (as DetectType says it) is
// one of allowed: a media type ("text/csv"), or a type's every subtype
// ("image/*"). Parameters (a charset) do not matter.
func TypeAllowed(t string, allowed []string) bool {
	mt, _, err := mime.ParseMediaType(t)
	if err != nil {
		return false
	}
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSpace(a))
		if a == mt {
			return true
		}
		if p, ok := strings.CutSuffix(a, "/*"); ok && strings.HasPrefix(mt, p+"/") {
			return true
		}
	}
	return false
}

// CheckAllowed checks an allowlist's entries: each a media type or
// "type/*".
func CheckAllowed(allowed []string) error {
	for _, a := range allowed {
		mt, params, err := mime.ParseMediaType(a)
		if err != nil || len(params) > 0 || mt != a || strings.Count(mt, "/") != 1 || mt == "*/*" || strings.HasPrefix(mt, "*/") {
			return &typeError{a}
		}
	}
	return nil
}

type typeError struct{ t string }

func (e *typeError) Error() string {
	return "content type " + `"` + e.t + `"` + ": give a lower-case media type like text/csv, or a type's every subtype like image/*"
}
