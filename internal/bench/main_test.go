package bench

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
)

func TestMain(m *testing.M) { agenttest.Main(m) }
