package agentd

import (
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// startDir is the directory the runtime started the agent in, read before
// the agent moves anywhere.
var startDir, _ = os.Getwd()

// takeImageEnv gives cfg's commands the environment and working directory
// the runtime started the agent with, the image's
// (agent.ContainedConfig.ImageEnv): the environment under cfg.Env, less
// the names the agent sets itself and those the kubelet adds (the API
// server's address is not the workload's business).
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
		}
		env = append(env, kv)
	}
	cfg.Env = append(env, cfg.Env...)
	if cfg.WorkDir == "" && startDir != "/" {
		cfg.WorkDir = startDir
	}
}
