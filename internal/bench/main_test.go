package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
	"github.com/airlock-sandbox/airlock/internal/testrig/dockerd"
)

// The engine and image of the docker rows: the test rig's, where an engine
// runs (or can be started) here.
var (
	dockerImage string
	dockerErr   error
)

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	eng, err := dockerd.Ensure(ctx, os.Stderr)
	if err == nil {
		os.Setenv("DOCKER_HOST", eng.Host)
		dockerImage, err = dockerd.TestImage(ctx, eng.Host, os.Stderr)
	}
	cancel()
	dockerErr = err
	code := agenttest.Run(m)
	eng.Release()
	os.Exit(code)
}
