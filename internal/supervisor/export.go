package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ErrTypeRefused is what an export of content its template does not allow
// wraps.
var ErrTypeRefused = errors.New("content type not allowed")

// ExportRequest stores a sandbox's file, or every file of a directory
// tree, in the object store.
type ExportRequest struct {
	Sandbox string
	// Path is the file or directory in the sandbox.
	Path string
	// To is where: "s3://BUCKET/KEY" for a file (a KEY ending in "/", or
	// none, puts the file's name after it), "s3://BUCKET/PREFIX/" for a
	// directory (each file under PREFIX/ at its path below the directory).
	To string
	// Exec is the exec the files come from, named in the objects'
	// metadata and the audit log ("" when none is named).
	Exec string
}

// ExportedObject is one stored file.
type ExportedObject struct {
	// Path is the file in the sandbox; Object where it is stored.
	Path   string `json:"path"`
	Object string `json:"object"`
	Size   int64  `json:"size"`
	// ContentType is what its bytes are (and the object's Content-Type).
	ContentType string `json:"content_type"`
	// SHA256 is the content's digest (hex).
	SHA256 string `json:"sha256"`
	// URL downloads it without credentials until Expires, when the
	// daemon's config asks for one.
	URL     string     `json:"url,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
}

// ExportResult lists what an export stored.
type ExportResult struct {
	Objects []ExportedObject `json:"objects"`
	Bytes   int64            `json:"bytes"`
	// Skipped names what a tree held that is not a regular file (symlinks,
	// devices): not exported.
	Skipped []string `json:"skipped,omitempty"`
}

// maxExportFiles bounds the files of one export.
const maxExportFiles = 10000

var execIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// parseS3 splits "s3://bucket/key" into the bucket and the key.
func parseS3(u string) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(u, "s3://")
	if !ok {
		return "", "", fmt.Errorf("%w: destination %q: give s3://BUCKET/PREFIX/", sandbox.ErrInvalid, u)
	}
	bucket, key, _ = strings.Cut(rest, "/")
	if err := objstore.CheckBucket(bucket); err != nil {
		return "", "", err
	}
	if err := checkKey(key); err != nil {
		return "", "", err
	}
	return bucket, key, nil
}

// checkKey checks an object key (or a prefix, ending in "/"): at most 900
// bytes, no NUL, no empty element (a leading "/", a "//"; a final "/" is
// a prefix), no . or .. element.
func checkKey(key string) error {
	if len(key) > 900 || strings.Contains(key, "\x00") {
		return fmt.Errorf("%w: destination key %q: at most 900 bytes, no NUL", sandbox.ErrInvalid, key)
	}
	els := strings.Split(key, "/")
	for i, el := range els {
		switch {
		case el == "" && i < len(els)-1:
			return fmt.Errorf("%w: destination key %q: no empty path elements (a leading / or a //)", sandbox.ErrInvalid, key)
		case el == "." || el == "..":
			return fmt.Errorf("%w: destination key %q: no . or .. elements", sandbox.ErrInvalid, key)
		}
	}
	return nil
}

// exportFile is one file to store.
type exportFile struct {
	path, key string
	size      int64
}

// Export streams a sandbox's file, or every regular file of a directory
// tree, to the object store: each file's content type is found from its
// bytes and checked against the template's export_types, its size against
// export_max, before anything is stored; each object names the sandbox,
// the exec and the path in its metadata; each stored file is an audit
// event with its digest. When any file fails, the objects this export
// stored are removed and the export fails: it is done whole or not at all.
func (s *Supervisor) Export(ctx context.Context, c Caller, r ExportRequest) (ExportResult, error) {
	var res ExportResult
	if s.opts.Objects == nil || len(s.cfg.Export.Buckets) == 0 {
		return res, &sandbox.UnsupportedError{What: "export", Why: "this daemon has no object store to export to", Fix: "name the store in [object_store] and the buckets exports may use in [export] buckets of the daemon's config file"}
	}
	bucket, key, err := parseS3(r.To)
	if err != nil {
		return res, err
	}
	if err := s.exportPlaceOf(bucket, key); err != nil {
		return res, err
	}
	if r.Exec != "" && !execIDPattern.MatchString(r.Exec) {
		return res, fmt.Errorf("%w: exec %q: give an exec's id", sandbox.ErrInvalid, r.Exec)
	}
	if !strings.HasPrefix(r.Path, "/") {
		return res, fmt.Errorf("%w: path %q: give an absolute path in the sandbox, like /workspace/out.csv", sandbox.ErrInvalid, r.Path)
	}
	l, err := s.lookup(c, r.Sandbox)
	if err != nil {
		return res, err
	}
	t, ok := s.templates[l.rec.Template]
	if !ok || len(t.ExportTypes) == 0 {
		return res, fmt.Errorf("template %q allows no export (it has no export_types): %w", l.rec.Template, ErrForbidden)
	}
	files, done, err := s.Files(ctx, c, r.Sandbox)
	if err != nil {
		return res, err
	}
	defer done()
	todo, skipped, err := exportPlan(ctx, files, path.Clean(r.Path), key)
	if err != nil {
		return res, err
	}
	res.Skipped = skipped
	for _, f := range todo {
		if err := s.exportPlaceOf(bucket, f.key); err != nil {
			return res, err
		}
	}
	// Every file is checked before any is stored.
	types := make([]string, len(todo))
	for i, f := range todo {
		if f.size > int64(t.ExportMax) {
			return res, s.exportRefused(ctx, c, l.rec.ID, l.rec.Template, r.Exec, f.path, "", fmt.Errorf("%s is %d bytes, over the export limit of %d (template %q, export_max): %w", f.path, f.size, int64(t.ExportMax), l.rec.Template, objstore.ErrTooLarge))
		}
		var head headBuffer
		if err := files.ReadFile(ctx, f.path, 0, objstore.SniffLen, &head); err != nil {
			return res, fmt.Errorf("export %s: %w", f.path, err)
		}
		types[i] = objstore.DetectType(head.b)
		if !objstore.TypeAllowed(types[i], t.ExportTypes) {
			return res, s.exportRefused(ctx, c, l.rec.ID, l.rec.Template, r.Exec, f.path, types[i], typeRefused(f.path, types[i], l.rec.Template, t.ExportTypes))
		}
	}
	var stored []string
	fail := func(err error) (ExportResult, error) {
		// Nothing half-done stays: the objects of this export go.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, k := range stored {
			_ = s.opts.Objects.Delete(cctx, bucket, k)
		}
		return ExportResult{}, err
	}
	for i, f := range todo {
		obj, err := s.exportOne(ctx, files, c, l.rec.ID, l.rec.Template, r.Exec, t, bucket, f, types[i])
		if err != nil {
			return fail(err)
		}
		stored = append(stored, f.key)
		res.Objects = append(res.Objects, obj)
		res.Bytes += obj.Size
	}
	return res, nil
}

// exportPlaceOf checks that exports may store s3://bucket/key: under a
// place of [export] buckets, never under the snapshot store's bucket and
// prefix.
func (s *Supervisor) exportPlaceOf(bucket, key string) error {
	at := exportPlace{bucket: bucket, prefix: key}
	if snaps, ok := s.cfg.snapshotPlace(); ok && snaps.bucket == bucket && strings.HasPrefix(key, snaps.prefix) {
		return fmt.Errorf("%s is in the snapshot store (%s): exports never go there: %w", at, snaps, ErrForbidden)
	}
	places := s.cfg.Export.places()
	for _, p := range places {
		if p.bucket == bucket && strings.HasPrefix(key, p.prefix) {
			return nil
		}
	}
	names := make([]string, len(places))
	for i, p := range places {
		names[i] = p.String()
	}
	return fmt.Errorf("%s is not where exports may go (%s): %w", at, strings.Join(names, ", "), ErrForbidden)
}

// exportCondition says on what condition an export may store its object at
// key: where there is none, only if there is still none; over an object
// this key exported (its airlock-key metadata), only over that very
// object. Any other object there — another key's export, or an object
// exports did not make — is refused: one key never replaces what another
// stored, and a download URL handed out for it keeps serving it (security
// review 2, N5).
func (s *Supervisor) exportCondition(ctx context.Context, c Caller, bucket, key string) (objstore.Upload, error) {
	info, ok, err := s.opts.Objects.Stat(ctx, bucket, key)
	switch {
	case err != nil:
		return objstore.Upload{}, err
	case !ok:
		return objstore.Upload{IfAbsent: true}, nil
	case info.Metadata["airlock-sandbox"] == "" || info.Metadata["airlock-key"] != c.KeyID:
		return objstore.Upload{}, fmt.Errorf("s3://%s/%s exists and this key did not export it: choose another destination: %w", bucket, key, ErrExportTaken)
	}
	return objstore.Upload{IfMatch: info.ETag}, nil
}

// ErrExportTaken is what an export onto an object it may not replace
// wraps (another key's, or not an export); it wraps ErrForbidden.
var ErrExportTaken = fmt.Errorf("the destination holds an object of another: %w", ErrForbidden)

// exportOne streams one file into its object: the content is read from the
// sandbox as the upload goes (one part in memory), its type checked again
// on its first bytes (the file may have changed since the plan), hashed,
// and bounded by the template's export_max.
func (s *Supervisor) exportOne(ctx context.Context, files sandbox.Files, c Caller, sb, tmpl, exec string, t Template, bucket string, f exportFile, ctype string) (ExportedObject, error) {
	where := "s3://" + bucket + "/" + f.key
	up, err := s.exportCondition(ctx, c, bucket, f.key)
	if err != nil {
		return ExportedObject{}, s.exportRefused(ctx, c, sb, tmpl, exec, f.path, ctype, fmt.Errorf("export %s to %s: %w", f.path, where, err))
	}
	pr, pw := io.Pipe()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		pw.CloseWithError(files.ReadFile(rctx, f.path, 0, int64(t.ExportMax)+1, pw))
	}()
	h := sha256.New()
	meta := map[string]string{"airlock-sandbox": sb, "airlock-path": f.path, "airlock-template": tmpl}
	if exec != "" {
		meta["airlock-exec"] = exec
	}
	if c.KeyID != "" {
		meta["airlock-key"] = c.KeyID
	}
	up.Bucket, up.Key, up.ContentType, up.Metadata, up.Max = bucket, f.key, ctype, meta, int64(t.ExportMax)
	n, err := s.opts.Objects.Put(ctx, up,
		io.TeeReader(pr, h), func(head []byte) error {
			if now := objstore.DetectType(head); now != ctype {
				return typeRefused(f.path, now+" (it changed while exported)", tmpl, t.ExportTypes)
			}
			return nil
		})
	pr.CloseWithError(errors.New("export ended"))
	if err != nil {
		if errors.Is(err, objstore.ErrChanged) {
			err = fmt.Errorf("%w (%w: another export stored it meanwhile)", ErrExportTaken, err)
		}
		if errors.Is(err, objstore.ErrTooLarge) {
			err = fmt.Errorf("%s grew over the export limit of %d bytes (template %q, export_max) while exported: %w", f.path, int64(t.ExportMax), tmpl, err)
		}
		return ExportedObject{}, s.exportRefused(ctx, c, sb, tmpl, exec, f.path, ctype, fmt.Errorf("export %s to %s: %w", f.path, where, err))
	}
	obj := ExportedObject{Path: f.path, Object: where, Size: n, ContentType: ctype, SHA256: hex.EncodeToString(h.Sum(nil))}
	if ttl := time.Duration(s.cfg.Export.Presign); ttl > 0 {
		if u, err := s.opts.Objects.Presign(ctx, bucket, f.key, ttl); err == nil {
			exp := s.opts.Now().Add(ttl).UTC()
			obj.URL, obj.Expires = u, &exp
		}
	}
	s.recordAfter(ctx, audit.Event{Kind: audit.KindExport, Key: c.KeyID, Sandbox: sb, Template: tmpl, Exec: exec, Path: f.path,
		Object: where, ContentType: ctype, SHA256: obj.SHA256, Size: n, Decision: "allow"})
	return obj, nil
}

// exportRefused records a refused or failed export and returns err.
func (s *Supervisor) exportRefused(ctx context.Context, c Caller, sb, tmpl, exec, p, ctype string, err error) error {
	s.recordAfter(ctx, audit.Event{Kind: audit.KindExport, Key: c.KeyID, Sandbox: sb, Template: tmpl, Exec: exec, Path: p,
		ContentType: ctype, Decision: "deny", Error: err.Error()})
	return err
}

func typeRefused(p, ctype, tmpl string, allowed []string) error {
	return fmt.Errorf("%s is %s by its bytes (its name does not count), and template %q exports only %s: %w",
		p, ctype, tmpl, strings.Join(allowed, ", "), ErrTypeRefused)
}

// exportPlan lists the files to store: the file at p, or every regular
// file under the directory p (symlinks and special files are skipped and
// named), with their keys.
func exportPlan(ctx context.Context, files sandbox.Files, p, key string) ([]exportFile, []string, error) {
	fi, err := files.Stat(ctx, p)
	if err != nil {
		return nil, nil, fmt.Errorf("export %s: %w", p, err)
	}
	switch fi.Type {
	case "file":
		if key == "" || strings.HasSuffix(key, "/") {
			key += path.Base(p)
		}
		return []exportFile{{path: p, key: key, size: fi.Size}}, nil, nil
	case "dir":
	default:
		return nil, nil, fmt.Errorf("%w: %s is a %s: export a file or a directory", sandbox.ErrInvalid, p, fi.Type)
	}
	if key != "" && !strings.HasSuffix(key, "/") {
		key += "/"
	}
	var out []exportFile
	var skipped []string
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		ents, err := files.ReadDir(ctx, dir)
		if err != nil {
			return fmt.Errorf("export %s: %w", dir, err)
		}
		for _, e := range ents {
			full, r := path.Join(dir, e.Name), rel+e.Name
			switch e.Type {
			case "file":
				if len(out) == maxExportFiles {
					return fmt.Errorf("%w: %s holds more than %d files: export a smaller tree", sandbox.ErrLimit, p, maxExportFiles)
				}
				out = append(out, exportFile{path: full, key: key + r, size: e.Size})
			case "dir":
				if err := walk(full, r+"/"); err != nil {
					return err
				}
			default:
				skipped = append(skipped, full)
			}
		}
		return nil
	}
	if err := walk(p, ""); err != nil {
		return nil, nil, err
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("%w: %s holds no regular file to export", sandbox.ErrNotFound, p)
	}
	return out, skipped, nil
}

// headBuffer keeps the first SniffLen bytes written to it.
type headBuffer struct{ b []byte }

func (h *headBuffer) Write(p []byte) (int, error) {
	room := objstore.SniffLen - len(h.b)
	h.b = append(h.b, p[:min(room, len(p))]...)
	return len(p), nil
}
