package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

func TestErrorDecoding(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			t.Errorf("Authorization %q", r.Header.Get("Authorization"))
		}
		switch r.URL.Path {
		case "/v1/sandboxes/sb-1":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			w.Write([]byte(`{"error":{"code":"not_found","message":"sandbox sb-1 does not exist"}}`))
		case "/v1/sandboxes":
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(429)
			w.Write([]byte(`{"error":{"code":"rate_limited","message":"slow down"}}`))
		default:
			w.WriteHeader(502)
			w.Write([]byte("<html>bad gateway</html>"))
		}
	}))
	defer srv.Close()
	c, err := client.New(srv.URL+"/", "k")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = c.GetSandbox(ctx, "sb-1")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 404 || ce.Code != "not_found" || !client.IsNotFound(err) {
		t.Fatalf("not found: %#v", err)
	}
	_, err = c.CreateSandbox(ctx, client.CreateRequest{})
	if !errors.As(err, &ce) || ce.RetryAfter != 3*time.Second || !client.IsRateLimited(err) {
		t.Fatalf("rate limited: %#v", err)
	}
	_, err = c.ListKeys(ctx)
	if !errors.As(err, &ce) || ce.Status != 502 || ce.Code != "http_502" {
		t.Fatalf("non-JSON error: %#v", err)
	}
}

func TestNewAndFromEnv(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:7070", "ftp://x", "http://"} {
		if _, err := client.New(u, "k"); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	t.Setenv(client.EnvURL, "")
	if _, err := client.FromEnv(); err == nil {
		t.Error("FromEnv without AIRLOCK_URL")
	}
	t.Setenv(client.EnvURL, "http://127.0.0.1:7070")
	t.Setenv(client.EnvKey, "")
	if _, err := client.FromEnv(); err == nil {
		t.Error("FromEnv without AIRLOCK_API_KEY")
	}
	t.Setenv(client.EnvKey, "k")
	if _, err := client.FromEnv(); err != nil {
		t.Error(err)
	}
}
