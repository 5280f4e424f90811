package api

import (
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// ExportRequest is the body of POST /v1/sandboxes/{id}/export: a file or a
// directory tree of the sandbox, stored in the object store.
type ExportRequest struct {
	// Path is the file or directory in the sandbox.
	Path string `json:"path"`
	// To is s3://BUCKET/KEY (a file; a KEY ending in "/" puts the file's
	// name after it) or s3://BUCKET/PREFIX/ (a directory).
	To string `json:"to"`
	// Exec is the exec the files come from, named in the objects' metadata
	// and the audit log.
	Exec string `json:"exec,omitempty"`
}

func (s *Server) exportFiles(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body ExportRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	res, err := s.sup.Export(r.Context(), c.sup, supervisor.ExportRequest{Sandbox: id, Path: body.Path, To: body.To, Exec: body.Exec})
	if err != nil {
		return err
	}
	if res.Objects == nil {
		res.Objects = []supervisor.ExportedObject{}
	}
	writeJSON(w, http.StatusCreated, res)
	return nil
}
