package mcp

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// isNotFound says err is a missing file or sandbox, from either backend.
func isNotFound(err error) bool {
	return client.IsNotFound(err)
}

// globber walks the sandbox's file API for the paths that match a pattern.
type globber struct {
	ctx     context.Context
	t       target
	dirs    int
	seen    map[string]bool
	matches []string
	full    bool
}

func (g *globber) add(p string) {
	if g.seen[p] {
		return
	}
	if len(g.matches) >= maxMatches {
		g.full = true
		return
	}
	g.seen[p] = true
	g.matches = append(g.matches, p)
}

// readDir lists dir, counting it against maxGlobDirs; unreadable
// directories are skipped.
func (g *globber) readDir(dir string) []sandbox.FileInfo {
	if g.dirs >= maxGlobDirs {
		g.full = true
		return nil
	}
	g.dirs++
	list, err := g.t.b.ReadDir(g.ctx, g.t.id, dir)
	if err != nil {
		return nil
	}
	return list
}

// walk adds the paths under dir that match segs.
func (g *globber) walk(dir string, segs []string) {
	if g.full || g.ctx.Err() != nil {
		return
	}
	if len(segs) == 0 {
		g.add(dir)
		return
	}
	seg, rest := segs[0], segs[1:]
	switch {
	case seg == "**":
		g.walk(dir, rest) // no directory
		for _, f := range g.readDir(dir) {
			if f.Type == "dir" {
				g.walk(path.Join(dir, f.Name), segs)
			} else if len(rest) == 0 {
				g.add(path.Join(dir, f.Name))
			}
		}
	case !strings.ContainsAny(seg, `*?[\`):
		p := path.Join(dir, seg)
		if len(rest) > 0 {
			g.walk(p, rest)
			return
		}
		if _, err := g.t.b.Stat(g.ctx, g.t.id, p); err == nil {
			g.add(p)
		}
	default:
		for _, f := range g.readDir(dir) {
			if ok, _ := path.Match(seg, f.Name); !ok {
				continue
			}
			switch {
			case len(rest) == 0:
				g.add(path.Join(dir, f.Name))
			case f.Type == "dir":
				g.walk(path.Join(dir, f.Name), rest)
			}
		}
	}
}

func (s *Server) glob(ctx context.Context, req *sdk.CallToolRequest, in GlobInput) (*sdk.CallToolResult, ListOutput, error) {
	if in.Pattern == "" {
		return nil, ListOutput{}, toolError("pattern is empty")
	}
	pat := in.Pattern
	if !path.IsAbs(pat) {
		root := in.Path
		if root == "" {
			root = "/workspace"
		}
		if !path.IsAbs(root) {
			root = path.Join("/workspace", root)
		}
		pat = root + "/" + pat
	}
	segs := strings.Split(strings.Trim(path.Clean(pat), "/"), "/")
	for _, seg := range segs {
		if _, err := path.Match(seg, ""); err != nil {
			return nil, ListOutput{}, toolError("pattern %q: %v", in.Pattern, err)
		}
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ListOutput{}, s.fail(t, err)
	}
	g := &globber{ctx: ctx, t: t, seen: map[string]bool{}}
	g.walk("/", segs)
	if err := ctx.Err(); err != nil {
		return nil, ListOutput{}, s.fail(t, err)
	}
	slices.Sort(g.matches)
	return nil, ListOutput{SandboxID: t.id, Matches: g.matches, Truncated: g.full}, nil
}

func (s *Server) grep(ctx context.Context, req *sdk.CallToolRequest, in GrepInput) (*sdk.CallToolResult, GrepOutput, error) {
	if in.Pattern == "" {
		return nil, GrepOutput{}, toolError("pattern is empty")
	}
	if in.MaxCount < 0 {
		return nil, GrepOutput{}, toolError("max_count cannot be negative")
	}
	if in.Path == "" {
		in.Path = "/workspace"
	}
	// -Z ends each file name with NUL, so names holding ':' parse right.
	argv := []string{"grep", "-r", "-n", "-H", "-I", "-s", "-Z"}
	if in.Regex {
		argv = append(argv, "-E")
	} else {
		argv = append(argv, "-F")
	}
	if in.IgnoreCase {
		argv = append(argv, "-i")
	}
	if in.MaxCount > 0 {
		argv = append(argv, "-m", strconv.Itoa(in.MaxCount))
	}
	if in.Glob != "" {
		argv = append(argv, "--include="+in.Glob)
	}
	argv = append(argv, "-e", in.Pattern, "--", in.Path)
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, GrepOutput{}, s.fail(t, err)
	}
	// The sandbox's own timeout: an exec may not ask for more.
	r, err := t.b.Exec(ctx, t.id, ExecRequest{Argv: argv})
	if err != nil {
		return nil, GrepOutput{}, s.fail(t, err)
	}
	res := r.Result
	if res.Reason != sandbox.ReasonExit || (res.ExitCode > 1 && len(r.Stdout) == 0) {
		msg := res.Message
		if msg == "" {
			msg = strings.TrimSpace(escape(string(r.Stderr)))
		}
		return nil, GrepOutput{}, toolError("grep failed (%s, exit code %d): %s", res.Reason, res.ExitCode, msg)
	}
	out := GrepOutput{SandboxID: t.id, Matches: []GrepMatch{}, Truncated: res.StdoutTruncated}
	for line := range bytes.Lines(r.Stdout) {
		if len(out.Matches) >= maxMatches {
			out.Truncated = true
			break
		}
		name, rest, ok := bytes.Cut(line, []byte{0})
		if !ok {
			continue
		}
		num, text, ok := bytes.Cut(rest, []byte(":"))
		if !ok {
			continue
		}
		n, err := strconv.Atoi(string(num))
		if err != nil {
			continue
		}
		txt := strings.ToValidUTF8(strings.TrimRight(string(text), "\r\n"), "\uFFFD")
		if len(txt) > maxGrepLine {
			txt = strings.ToValidUTF8(txt[:maxGrepLine], "") + "…"
		}
		out.Matches = append(out.Matches, GrepMatch{Path: strings.ToValidUTF8(string(name), "\uFFFD"), Line: n, Text: txt})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d matching lines", len(out.Matches))
	if out.Truncated {
		b.WriteString(" (more were not shown)")
	}
	b.WriteString("\n")
	var lines strings.Builder
	for _, m := range out.Matches {
		fmt.Fprintf(&lines, "%s:%d:%s\n", m.Path, m.Line, m.Text)
	}
	f := newFramer([]byte(lines.String()))
	b.WriteString(f.note() + "\n")
	f.frame(&b, "matches", []byte(lines.String()), false)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, out, nil
}
