package agentd

import (
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// startDir is the directory the runtime started the agent in, read before
// the agent moves anywhere.
var startDir, _ = os.Getwd()

// runtimeDefaultPath is the PATH containerd and runc give a container
// whose image sets none. An image that sets exactly this one gets the
// sandbox's default (sandbox.DefaultPath) instead: the agent cannot tell
// the two apart.
const runtimeDefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// takeImageEnv gives cfg's commands the environment and working directory
// the runtime started the agent with, the image's
// (agent.ContainedConfig.ImageEnv): the environment under cfg.Env, less
// the names the agent sets itself, those the kubelet adds (the API
// server's address is not the workload's business) and the runtime's
// default PATH.
func takeImageEnv(cfg *agent.Config) {
	var env []string
	for _, kv := range os.Environ() {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.HasPrefix(k, "KUBERNETES_") {
			continue
		}
		switch k {
		case "HOME", "USER", "HOSTNAME", "PWD":
			continue
		case "PATH":
			if kv == runtimeDefaultPath {
				continue // the runtime's, for an image that sets none: the sandbox's default instead
			}
		}
		env = append(env, kv)
	}
	cfg.Env = append(env, cfg.Env...)
	if cfg.WorkDir == "" && startDir != "/" {
		cfg.WorkDir = startDir
	}
}
