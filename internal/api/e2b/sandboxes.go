package e2b

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// This file is E2B's control API: create, connect, list, get, kill, set
// timeout, metrics. E2B keeps no record of a sandbox once it has ended,
// so to these routes an ended sandbox, like another key's, is not found.

// clientID names the node that runs a sandbox in E2B's answers.
const clientID = "airlock"

func (h *Handler) routeControl() {
	m := h.control
	for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
		m.HandleFunc("POST "+p, h.withKey(h.create))
		m.HandleFunc("GET "+p, h.withKey(h.list))
		m.HandleFunc("POST "+p+"/{id}/connect", h.withKey(h.connect))
	}
	m.HandleFunc("GET /sandboxes/{id}", h.withKey(h.get))
	m.HandleFunc("DELETE /sandboxes/{id}", h.withKey(h.kill))
	m.HandleFunc("POST /sandboxes/{id}/timeout", h.withKey(h.setTimeout))
	m.HandleFunc("POST /sandboxes/{id}/refreshes", h.withKey(h.refresh))
	m.HandleFunc("GET /sandboxes/{id}/metrics", h.withKey(h.metrics))
	m.HandleFunc("PUT /sandboxes/{id}/network", h.withKey(h.updateNetwork))
	m.HandleFunc("POST /sandboxes/{id}/pause", h.withKey(h.pause))
	m.HandleFunc("POST /sandboxes/{id}/resume", h.withKey(h.resume))
	m.HandleFunc("POST /sandboxes/{id}/fork", h.withKey(h.fork))
	m.HandleFunc("POST /sandboxes/{id}/snapshots", h.withKey(func(w http.ResponseWriter, r *http.Request, _ *caller) error {
		return errorf(http.StatusNotImplemented, "airlock does not snapshot sandboxes through the E2B API: use airlock's own API (POST /v1/sandboxes/{id}/snapshots), or Sandbox.fork for running copies")
	}))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, errorf(http.StatusNotFound, "no such route: %s %s", r.Method, truncate(r.URL.Path, 200)))
	})
}

// withKey authenticates by API key, then runs fn; an error it returns is
// written in E2B's shape.
func (h *Handler) withKey(fn func(http.ResponseWriter, *http.Request, *caller) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := h.keyCaller(r)
		if err == nil {
			err = fn(w, r, c)
		}
		if err != nil {
			h.writeError(w, r, err)
		}
	}
}

// maxControlBody bounds the JSON bodies of the control API.
const maxControlBody = 1 << 20

// decode reads a JSON body into v; unknown fields are ignored (newer SDKs
// send more), an empty body is an empty object.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxControlBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "the request body is larger than %d bytes", mbe.Limit)
		}
		return errorf(http.StatusBadRequest, "read the request body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errorf(http.StatusBadRequest, "malformed JSON body: %s", truncate(err.Error(), 200))
	}
	return nil
}

// newSandbox is the body of a create, as E2B's SDKs send it.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	// AllowInternetAccessCamel is the SDKs' option name, which a body
	// written by hand may use (the SDKs send allow_internet_access).
	AllowInternetAccessCamel *bool        `json:"allowInternetAccess"`
	Network                  *networkBody `json:"network"`
	AutoPause                *bool        `json:"autoPause"`
	AutoPauseMemory          *bool        `json:"autoPauseMemory"`
	AutoResume               *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	MCP          json.RawMessage   `json:"mcp"`
	VolumeMounts []json.RawMessage `json:"volumeMounts"`
}

// networkBody is E2B's egress configuration. allowOut and denyOut map to
// the sandbox's allow and deny lists (within its template's); the rest
// airlock does not have.
type networkBody struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	Rules              json.RawMessage `json:"rules"`
	MaskRequestHost    json.RawMessage `json:"maskRequestHost"`
}

// sandboxJSON is E2B's answer to a create or connect.
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string  `json:"trafficAccessToken,omitempty"`
	Domain             *string `json:"domain"`
}

func (h *Handler) wireSandbox(in supervisor.Info) sandboxJSON {
	// The traffic token opens the code interpreter (its context calls
	// carry only that one, E2B-Traffic-Access-Token) and a private
	// sandbox's exposed ports, not envd (ports.go).
	return sandboxJSON{TemplateID: in.Template, SandboxID: in.ID, ClientID: clientID, EnvdVersion: EnvdVersion, EnvdAccessToken: in.Token, TrafficAccessToken: trafficToken(in), Domain: &h.domain}
}

// listedSandbox is a sandbox in E2B's lists; sandboxDetail, in its get.
type listedSandbox struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken string         `json:"envdAccessToken,omitempty"`
	Domain          *string        `json:"domain"`
	Lifecycle       *lifecycleJSON `json:"lifecycle,omitempty"`
}

func listed(in supervisor.Info) listedSandbox {
	l := in.Limits.WithDefaults()
	return listedSandbox{
		TemplateID: in.Template, SandboxID: in.ID, ClientID: clientID,
		StartedAt: in.Created, EndAt: in.ExpiresAt,
		CPUCount: max(1, int(math.Ceil(l.CPUs))), MemoryMB: l.MemoryBytes >> 20, DiskSizeMB: l.DiskBytes >> 20,
		State: e2bState(in.State), EnvdVersion: EnvdVersion, Metadata: in.Metadata,
	}
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, c *caller) error {
	// The key's in-flight cap holds before the body is read, as on
	// airlock's own API.
	ctx, done, err := h.sup.Begin(r.Context(), c.sup, supervisor.OpCreate)
	if err != nil {
		return err
	}
	defer done()
	var body newSandbox
	if err := decode(w, r, &body); err != nil {
		return err
	}
	name := body.TemplateID
	if name == "" {
		name = "base"
	}
	tmpl, ok := h.templates[name]
	if !ok {
		return errorf(http.StatusNotFound, "template '%s' not found (this daemon maps %s; see [e2b] templates in its config)", truncate(name, 128), strings.Join(h.templateNames(), ", "))
	}
	// E2B's home, which agents' code and prompts name.
	req := supervisor.CreateRequest{Template: tmpl, Metadata: body.Metadata, Token: newToken(), Home: sandbox.E2BHome}
	if n := body.Network; n != nil && n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic {
		// Its exposed ports take the traffic token (ports.go).
		req.Token = privatePrefix + req.Token
	}
	if body.Timeout != nil && *body.Timeout > 0 {
		if *body.Timeout > int64(365*24*time.Hour/time.Second) {
			return errorf(http.StatusBadRequest, "timeout %d: give seconds, at most a year", *body.Timeout)
		}
		req.TTL = time.Duration(*body.Timeout) * time.Second
	}
	if req.Env, err = envList(body.EnvVars); err != nil {
		return err
	}
	if err := body.unsupported(); err != nil {
		return err
	}
	if err := body.lifecycle(&req); err != nil {
		return err
	}
	if err := body.internetAccess(); err != nil {
		return err
	}
	if req.Network, err = h.network(tmpl, body); err != nil {
		return err
	}
	info, err := h.sup.Create(ctx, c.sup, req)
	if err != nil {
		return err
	}
	if h.warm[name] {
		h.warmKernel(c, info.ID)
	}
	writeJSON(w, http.StatusCreated, h.wireSandbox(info))
	return nil
}

func (h *Handler) templateNames() []string {
	names := make([]string, 0, len(h.templates))
	for n := range h.templates {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return []string{"no template"}
	}
	return names
}

// unsupported refuses what airlock cannot do, rather than ignore it.
func (b newSandbox) unsupported() error {
	switch {
	case len(b.MCP) > 0 && string(b.MCP) != "null":
		return errorf(http.StatusBadRequest, "airlock does not run E2B's MCP gateway in a sandbox: use airlock's own MCP server (airlock mcp, or /mcp on the daemon)")
	case len(b.VolumeMounts) > 0:
		return errorf(http.StatusBadRequest, "airlock has no E2B volumes: leave volumeMounts out")
	}
	if n := b.Network; n != nil {
		switch {
		case len(n.EgressProxy) > 0 && string(n.EgressProxy) != "null", len(n.Rules) > 0 && string(n.Rules) != "null", len(n.MaskRequestHost) > 0 && string(n.MaskRequestHost) != "null":
			return errorf(http.StatusBadRequest, "of network, airlock takes allowOut (host names like example.com or *.example.com, and IP:PORT addresses) and denyOut")
		}
	}
	return nil
}

// internetAccess takes allowInternetAccess as allow_internet_access: left
// unread, a sandbox asked to have the internet was made without a word
// (security review 2).
func (b *newSandbox) internetAccess() error {
	c := b.AllowInternetAccessCamel
	switch {
	case c == nil:
	case b.AllowInternetAccess == nil:
		b.AllowInternetAccess = c
	case *b.AllowInternetAccess != *c:
		return errorf(http.StatusBadRequest, "allow_internet_access and allowInternetAccess disagree: give one")
	}
	return nil
}

// network maps E2B's allow_internet_access and network to airlock's:
// left out, the template's network; false, none; true, the template's
// egress (a template with no network refuses); allowOut and denyOut, the
// sandbox's allow and deny lists, which its template must cover.
func (h *Handler) network(tmpl string, b newSandbox) (sandbox.Network, error) {
	var n sandbox.Network
	if b.AllowInternetAccess != nil && !*b.AllowInternetAccess {
		if b.Network != nil && len(b.Network.AllowOut) > 0 {
			return n, errorf(http.StatusBadRequest, "allow_internet_access is false and network.allowOut names hosts: choose one")
		}
		return sandbox.Network{Mode: sandbox.NetworkNone}, nil
	}
	if b.AllowInternetAccess != nil && *b.AllowInternetAccess {
		for _, t := range h.sup.Templates() {
			if t.Name == tmpl && sandbox.NetworkMode(t.Network.Mode) != sandbox.NetworkEgress {
				return n, errorf(http.StatusForbidden, "template %q gives sandboxes no network (its network mode is none): create it with allowInternetAccess left out, or ask the operator for a template with network mode egress", tmpl)
			}
		}
	}
	if b.Network != nil && (len(b.Network.AllowOut) > 0 || len(b.Network.DenyOut) > 0) {
		return egressOf(b.Network.AllowOut, b.Network.DenyOut)
	}
	return n, nil
}

// egressOf maps E2B's allowOut and denyOut to airlock's egress rules:
// an "IP:PORT" of allowOut is an allowed address, anything else a host
// pattern ("example.com", "*.example.com", with ":PORT" or not). Airlock
// refuses what is not allowed, so denyOut's catch-alls ("0.0.0.0/0",
// "::/0", which E2B users write to deny all but allowOut) say nothing more
// and are dropped; its other entries (hosts, addresses, CIDR prefixes)
// are refused even where an allow matches (E2B lets allowOut win). The
// template must allow each (Template.network refuses more, naming it).
func egressOf(allowOut, denyOut []string) (sandbox.Network, error) {
	n := sandbox.Network{Mode: sandbox.NetworkEgress}
	for _, a := range allowOut {
		if ap, err := netip.ParseAddrPort(a); err == nil {
			n.AllowAddresses = append(n.AllowAddresses, ap.String())
			continue
		}
		if _, err := netip.ParseAddr(a); err == nil {
			return n, errorf(http.StatusBadRequest, "network.allowOut %q: give the address with its port (IP:PORT, like 10.1.2.3:443): airlock allows an address one port at a time", truncate(a, 80))
		}
		if _, err := netip.ParsePrefix(a); err == nil {
			return n, errorf(http.StatusBadRequest, "network.allowOut %q: airlock allows host names and single addresses with their port (IP:PORT), not address ranges", truncate(a, 80))
		}
		n.AllowHosts = append(n.AllowHosts, a)
	}
	for _, d := range denyOut {
		if p, err := netip.ParsePrefix(d); err == nil && p.Bits() == 0 {
			continue
		}
		n.Deny = append(n.Deny, d)
	}
	if err := n.Validate(); err != nil {
		return n, errorf(http.StatusBadRequest, "network: %v", err)
	}
	return n, nil
}

// networkUpdate is the body of PUT /sandboxes/{id}/network (the SDKs'
// updateNetwork): the sandbox's whole egress configuration, what is left
// out cleared.
type networkUpdate struct {
	networkBody
	AllowInternetAccess *bool `json:"allow_internet_access"`
}

// updateNetwork replaces a running sandbox's egress rules with what the
// body asks, mapped as a create's network is (network, egressOf): left
// out, the template's; allow_internet_access false, nothing. The
// template and the policy bound it as they bound the create, and a
// request beyond them is refused with the rule (supervisor.SetNetwork).
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request, c *caller) error {
	var body networkUpdate
	if err := decode(w, r, &body); err != nil {
		return err
	}
	info, err := h.live(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	nb := newSandbox{AllowInternetAccess: body.AllowInternetAccess, Network: &body.networkBody}
	if err := nb.unsupported(); err != nil {
		return err
	}
	n, err := h.network(info.Template, nb)
	if err != nil {
		return err
	}
	if _, err := h.sup.SetNetwork(r.Context(), c.sup, info.ID, n); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// envList turns {"K": "V"} into sorted "K=V" entries.
func envList(env map[string]string) ([]string, error) {
	out := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, errorf(http.StatusBadRequest, "environment variable %q: names cannot be empty or hold '=' or NUL", truncate(k, 80))
		}
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out, nil
}

// live returns sandbox id of c, running; not found otherwise.
func (h *Handler) live(ctx context.Context, c *caller, id string) (supervisor.Info, error) {
	if !sandbox.ValidID(id) {
		return supervisor.Info{}, errorf(http.StatusNotFound, "sandbox %q not found", truncate(id, 80))
	}
	info, err := h.sup.Get(ctx, c.sup, id)
	if err != nil {
		return info, err
	}
	if info.State != store.StateRunning {
		return info, errorf(http.StatusNotFound, "sandbox %s not found: it is %s (%s)", id, info.State, info.EndReason)
	}
	return info, nil
}

// timeoutBody is the body of timeout, connect and refreshes.
type timeoutBody struct {
	Timeout  *int64 `json:"timeout"`
	Duration *int64 `json:"duration"`
}

func (h *Handler) connect(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	var body timeoutBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	info, err := h.liveOrPaused(r.Context(), c, id)
	if err != nil {
		return err
	}
	if info.State == store.StatePaused {
		// Sandbox.connect resumes a paused sandbox.
		if info, err = h.resumed(r.Context(), c, info, body); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, h.wireSandbox(info))
		return nil
	}
	if body.Timeout != nil && *body.Timeout > 0 {
		if info, err = h.lengthen(r.Context(), c, info, *body.Timeout); err != nil {
			return err
		}
	}
	if info.Token == "" {
		// Made through airlock's own API: it gets its token now.
		if info.Token, err = h.sup.EnsureToken(r.Context(), c.sup, id, newToken()); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, h.wireSandbox(info))
	return nil
}

// lengthen makes the sandbox live at least sec seconds more.
func (h *Handler) lengthen(ctx context.Context, c *caller, info supervisor.Info, sec int64) (supervisor.Info, error) {
	if sec > int64(365*24*time.Hour/time.Second) {
		return info, errorf(http.StatusBadRequest, "timeout %d: give seconds, at most a year", sec)
	}
	d := time.Duration(sec) * time.Second
	if time.Until(info.ExpiresAt) >= d {
		return info, nil
	}
	return h.sup.ExtendTimeout(ctx, c.sup, info.ID, d)
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, c *caller) error {
	info, err := h.liveOrPaused(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxDetail{listedSandbox: listed(info), EnvdAccessToken: info.Token, Domain: &h.domain, Lifecycle: wireLifecycle(info)})
	return nil
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	if _, err := h.liveOrPaused(r.Context(), c, id); err != nil {
		return err
	}
	if err := h.sup.Kill(r.Context(), c.sup, id); err != nil {
		return err
	}
	h.forget(id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	var body timeoutBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if body.Timeout == nil || *body.Timeout <= 0 || *body.Timeout > int64(365*24*time.Hour/time.Second) {
		return errorf(http.StatusBadRequest, "timeout: give the sandbox's new lifetime in seconds, from now")
	}
	if _, err := h.live(r.Context(), c, id); err != nil {
		return err
	}
	if _, err := h.sup.ExtendTimeout(r.Context(), c.sup, id, time.Duration(*body.Timeout)*time.Second); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// refresh is older SDKs' keepalive: live at least duration seconds more.
func (h *Handler) refresh(w http.ResponseWriter, r *http.Request, c *caller) error {
	var body timeoutBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	info, err := h.live(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if body.Duration != nil && *body.Duration > 0 {
		if _, err := h.lengthen(r.Context(), c, info, *body.Duration); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// metric is one sample of E2B's sandbox metrics.
type metric struct {
	Timestamp  time.Time `json:"timestamp"`
	CPUUsedPct float64   `json:"cpuUsedPct"`
	CPUCount   int       `json:"cpuCount"`
	MemUsed    int64     `json:"memUsed"`
	MemTotal   int64     `json:"memTotal"`
	DiskUsed   int64     `json:"diskUsed"`
	DiskTotal  int64     `json:"diskTotal"`
}

// metrics answers one sample, now: memory in use and its limit, and the
// CPU used since the previous reading (or the sandbox's start) as a share
// of its quota. Disk use is not counted (0).
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, c *caller) error {
	info, err := h.live(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	l := info.Limits.WithDefaults()
	m := metric{Timestamp: time.Now().UTC(), CPUCount: max(1, int(math.Ceil(l.CPUs))), MemTotal: l.MemoryBytes, DiskTotal: l.DiskBytes}
	u, err := h.sup.Usage(r.Context(), c.sup, info.ID)
	switch {
	case err == nil:
		m.MemUsed = u.MemoryBytes
		if u.CPUs > 0 {
			m.CPUUsedPct = math.Round(u.CPUCores/u.CPUs*10000) / 100
		}
	case errors.Is(err, sandbox.ErrUnsupported):
	default:
		return err
	}
	writeJSON(w, http.StatusOK, []metric{m})
	return nil
}

// maxPage is the most sandboxes one page of a list holds.
const maxPage = 100

func (h *Handler) list(w http.ResponseWriter, r *http.Request, c *caller) error {
	q := r.URL.Query()
	f := supervisor.Filter{}
	states := []string{"running"}
	if m := q.Get("metadata"); m != "" {
		md, err := parseMetadataQuery(m)
		if err != nil {
			return err
		}
		f.Metadata = md
	}
	if t := q.Get("template"); t != "" {
		if mapped, ok := h.templates[t]; ok {
			t = mapped
		}
		f.Template = t
	}
	if s := q.Get("state"); s != "" {
		states = strings.Split(s, ",")
	}
	var after time.Time
	if s := q.Get("startedAfter"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return errorf(http.StatusBadRequest, "startedAfter %q: give an RFC 3339 time", truncate(s, 40))
		}
		after = t
	}
	limit := maxPage
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPage {
			return errorf(http.StatusBadRequest, "limit %q: give 1 to %d", truncate(s, 20), maxPage)
		}
		limit = n
	}
	desc := false
	switch q.Get("order") {
	case "", "asc":
	case "desc":
		desc = true
	default:
		return errorf(http.StatusBadRequest, "order %q: use asc or desc", truncate(q.Get("order"), 20))
	}
	infos, err := h.sup.List(r.Context(), c.sup, f)
	if err != nil {
		return err
	}
	infos = slices.DeleteFunc(infos, func(in supervisor.Info) bool {
		live := in.State == store.StateRunning || in.State == store.StatePaused
		return !live || !slices.Contains(states, e2bState(in.State)) || !after.IsZero() && !in.Created.After(after)
	})
	slices.SortFunc(infos, func(a, b supervisor.Info) int {
		if d := a.Created.Compare(b.Created); d != 0 {
			return d
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if desc {
		slices.Reverse(infos)
	}
	if tok := q.Get("nextToken"); tok != "" {
		at, id, err := parseCursor(tok)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(infos, func(in supervisor.Info) bool {
			d := in.Created.Compare(at)
			if d == 0 {
				d = cmp.Compare(in.ID, id)
			}
			if desc {
				d = -d
			}
			return d > 0
		})
		if i < 0 {
			i = len(infos)
		}
		infos = infos[i:]
	}
	if len(infos) > limit {
		last := infos[limit-1]
		w.Header().Set("X-Next-Token", cursor(last.Created, last.ID))
		infos = infos[:limit]
	}
	out := make([]listedSandbox, 0, len(infos))
	for _, in := range infos {
		out = append(out, listed(in))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// parseMetadataQuery reads E2B's metadata filter: pairs of a query string
// whose keys and values were percent-encoded once more ("k=v&k2=v2").
func parseMetadataQuery(s string) (map[string]string, error) {
	vals, err := url.ParseQuery(s)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "metadata %q: give key=value pairs joined by &", truncate(s, 80))
	}
	out := map[string]string{}
	for k, vs := range vals {
		key, err1 := url.PathUnescape(k)
		val, err2 := url.PathUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, errorf(http.StatusBadRequest, "metadata %q: a key or value is not percent-encoded right", truncate(s, 80))
		}
		out[key] = val
	}
	return out, nil
}

// cursor is a list's next-page token: where the page ended.
func cursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixNano(), 10) + "/" + id))
}

func parseCursor(s string) (time.Time, string, error) {
	bad := errorf(http.StatusBadRequest, "nextToken %q is not one this daemon gave", truncate(s, 80))
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", bad
	}
	ns, id, ok := strings.Cut(string(b), "/")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || !sandbox.ValidID(id) {
		return time.Time{}, "", bad
	}
	return time.Unix(0, n), id, nil
}

// forget drops what this handler keeps for sandbox id (its kernels and
// watchers), once it has ended.
func (h *Handler) forget(id string) {
	h.kernels.forget(id)
	h.watches.forgetSandbox(id)
}
