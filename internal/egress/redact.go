package egress

import (
	"bytes"
	"io"
	"net/http"
)

// redactBody wraps the body of an answer from a host with secrets so
// that each secret's value in it reaches the sandbox as as many "*": the
// same length, so Content-Length holds. Only an identity-encoded body can
// be seen into; a compressed one passes as it is (the README says so).
func redactBody(resp *http.Response, secrets []compiledSecret) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return
	}
	var vals [][]byte
	for _, sec := range secrets {
		if sec.Value != "" {
			vals = append(vals, []byte(sec.Value))
		}
	}
	if len(vals) == 0 {
		return
	}
	resp.Body = &redactor{r: resp.Body, vals: vals}
}

// redactor masks vals in what it reads, holding back the last bytes of
// each read that could begin a value.
type redactor struct {
	r       io.ReadCloser
	vals    [][]byte
	pending []byte // read, masked, not handed out yet
	ready   int    // how many of pending may be handed out
	err     error
	buf     []byte
}

func (x *redactor) Read(p []byte) (int, error) {
	for x.ready == 0 {
		if x.err != nil {
			if len(x.pending) == 0 {
				return 0, x.err
			}
			x.ready = len(x.pending)
			break
		}
		if x.buf == nil {
			x.buf = make([]byte, 64<<10)
		}
		n, err := x.r.Read(x.buf)
		x.pending = append(x.pending, x.buf[:n]...)
		x.err = err
		keep := 0
		for _, v := range x.vals {
			for i := 0; ; {
				j := bytes.Index(x.pending[i:], v)
				if j < 0 {
					break
				}
				copy(x.pending[i+j:], bytes.Repeat([]byte("*"), len(v)))
				i += j + len(v)
			}
			keep = max(keep, len(v)-1)
		}
		x.ready = max(len(x.pending)-keep, 0)
	}
	n := copy(p, x.pending[:x.ready])
	x.pending = x.pending[n:]
	x.ready -= n
	return n, nil
}

func (x *redactor) Close() error { return x.r.Close() }
