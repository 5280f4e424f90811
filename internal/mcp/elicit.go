package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Approvals where the agent is: a tool call of a client that declared
// elicitation carries an Asker, with which the supervisor asks the person
// in that client to decide the call's asks (where the policy lets it:
// supervisor.WithAsker). Clients without elicitation keep the console.

// elicitApprovals is the server's receiving middleware that gives each
// tools/call of an eliciting client its Asker.
func elicitApprovals(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if call, ok := req.(*sdk.CallToolRequest); ok && elicits(call.Session) {
			ctx = supervisor.WithAsker(ctx, askIn(call.Session, call.Params.Name))
		}
		return next(ctx, method, req)
	}
}

// elicits says whether the client of ss can be asked a form.
func elicits(ss *sdk.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return false
	}
	c := p.Capabilities.Elicitation
	return c.Form != nil || c.URL == nil // neither set: form, as the specification says
}

// approvalSchema is the form: approve or not, and why.
var approvalSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"approve": map[string]any{"type": "boolean", "title": "Approve", "description": "let the action happen"},
		"reason":  map[string]any{"type": "string", "title": "Reason", "description": "why (recorded in the audit log)", "maxLength": 500},
	},
	"required": []string{"approve"},
}

// askIn asks the person in ss's client about approval a of tool: accept
// with approve true approves, accept with false or decline denies, cancel
// (dismissed) or a failure leaves it pending.
func askIn(ss *sdk.ServerSession, tool string) supervisor.Asker {
	return func(ctx context.Context, a supervisor.Approval) (bool, string, bool) {
		res, err := ss.Elicit(ctx, &sdk.ElicitParams{Mode: "form", Message: approvalMessage(tool, a), RequestedSchema: approvalSchema})
		if err != nil || res == nil {
			return false, "", false
		}
		reason, _ := res.Content["reason"].(string)
		reason = truncateRunes(reason, 500)
		switch res.Action {
		case "accept":
			approve, _ := res.Content["approve"].(bool)
			return approve, reason, true
		case "decline":
			if reason == "" {
				reason = "declined in the MCP client"
			}
			return false, reason, true
		}
		return false, "", false
	}
}

// approvalMessage says what is asked: the action, the rule and its reason.
// What the agent wrote (argv as a JSON list, code and paths quoted) has
// its controls escaped, so that it cannot pass for the message's own text.
func approvalMessage(tool string, a supervisor.Approval) string {
	r := a.Request
	var b strings.Builder
	fmt.Fprintf(&b, "airlock: the policy asks a person before this action (approval %s).\n", a.ID)
	fmt.Fprintf(&b, "Tool: %s; action: %s", tool, r.Action)
	if r.Sandbox != "" {
		fmt.Fprintf(&b, " in sandbox %s", r.Sandbox)
	}
	b.WriteString("\n")
	switch {
	case len(r.Argv) > 0:
		argv, _ := json.Marshal(r.Argv) // a list, as the console shows it: controls escaped
		fmt.Fprintf(&b, "Command: %s\n", truncateRunes(string(argv), 2000))
	case r.Code != "":
		fmt.Fprintf(&b, "Code (%s): %q\n", r.Language, truncateRunes(r.Code, 2000))
	}
	if r.Path != "" {
		fmt.Fprintf(&b, "Path: %q\n", truncateRunes(r.Path, 500))
	}
	if r.Host != "" {
		fmt.Fprintf(&b, "Host: %q port %d\n", truncateRunes(r.Host, 300), r.Port)
	}
	fmt.Fprintf(&b, "Rule: %s\nWhy: %s\nIt is denied by itself at %s unless decided.", a.Rule, a.Why, a.Expires.Format("15:04:05 MST"))
	return b.String()
}

// truncateRunes cuts s to at most n runes, marking the cut.
func truncateRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
