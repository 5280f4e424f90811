package api

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/mcp"
)

// mcpSessionTimeout closes an MCP session (and destroys its sandbox) after
// this long without a request.
const mcpSessionTimeout = 30 * time.Minute

// mcpHandler is the /mcp endpoint: MCP over streamable HTTP, made on first
// use.
type mcpHandler struct {
	once sync.Once
	h    http.Handler
	err  error
}

// callerKey holds the request's *caller in the MCP token info.
const callerKey = "airlock.caller"

// mcp serves POST, GET and DELETE /mcp. By the time it runs, the request
// has passed the Host and Origin checks (which the MCP specification asks
// of this transport: requests from web pages are refused) and the key is
// known. The key becomes the MCP session's user, so that a session can
// only be continued with the key that started it.
func (s *Server) mcp(w http.ResponseWriter, r *http.Request, c *caller) error {
	s.mcph.once.Do(func() { s.mcph.h, s.mcph.err = s.newMCPHandler() })
	if s.mcph.err != nil {
		return s.mcph.err
	}
	verify := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{UserID: c.key.ID, Extra: map[string]any{callerKey: c}}, nil
	}
	auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(s.mcph.h).ServeHTTP(w, r)
	return nil
}

func (s *Server) newMCPHandler() (http.Handler, error) {
	srv, err := mcp.New(mcp.Options{
		Logger: s.log,
		Backend: func(ctx context.Context, req *sdk.CallToolRequest) (mcp.Backend, error) {
			var c *caller
			if req.Extra != nil && req.Extra.TokenInfo != nil {
				c, _ = req.Extra.TokenInfo.Extra[callerKey].(*caller)
			}
			if c == nil {
				return nil, errors.New("mcp: a tool call without the caller's key")
			}
			return &mcp.Local{Sup: s.sup, Caller: c.sup}, nil
		},
	})
	if err != nil {
		return nil, err
	}
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv.SDK() }, &sdk.StreamableHTTPOptions{
		Logger:         s.log,
		SessionTimeout: mcpSessionTimeout,
		// checkHost has already checked Host against the configured names,
		// which may include non-loopback ones behind a proxy.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        maxJSONBody,
	}), nil
}
