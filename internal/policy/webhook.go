package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Webhook sends each request that the rest of the policy did not deny to
// an external service (for example a second model) and takes its
// decision. The service gets the Request as JSON in a POST and answers
// {"decision": "allow"|"deny"|"ask", "reason": "..."}. When it does not
// answer well within Timeout, Fallback applies.
type Webhook struct {
	URL string `toml:"url"`
	// Timeout bounds each call; empty means 2s.
	Timeout string `toml:"timeout"`
	// Fallback is the verdict when the webhook fails; empty means the
	// policy's default.
	Fallback Verdict `toml:"fallback"`
	// Header is sent with each call, e.g. {Authorization = "Bearer ..."}.
	Header map[string]string `toml:"header"`
}

type webhook struct {
	w       Webhook
	timeout time.Duration
	client  *http.Client
}

func newWebhook(w Webhook) (*webhook, error) {
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("webhook url %q: use an http or https URL", w.URL)
	}
	h := &webhook{w: w, timeout: 2 * time.Second, client: &http.Client{}}
	if w.Timeout != "" {
		d, err := time.ParseDuration(w.Timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("webhook timeout %q: use a positive duration like \"2s\"", w.Timeout)
		}
		h.timeout = d
	}
	switch w.Fallback {
	case "", Allow, Deny, Ask:
	default:
		return nil, fmt.Errorf("webhook fallback %q: use allow, deny or ask", w.Fallback)
	}
	return h, nil
}

// decide asks the webhook; on any failure it returns the fallback.
func (h *webhook) decide(ctx context.Context, r Request, def Verdict) Decision {
	fallback := h.w.Fallback
	if fallback == "" {
		fallback = def
	}
	d, err := h.call(ctx, r)
	if err != nil {
		return Decision{Verdict: fallback, Rule: "webhook", Reason: fmt.Sprintf("the verification webhook failed (%v); the policy's fallback applies", err)}
	}
	return d
}

func (h *webhook) call(ctx context.Context, r Request) (Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	body, err := json.Marshal(r)
	if err != nil {
		return Decision{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.w.URL, bytes.NewReader(body))
	if err != nil {
		return Decision{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h.w.Header {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Decision{}, fmt.Errorf("no answer within %s", h.timeout)
		}
		return Decision{}, fmt.Errorf("call: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Decision{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	var ans struct {
		Decision Verdict `json:"decision"`
		Reason   string  `json:"reason"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&ans); err != nil {
		return Decision{}, fmt.Errorf("answer is not JSON: %w", err)
	}
	switch ans.Decision {
	case Allow, Deny, Ask:
	default:
		return Decision{}, fmt.Errorf("answer has decision %q", ans.Decision)
	}
	if ans.Reason == "" {
		ans.Reason = "decided by the verification webhook"
	}
	return Decision{Verdict: ans.Decision, Rule: "webhook", Reason: ans.Reason}, nil
}
