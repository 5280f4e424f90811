package e2b

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"
)

// This file is envd's /files: GET downloads one file (gzip when asked),
// POST uploads one or more, as multipart/form-data (a part named "file"
// per file, its filename the path) or as one application/octet-stream body
// (gzip when Content-Encoding says). The user a caller names (username) is
// ignored: the sandbox has one unprivileged user.

// filePath checks a /files path; the connect errors of absPath become
// E2B's 400.
func filePath(ctx context.Context, p string) (string, error) {
	if p == "" {
		return "", errorf(http.StatusBadRequest, "path: give the file's path in the sandbox")
	}
	ap, err := absPath(ctx, p)
	var ce *connect.Error
	if errors.As(err, &ce) {
		return "", errorf(http.StatusBadRequest, "%s", ce.Message())
	}
	return ap, err
}

func (h *Handler) readFile(w http.ResponseWriter, r *http.Request, t *target) error {
	p, err := filePath(r.Context(), r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	f, done, err := h.sup.Files(r.Context(), t.c.sup, t.info.ID)
	if err != nil {
		return err
	}
	defer done()
	fi, err := f.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	if fi.Type == "dir" {
		return errorf(http.StatusBadRequest, "path %q is a directory: list it with files.list", truncate(p, 200))
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	var out io.Writer = w
	var gz *gzip.Writer
	if acceptsGzip(r) {
		hd.Set("Content-Encoding", "gzip")
		hd.Add("Vary", "Accept-Encoding")
		gz = gzip.NewWriter(w)
		out = gz
	} else {
		hd.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	}
	// The status goes out with the first byte: a file that cannot be
	// opened is still a clean error.
	lw := &lazyWriter{w: w, out: out}
	if err := f.ReadFile(r.Context(), p, 0, fi.Size, lw); err != nil {
		if !lw.started {
			hd.Del("Content-Encoding")
			hd.Del("Content-Length")
			return err
		}
		h.log.Warn("e2b read file: the stream broke", "sandbox_id", t.info.ID, "err", err)
		panic(http.ErrAbortHandler) // the client sees a cut body, not a whole one
	}
	if !lw.started {
		w.WriteHeader(http.StatusOK)
	}
	if gz != nil {
		_ = gz.Close()
	}
	return nil
}

// lazyWriter sends the status line with the first byte.
type lazyWriter struct {
	w       http.ResponseWriter
	out     io.Writer
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.WriteHeader(http.StatusOK)
	}
	return l.out.Write(p)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}

// writtenFile is one entry of an upload's answer.
type writtenFile struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// limitedReader fails with a too-large error past n bytes.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errorf(http.StatusRequestEntityTooLarge, "the file is larger than the %d bytes an upload may hold", l.n)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n <= 0 && err == nil {
		// One byte more would be past the limit: look for it.
		var b [1]byte
		if m, _ := l.r.Read(b[:]); m > 0 {
			return n, errorf(http.StatusRequestEntityTooLarge, "the file is larger than the %d bytes an upload may hold; write it in parts, or compress it", l.n+int64(n))
		}
	}
	return n, err
}

func (h *Handler) writeFiles(w http.ResponseWriter, r *http.Request, t *target) error {
	max := h.opts.MaxUpload
	body := http.MaxBytesReader(w, r.Body, max+1<<20)
	qpath := r.URL.Query().Get("path")
	f, done, err := h.sup.Files(r.Context(), t.c.sup, t.info.ID)
	if err != nil {
		return err
	}
	defer done()
	write := func(p string, data io.Reader) (writtenFile, error) {
		ap, err := filePath(r.Context(), p)
		if err != nil {
			return writtenFile{}, err
		}
		if err := h.ensureParent(r.Context(), f, ap); err != nil {
			return writtenFile{}, err
		}
		if err := f.WriteFile(r.Context(), ap, &limitedReader{r: data, n: max}, 0o644); err != nil {
			return writtenFile{}, err
		}
		return writtenFile{Path: ap, Name: path.Base(ap), Type: "file"}, nil
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []writtenFile
	switch {
	case mt == "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextRawPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return tooLarge(err, "read the multipart body: %v", err)
			}
			if part.FormName() != "file" {
				continue
			}
			// The part's filename is the file's whole path (FileName()
			// would keep only its last element).
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			p := qpath
			if p == "" || len(out) > 0 {
				p = dp["filename"]
			}
			wf, err := write(p, part)
			if err != nil {
				return uploadError(err)
			}
			out = append(out, wf)
		}
		if len(out) == 0 {
			return errorf(http.StatusBadRequest, "the multipart body has no part named file")
		}
	case mt == "application/octet-stream" || mt == "":
		var data io.Reader = body
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
		case "gzip":
			gz, err := gzip.NewReader(body)
			if err != nil {
				return tooLarge(err, "the body is not gzip: %v", err)
			}
			defer gz.Close()
			data = gz
		default:
			return errorf(http.StatusBadRequest, "Content-Encoding %q: send the file as it is, or gzip", truncate(enc, 40))
		}
		wf, err := write(qpath, data)
		if err != nil {
			return uploadError(err)
		}
		out = append(out, wf)
	default:
		return errorf(http.StatusBadRequest, "Content-Type %q: send multipart/form-data or application/octet-stream", truncate(mt, 80))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// tooLarge turns a body that passed its bound into 413, a body that
// could not be read into 400, and keeps the file API's errors.
func tooLarge(err error, format string, args ...any) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errorf(http.StatusRequestEntityTooLarge, "the upload is larger than the %d bytes this daemon takes in one request; write it in parts", mbe.Limit)
	}
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	return errorf(http.StatusBadRequest, format, args...)
}

// uploadError is the error of a write that failed: the upload's own
// (too large, not gzip) or the file API's, whose class says the status.
func uploadError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge(err, "")
	}
	if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
		return errorf(http.StatusBadRequest, "the gzip body is damaged: %v", err)
	}
	return err
}
