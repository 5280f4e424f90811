package agentdriver

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestUnavailable(t *testing.T) {
	u := Unavailable{Driver: "native", Needs: "Linux"}
	if u.Name() != "native" {
		t.Errorf("Name = %q", u.Name())
	}
	_, cerr := u.Create(context.Background(), sandbox.Spec{})
	for _, err := range []error{u.Probe(context.Background()), cerr} {
		if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "native driver") || !strings.Contains(err.Error(), "it needs Linux") {
			t.Errorf("%v: want ErrUnsupported saying the native driver needs Linux", err)
		}
	}
	if err := u.Sweep(context.Background()); err != nil {
		t.Errorf("Sweep: %v", err)
	}
	if !reflect.DeepEqual(u.Capabilities(), sandbox.Capabilities{}) {
		t.Errorf("Capabilities = %+v, want none", u.Capabilities())
	}
}
