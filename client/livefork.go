package client

import "context"

// LiveForkRequest asks for running copies of a running sandbox.
type LiveForkRequest struct {
	// Count is how many clones, 1 (the default) to 16.
	Count      int               `json:"count,omitempty"`
	TTLSeconds int64             `json:"ttl_seconds,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
}

// LiveForkResponse are the clones, running.
type LiveForkResponse struct {
	Source    string    `json:"source"`
	Sandboxes []Sandbox `json:"sandboxes"`
	// ImageBytes is the size of the image the clones started from;
	// CheckpointMS how long the source's save took.
	ImageBytes   int64 `json:"image_bytes"`
	CheckpointMS int64 `json:"checkpoint_ms"`
}

// LiveFork copies running sandbox id, its processes and memory, into
// req.Count new running sandboxes, each with an identity of its own (id,
// host name, machine id, entropy); the source runs on. A driver without
// live_fork answers 501 unsupported with its reason.
func (c *Client) LiveFork(ctx context.Context, id string, req LiveForkRequest) (*LiveForkResponse, error) {
	body := struct {
		Live bool `json:"live"`
		LiveForkRequest
	}{true, req}
	var res LiveForkResponse
	return &res, c.call(ctx, request{method: "POST", path: sandboxPath(id, "fork"), json: body}, &res)
}
