package agentd

import (
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestSpawnersBounded: no more than maxSpawners spawners' threads are
// alive at once; the next waits until one ends. Unbounded, each exec's
// spawner thread waited for a turn of the agent's one P after its fork,
// and at 16 clients on exec sockets they took the sandbox's process limit
// (decisions 78, 80).
func TestSpawnersBounded(t *testing.T) {
	testcap.Require(t, "root")
	e, err := newEngine(&agent.Config{Skip: []sandbox.Layer{sandbox.LayerCgroups, sandbox.LayerSeccomp, sandbox.LayerLandlock}})
	if err != nil {
		t.Fatal(err)
	}
	var alive []*spawner
	defer func() {
		for _, sp := range alive {
			close(sp.jobs)
		}
	}()
	for range maxSpawners {
		sp := e.newSpawner()
		if err := <-sp.ready; err != nil {
			t.Fatal(err)
		}
		alive = append(alive, sp)
	}
	next := make(chan *spawner, 1)
	go func() { next <- e.newSpawner() }()
	select {
	case sp := <-next:
		alive = append(alive, sp)
		t.Fatalf("a spawner started while %d were alive", maxSpawners)
	case <-time.After(200 * time.Millisecond):
	}
	close(alive[0].jobs)
	alive = alive[1:]
	select {
	case sp := <-next:
		alive = append(alive, sp)
	case <-time.After(10 * time.Second):
		t.Fatal("no spawner started after one of the others ended")
	}
}
