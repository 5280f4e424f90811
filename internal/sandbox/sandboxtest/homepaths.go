package sandboxtest

import "github.com/airlock-sandbox/airlock/internal/sandbox"

// HomePath is one case of sandbox.PolicyPath: in a sandbox whose
// Spec.Home is Home, Path (as a caller writes it) is judged by the policy
// as Want.
type HomePath struct {
	Home, Path, Want string
}

// HomePaths are the cases every surface that hands a path to the policy
// is tested with (the file APIs, E2B's, MCP's, an exec's directory): the
// home and /workspace both ways, "..", trailing slashes, relative paths
// from the home, and names that only begin like the home.
var HomePaths = []HomePath{
	{sandbox.E2BHome, "/home/user/data/x", "/workspace/data/x"},
	{sandbox.E2BHome, "/home/user", "/workspace"},
	{sandbox.E2BHome, "/home/user/", "/workspace"},
	{sandbox.E2BHome, "/home/user//data/./x/", "/workspace/data/x"},
	{sandbox.E2BHome, "/home/user/secret", "/workspace/secret"},
	{sandbox.E2BHome, "/home/user/a/../secret", "/workspace/secret"},
	{sandbox.E2BHome, "/workspace/secret", "/workspace/secret"},
	{sandbox.E2BHome, "/workspace/secret/", "/workspace/secret"},
	{sandbox.E2BHome, "/workspace/../home/user/secret", "/workspace/secret"},
	{sandbox.E2BHome, "/home/user/../../workspace/secret", "/workspace/secret"},
	{sandbox.E2BHome, "secret", "/workspace/secret"},
	{sandbox.E2BHome, "./data/../secret/", "/workspace/secret"},
	{sandbox.E2BHome, "../user/secret", "/workspace/secret"},
	{sandbox.E2BHome, ".", "/workspace"},
	{sandbox.E2BHome, "../other/x", "/home/other/x"},
	{sandbox.E2BHome, "../../etc/passwd", "/etc/passwd"},
	{sandbox.E2BHome, "/home/user/../../etc/passwd", "/etc/passwd"},
	{sandbox.E2BHome, "/home/username/x", "/home/username/x"},
	{sandbox.E2BHome, "/home/userx", "/home/userx"},
	{sandbox.E2BHome, "/tmp/x/", "/tmp/x"},
	{sandbox.E2BHome, "", ""},
	{"", "/home/user/secret", "/home/user/secret"},
	{"", "secret", "/workspace/secret"},
	{"", "/workspace/", "/workspace"},
	{"", "/workspace/a/../secret", "/workspace/secret"},
}
