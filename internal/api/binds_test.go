package api

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestFourEyesKeyLineage: the key that asked cannot approve, nor can any
// key it made, directly or through keys those made (the security review's
// F8 had an operator mint a second operator key and approve its own
// request with it).
func TestFourEyesKeyLineage(t *testing.T) {
	e, _ := startPolicyEnv(t, askPolicy)
	ctx := context.Background()
	_, askerKey := e.secret(store.RoleOperator)
	asker, _ := client.New(e.url, askerKey)
	sb, err := asker.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := asker.Exec(ctx, sb.ID, client.ExecRequest{Code: "print('NEEDS-APPROVAL')", Language: "python"})
		done <- err
	}()
	id := waitPending(t, e, askerKey)["id"].(string)
	approve := func(key string) (int, string) {
		st, _, b := e.raw("POST", "/v1/approvals/"+id, key, strings.NewReader(`{"decision":"approve"}`), nil)
		return st, string(b)
	}
	if st, b := approve(askerKey); st != 403 {
		t.Fatalf("the asker approved its own request: %d %s", st, b)
	}
	mint := func(by string) string {
		st, _, b := e.raw("POST", "/v1/keys", by, strings.NewReader(`{"name":"sock","role":"operator"}`), nil)
		if st != 201 {
			t.Fatalf("mint a key: %d %s", st, b)
		}
		var k struct{ Secret string }
		_ = json.Unmarshal([]byte(b), &k)
		return k.Secret
	}
	child := mint(askerKey)
	grandchild := mint(child)
	for name, key := range map[string]string{"a key the asker made": child, "a key made by a key the asker made": grandchild} {
		if st, b := approve(key); st != 403 || !strings.Contains(b, "made") {
			t.Fatalf("%s approved the asker's request: %d %s", name, st, b)
		}
	}
	// Another operator's key may.
	_, opKey := e.secret(store.RoleOperator)
	if st, b := approve(opKey); st != 200 {
		t.Fatalf("an unrelated operator key: %d %s", st, b)
	}
	if err := <-done; err != nil {
		t.Fatalf("the approved exec: %v", err)
	}
}
