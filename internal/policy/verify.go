package policy

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"sync"
)

// The built-in checks of the verifier.
const (
	// CheckDestructiveDelete: deleting / , the home directory or the
	// workspace root (rm -rf /, shutil.rmtree('/'), find / -delete).
	CheckDestructiveDelete = "destructive_delete"
	// CheckCredentialRead: touching credential paths (~/.ssh, /etc/shadow,
	// .aws/credentials, ...).
	CheckCredentialRead = "credential_read"
	// CheckPipeToShell: running what a download returns (curl ... | sh).
	CheckPipeToShell = "pipe_to_shell"
	// CheckForkBomb: self-replicating process shapes.
	CheckForkBomb = "fork_bomb"
	// CheckExfiltration: sending data to a host outside the network
	// allowlist (curl -d, requests.post, nc, /dev/tcp, scp).
	CheckExfiltration = "exfiltration"
)

// Checks sets what each built-in check does when it finds something:
// "deny" (the default), "ask" or "off".
type Checks struct {
	DestructiveDelete string `toml:"destructive_delete"`
	CredentialRead    string `toml:"credential_read"`
	PipeToShell       string `toml:"pipe_to_shell"`
	ForkBomb          string `toml:"fork_bomb"`
	Exfiltration      string `toml:"exfiltration"`
}

func (c Checks) byName() map[string]string {
	return map[string]string{
		CheckDestructiveDelete: c.DestructiveDelete, CheckCredentialRead: c.CredentialRead,
		CheckPipeToShell: c.PipeToShell, CheckForkBomb: c.ForkBomb, CheckExfiltration: c.Exfiltration,
	}
}

func (c Checks) validate() error {
	for name, v := range c.byName() {
		switch v {
		case "", "deny", "ask", "off":
		default:
			return fmt.Errorf("checks.%s = %q: use deny, ask or off", name, v)
		}
	}
	return nil
}

// verdict is what check leads to; "" when it is off.
func (c Checks) verdict(check string) Verdict {
	switch c.byName()[check] {
	case "off":
		return ""
	case "ask":
		return Ask
	}
	return Deny
}

// Finding is one thing a built-in check found.
type Finding struct {
	Check  string `json:"check"`
	Reason string `json:"reason"`
}

// Verify runs the built-in static checks on r's command line, code and
// path. They look for obvious shapes, not every way to write them: they
// stop an agent's mistake, not a determined attacker (the sandbox does).
func Verify(r Request, network Network) []Finding {
	var out []Finding
	add := func(check, format string, a ...any) {
		for _, f := range out {
			if f.Check == check {
				return
			}
		}
		out = append(out, Finding{Check: check, Reason: fmt.Sprintf(format, a...)})
	}
	switch r.Action {
	case ActionFileDelete, ActionFileWrite:
		if r.Action == ActionFileDelete && isRootTarget(r.Path) {
			add(CheckDestructiveDelete, "deleting %q would remove the whole workspace or file system", r.Path)
		}
		if m := credentialRE().FindString(r.Path); m != "" {
			add(CheckCredentialRead, "%q is a credential path", r.Path)
		}
		return out
	case ActionExec:
	default:
		return nil
	}
	text := r.Code
	if text == "" {
		text = strings.Join(r.Argv, " ")
	}
	if what := destructiveDelete(r.Argv, text); what != "" {
		add(CheckDestructiveDelete, "%s would delete the file system or the workspace root", what)
	}
	if m := credentialRE().FindString(text); m != "" {
		add(CheckCredentialRead, "the command touches the credential path %q", strings.TrimSpace(m))
	}
	for _, re := range pipeToShellREs() {
		if m := re.FindString(text); m != "" {
			add(CheckPipeToShell, "%q runs whatever a download returns: download the file, inspect it, then run it", shorten(m))
		}
	}
	if m := forkBomb(text); m != "" {
		add(CheckForkBomb, "%q is a fork bomb", shorten(m))
	}
	for _, h := range exfilHosts(text) {
		if !hostIn(network.Allow, h) {
			add(CheckExfiltration, "the command sends data to %q, which is not on the network allowlist", h)
		}
	}
	return out
}

func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// rootTargets are what a recursive delete must never hit.
var rootTargets = map[string]bool{
	"/": true, "/*": true, "/.": true, "~": true, "~/": true, "~/*": true, "$HOME": true, "${HOME}": true, "$HOME/*": true,
	"/workspace": true, "/workspace/*": true, "/workspace/.": true, "/home": true, "/usr": true, "/etc": true, "/root": true,
	"/home/*": true, "/usr/*": true, "/etc/*": true, "/root/*": true,
}

func isRootTarget(p string) bool {
	p = strings.Trim(p, `'"`)
	if rootTargets[p] {
		return true
	}
	if strings.HasPrefix(p, "/") {
		c := path.Clean(p)
		return rootTargets[c] || rootTargets[strings.TrimSuffix(c, "/*")]
	}
	return false
}

var (
	segmentSplit = lazy(`&&|\|\||[;&|\n` + "`" + `()]|\$\(`)
	rmtreeRE     = lazy(`(?:shutil\.)?rmtree\(\s*(?:r?['"]([^'"]*)['"]|(os\.path\.expanduser\(\s*['"]~['"]\s*\)|Path\.home\(\)|os\.environ\[['"]HOME['"]\]))`)
	findDeleteRE = lazy(`\bfind\s+(\S+)\s(?:[^\n;|&]*\s)?(?:-delete\b|-exec\s+rm\b)`)
	fsWipeRE     = lazy(`\bmkfs(?:\.\w+)?\s+/dev/|\bdd\s+[^\n;|]*\bof=/dev/(?:sd|nvme|vd|xvd|hd)`)
	goRemoveRE   = lazy(`\bos\.RemoveAll\(\s*"(/|/workspace)"\s*\)|\bfs\.rmSync\(\s*['"](/|/workspace)['"]`)
)

// destructiveDelete returns what in text deletes a root target, or "".
func destructiveDelete(argv []string, text string) string {
	if len(argv) > 0 && path.Base(argv[0]) == "rm" && rmIsDestructive(argv[1:]) {
		return "`" + shorten(strings.Join(argv, " ")) + "`"
	}
	for _, seg := range segmentSplit().Split(text, -1) {
		f := strings.Fields(seg)
		for i, w := range f {
			w = strings.Trim(w, `'"{`)
			if path.Base(w) == "rm" && (i == 0 || isPrefixWord(f[i-1])) && rmIsDestructive(f[i+1:]) {
				return "`" + shorten(seg) + "`"
			}
		}
	}
	for _, m := range rmtreeRE().FindAllStringSubmatch(text, -1) {
		if m[2] != "" || isRootTarget(m[1]) {
			return "`" + m[0] + "`"
		}
	}
	for _, m := range findDeleteRE().FindAllStringSubmatch(text, -1) {
		if isRootTarget(m[1]) {
			return "`" + shorten(m[0]) + "`"
		}
	}
	if m := goRemoveRE().FindString(text); m != "" {
		return "`" + m + "`"
	}
	if m := fsWipeRE().FindString(text); m != "" {
		return "`" + shorten(m) + "`"
	}
	return ""
}

// isPrefixWord says w runs the next word as a command.
func isPrefixWord(w string) bool {
	switch strings.Trim(w, `'"`) {
	case "sudo", "exec", "xargs", "nohup", "then", "do", "else", "command", "env", "time", "-c", "sh", "bash":
		return true
	}
	return false
}

// rmIsDestructive says rm args are recursive and name a root target.
func rmIsDestructive(args []string) bool {
	recursive, target := false, false
	for _, a := range args {
		a = strings.Trim(a, `'",`)
		switch {
		case a == "--recursive" || a == "--no-preserve-root":
			recursive = true
		case strings.HasPrefix(a, "--"):
		case strings.HasPrefix(a, "-") && len(a) > 1:
			if strings.ContainsAny(a, "rR") {
				recursive = true
			}
		default:
			if isRootTarget(a) {
				target = true
			}
		}
	}
	return recursive && target
}

// credentialRE matches paths of credentials an agent has no business
// reading.
var credentialRE = lazy(`(?:~|\$HOME|\$\{HOME\}|/root|/home/[^/\s'"]+)?/\.ssh(?:/|\b)|` +
	`\bid_(?:rsa|dsa|ecdsa|ed25519)\b|/etc/(?:g?shadow|sudoers)\b|\.aws/credentials|\.aws/config\b|` +
	`\.netrc\b|\.git-credentials\b|\.docker/config\.json|\.kube/config\b|\.config/gcloud\b|` +
	`/var/run/secrets/kubernetes\.io|\.gnupg/|/proc/(?:self|1|\d+)/environ\b`)

var pipeToShellREs = lazyAll(
	`\b(?:curl|wget|fetch)\b[^|;&\n]*\|\s*(?:sudo\s+)?(?:env\s+\S+\s+)?(?:/\S*/)?(?:ba|z|da|k|fi)?sh\b`,
	`\b(?:curl|wget)\b[^|;&\n]*\|\s*(?:sudo\s+)?(?:python3?|perl|ruby|node)(?:\s+-)?\s*(?:$|[;&|)\n])`,
	`\b(?:ba|z|da)?sh\s+(?:-c\s+)?["']?\$\(\s*(?:curl|wget)\b`,
	`\b(?:ba|z|da)?sh\s+<\(\s*(?:curl|wget)\b`,
	`\beval\s+["']?\$\(\s*(?:curl|wget)\b`,
)

var (
	shellFuncBombRE = lazy(`([A-Za-z_:][\w:]*)\s*\(\s*\)\s*\{([^}]*)\}`)
	forkLoopREs     = lazyAll(
		`while\s*\(?\s*(?:True|1|true)\s*\)?\s*:?\s*\n?\s*(?:os\.)?fork\(\)`,
		`for\s*\(\s*;\s*;\s*\)\s*\{?\s*fork\(\)`,
		`\bfork\s+while\s+fork\b`,
		`while\s*\(?\s*(?:True|1|true)\s*\)?\s*:?\s*\n?\s*(?:subprocess\.Popen|os\.system|multiprocessing\.Process)\(\s*\[?\s*(?:sys\.executable|['"]python3?['"])[^\n]*__file__`,
	)
)

// forkBomb returns the fork-bomb shape in text, or "".
func forkBomb(text string) string {
	for _, m := range shellFuncBombRE().FindAllStringSubmatch(text, -1) {
		name, body := m[1], strings.Join(strings.Fields(m[2]), "")
		if strings.Contains(body, "&") && (strings.Contains(body, name+"|"+name) || strings.Contains(body, name+"&"+name)) {
			return m[0]
		}
	}
	for _, re := range forkLoopREs() {
		if m := re.FindString(text); m != "" {
			return m
		}
	}
	return ""
}

var (
	// Uploads: a URL host in a command that sends data.
	curlSendRE   = lazy(`\bcurl\b[^\n;|&]*?(?:\s-d\b|\s--data\S*|\s-F\b|\s--form\b|\s-T\b|\s--upload-file\b|\s-X\s*(?:POST|PUT))[^\n;|&]*`)
	wgetSendRE   = lazy(`\bwget\b[^\n;|&]*--post-(?:data|file)[^\n;|&]*`)
	pySendRE     = lazy(`\b(?:requests|httpx|session|client)\.(?:post|put|patch)\(\s*[fr]?['"]([^'"]+)['"]`)
	urlHostRE    = lazy(`https?://([A-Za-z0-9.-]+(?::\d+)?)`)
	netcatRE     = lazy(`\b(?:nc|ncat|netcat|socat)\s+(?:-\w+\s+)*([A-Za-z0-9][A-Za-z0-9.-]*\.[A-Za-z]{2,}|\d+\.\d+\.\d+\.\d+)\s+\d+`)
	devTCPRE     = lazy(`/dev/(?:tcp|udp)/([A-Za-z0-9.-]+)/\d+`)
	scpRE        = lazy(`\b(?:scp|rsync)\s[^\n;|&]*?\s[\w.-]+@([A-Za-z0-9.-]+):`)
	pySocketRE   = lazy(`\.connect\(\s*\(\s*['"]([A-Za-z0-9.-]+)['"]\s*,\s*\d+`)
	localHostsRE = lazy(`^(?:localhost|127\.\d+\.\d+\.\d+|::1)$`)
)

// exfilHosts returns the hosts text obviously sends data to.
func exfilHosts(text string) []string {
	var hosts []string
	addURL := func(s string) {
		for _, m := range urlHostRE().FindAllStringSubmatch(s, -1) {
			hosts = append(hosts, m[1])
		}
	}
	for _, m := range curlSendRE().FindAllString(text, -1) {
		addURL(m)
	}
	for _, m := range wgetSendRE().FindAllString(text, -1) {
		addURL(m)
	}
	for _, m := range pySendRE().FindAllStringSubmatch(text, -1) {
		addURL(m[1])
	}
	for _, re := range []*regexp.Regexp{netcatRE(), devTCPRE(), scpRE(), pySocketRE()} {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			hosts = append(hosts, m[1])
		}
	}
	out := hosts[:0]
	for _, h := range hosts {
		bare := h
		if i := strings.LastIndexByte(h, ':'); i >= 0 {
			bare = h[:i]
		}
		if !localHostsRE().MatchString(bare) {
			out = append(out, h)
		}
	}
	return out
}

// lazy compiles expr on first use. Compiled at package initialisation,
// the checks' expressions cost every start of airlock 0.26 ms, whether or
// not it decided anything.
func lazy(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// lazyAll is lazy for a list of expressions.
func lazyAll(exprs ...string) func() []*regexp.Regexp {
	return sync.OnceValue(func() []*regexp.Regexp {
		res := make([]*regexp.Regexp, len(exprs))
		for i, e := range exprs {
			res[i] = regexp.MustCompile(e)
		}
		return res
	})
}
