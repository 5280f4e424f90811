// Package client is the Go SDK of the airlock daemon's HTTP API
// (`airlock serve`). It uses the standard library only.
//
//	c, err := client.New("http://127.0.0.1:7070", os.Getenv("AIRLOCK_API_KEY"))
//	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "default"})
//	defer c.DeleteSandbox(ctx, sb.ID)
//	res, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Argv: []string{"ls", "-l"}},
//		func(ev client.Event) error { os.Stdout.Write(ev.Data); return nil })
//
// Every call takes a context that bounds it. Errors of the API are
// *Error values: use errors.As and look at Code ("not_found",
// "rate_limited", …) or the helpers IsNotFound and friends.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables FromEnv reads.
const (
	EnvURL = "AIRLOCK_URL"
	EnvKey = "AIRLOCK_API_KEY"
)

// Client calls one daemon. It is safe for concurrent use.
type Client struct {
	base *url.URL
	key  string
	hc   *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests with hc.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client of the daemon at baseURL ("http://127.0.0.1:7070")
// that authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("airlock URL %q: give http://HOST:PORT or https://HOST:PORT", baseURL)
	}
	c := &Client{base: u, key: apiKey, hc: &http.Client{Transport: defaultTransport}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// defaultTransport keeps enough idle connections for many concurrent
// calls to one daemon.
var defaultTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}()

// FromEnv returns a client of the daemon named by AIRLOCK_URL, with the
// key in AIRLOCK_API_KEY.
func FromEnv(opts ...Option) (*Client, error) {
	u := os.Getenv(EnvURL)
	if u == "" {
		return nil, fmt.Errorf("%s is not set: point it at a daemon started with `airlock serve` (e.g. http://127.0.0.1:7070)", EnvURL)
	}
	k := os.Getenv(EnvKey)
	if k == "" {
		return nil, fmt.Errorf("%s is not set: make a key with `airlock keys create --state-dir DIR`", EnvKey)
	}
	return New(u, k, opts...)
}

// Error is an error the API answered with.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is the stable error code: not_found, unauthorized, forbidden,
	// invalid, rate_limited, quota_exceeded, insufficient_capacity,
	// not_running, path_outside, archive_refused, type_refused, too_large,
	// store_unavailable, store_denied, internal, …
	Code    string
	Message string
	// RetryAfter is the wait the daemon asked for (rate limits).
	RetryAfter time.Duration
	// Conflicts are, on an apply of changes refused with code "conflict"
	// (409), the paths the host changed since the sandbox started.
	Conflicts []PathReason
}

func (e *Error) Error() string {
	return fmt.Sprintf("airlock: %s (%d %s)", e.Message, e.Status, e.Code)
}

func hasCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// IsNotFound reports whether err is the API's not_found.
func IsNotFound(err error) bool { return hasCode(err, "not_found") }

// IsRateLimited reports whether err is the API's rate_limited.
func IsRateLimited(err error) bool { return hasCode(err, "rate_limited") }

// IsForbidden reports whether err is the API's forbidden.
func IsForbidden(err error) bool { return hasCode(err, "forbidden") }

// request is one API call.
type request struct {
	method, path string
	query        url.Values
	body         io.Reader
	json         any
	contentType  string
	accept       string
}

// do sends req and returns the response when its status is 2xx; otherwise
// it returns the API's error.
func (c *Client) do(ctx context.Context, req request) (*http.Response, error) {
	u := *c.base
	u.Path = c.base.Path + req.path
	u.RawQuery = req.query.Encode()
	body := req.body
	if req.json != nil {
		b, err := json.Marshal(req.json)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
		req.contentType = "application/json"
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if c.key != "" {
		hr.Header.Set("Authorization", "Bearer "+c.key)
	}
	if req.contentType != "" {
		hr.Header.Set("Content-Type", req.contentType)
	}
	if req.accept != "" {
		hr.Header.Set("Accept", req.accept)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("airlock: %s %s: %w", req.method, req.path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, readError(resp)
}

func readError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: resp.Status}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Conflicts []PathReason `json:"conflicts"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message, e.Conflicts = body.Error.Code, body.Error.Message, body.Conflicts
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if s, err := strconv.ParseFloat(ra, 64); err == nil && s >= 0 && !math.IsInf(s, 0) {
			e.RetryAfter = time.Duration(s * float64(time.Second))
		}
	}
	return e
}

// call sends req and decodes a JSON answer into out (nil: discard it).
func (c *Client) call(ctx context.Context, req request, out any) error {
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("airlock: %s %s: read the answer: %w", req.method, req.path, err)
	}
	return nil
}

func sandboxPath(id string, rest ...string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Health is the daemon's state. Status is "ok", or "degraded" when its
// audit log has failed (Health then returns the state with an error).
type Health struct {
	Status string `json:"status"`
	// Audit is "ok", "none" or "failed: ...".
	Audit     string   `json:"audit"`
	Sandboxes int      `json:"sandboxes"`
	Templates []string `json:"templates"`
	Pools     []struct {
		Template string `json:"template"`
		Size     int    `json:"size"`
		Ready    int    `json:"ready"`
		Filling  int    `json:"filling"`
	} `json:"pools,omitempty"`
}

// Health asks whether the daemon is up.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	return &h, c.call(ctx, request{method: "GET", path: "/healthz"}, &h)
}
