package api

import (
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// maxFileBody bounds one file upload (the sandbox's disk quota bounds it
// further).
const maxFileBody = 1 << 30

// maxPath is the longest path the file API accepts.
const maxPath = 4096

// CheckPath checks a path given to the file API: absolute inside the
// sandbox or relative to /workspace, valid UTF-8, no NUL, no ".."
// component, at most 4096 bytes. The agent resolves the path inside the
// sandbox's root as well; this refuses the obvious attempts early with a
// clear message.
func CheckPath(p string) error {
	switch {
	case p == "":
		return badRequest("path: give a path inside the sandbox")
	case len(p) > maxPath:
		return badRequest("path: at most %d bytes", maxPath)
	case !utf8.ValidString(p):
		return badRequest("path: not valid UTF-8")
	case strings.IndexByte(p, 0) >= 0:
		return badRequest("path: contains a NUL byte")
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return &Error{Status: http.StatusBadRequest, Code: "path_outside", Message: "path " + strconv.Quote(truncate(p, 200)) + ": \"..\" is not allowed; give a path inside the sandbox"}
		}
	}
	return nil
}

// queryPath reads and checks the path query parameter.
func queryPath(r *http.Request, name string) (string, error) {
	p := r.URL.Query().Get(name)
	if err := CheckPath(p); err != nil {
		return "", err
	}
	return p, nil
}

func (s *Server) files(r *http.Request, c *caller) (sandbox.Files, func(), error) {
	id, err := sandboxID(r)
	if err != nil {
		return nil, nil, err
	}
	return s.sup.Files(r.Context(), c.sup, id)
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request, c *caller) error {
	p, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var off, limit int64
	if v := q.Get("offset"); v != "" {
		if off, err = strconv.ParseInt(v, 10, 64); err != nil || off < 0 {
			return badRequest("offset: give a non-negative number of bytes")
		}
	}
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.ParseInt(v, 10, 64); err != nil || limit < 0 {
			return badRequest("limit: give a non-negative number of bytes")
		}
	}
	f, done, err := s.files(r, c)
	if err != nil {
		return err
	}
	defer done()
	// Stat first, so that a missing file is a clean 404 rather than a
	// broken body.
	fi, err := f.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	if fi.Type == "dir" {
		return &Error{Status: http.StatusBadRequest, Code: "is_directory", Message: "path " + strconv.Quote(truncate(p, 200)) + " is a directory; use files/list or archive"}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	lw := &lazyWriter{w: w}
	if err := f.ReadFile(r.Context(), p, off, limit, lw); err != nil {
		if !lw.started {
			return err
		}
		s.log.Warn("read file: stream broke", "err", err)
		panic(http.ErrAbortHandler) // the client sees a cut body, not a whole one
	}
	if !lw.started {
		w.WriteHeader(http.StatusOK)
	}
	return nil
}

// lazyWriter sends the status line with the first byte.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, c *caller) error {
	p, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	mode, err := permBits(r.URL.Query().Get("mode"), 0o644)
	if err != nil {
		return err
	}
	f, done, err := s.files(r, c)
	if err != nil {
		return err
	}
	defer done()
	if err := f.WriteFile(r.Context(), p, http.MaxBytesReader(w, r.Body, maxFileBody), mode); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, c *caller) error {
	p, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	f, done, err := s.files(r, c)
	if err != nil {
		return err
	}
	defer done()
	if err := f.Remove(r.Context(), p); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// FileList is the body of GET …/files/list.
type FileList struct {
	Entries []sandbox.FileInfo `json:"entries"`
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, c *caller) error {
	p, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	f, done, err := s.files(r, c)
	if err != nil {
		return err
	}
	defer done()
	ents, err := f.ReadDir(r.Context(), p)
	if err != nil {
		return err
	}
	if ents == nil {
		ents = []sandbox.FileInfo{}
	}
	writeJSON(w, http.StatusOK, FileList{Entries: ents})
	return nil
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request, c *caller) error {
	p, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	f, done, err := s.files(r, c)
	if err != nil {
		return err
	}
	defer done()
	fi, err := f.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fi)
	return nil
}

// MkdirRequest is the body of POST …/files/mkdir.
type MkdirRequest struct {
	Path string `json:"path"`
	// Mode is octal permission bits ("755"); empty means 755.
	Mode string `json:"mode,omitempty"`
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request, c *caller) error {
	var body MkdirRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	if err := CheckPath(body.Path); err != nil {
		return err
	}
	mode, err := permBits(body.Mode, 0o755)
	if err != nil {
		return err
	}
	f, done, err := s.files(r, c)
	if err != nil {
		return err
	}
	defer done()
	if err := f.Mkdir(r.Context(), body.Path, mode); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// MoveRequest is the body of POST …/files/move.
type MoveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func (s *Server) moveFile(w http.ResponseWriter, r *http.Request, c *caller) error {
	var body MoveRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	if err := CheckPath(body.From); err != nil {
		return err
	}
	if err := CheckPath(body.To); err != nil {
		return err
	}
	f, done, err := s.files(r, c)
	if err != nil {
		return err
	}
	defer done()
	if err := f.Rename(r.Context(), body.From, body.To); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// permBits reads a file mode given as octal permission bits ("644"), the
// only bits a caller may set (no setuid, setgid or sticky); empty means def.
func permBits(v string, def fs.FileMode) (fs.FileMode, error) {
	if v == "" {
		return def, nil
	}
	m, err := strconv.ParseUint(v, 8, 32)
	if err != nil || m > 0o777 {
		return 0, badRequest("mode %q: give octal permission bits like %o", truncate(v, 20), def)
	}
	return fs.FileMode(m), nil
}
