package image

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/registry"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestRegistryPullAuth: a registry that takes only one user's password
// (htpasswd) refuses a pull without credentials, naming the refusal, and
// serves one whose credentials are in the Docker config file, found as
// `docker` finds them ($DOCKER_CONFIG/config.json).
func TestRegistryPullAuth(t *testing.T) {
	testcap.Require(t, "registry")
	ctx := context.Background()
	r, err := registry.RunAuth(ctx, t.TempDir(), "team", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	img, err := registry.SmallImage()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Push("team/small:1", img)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	dockerConfig := func(t *testing.T, user, password string) {
		dir := t.TempDir()
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
		cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, r.Host, auth)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("DOCKER_CONFIG", dir)
	}
	pull := func(t *testing.T) (*Image, error) {
		s, err := Open(Options{Dir: filepath.Join(t.TempDir(), "cache"), Insecure: []string{r.Host}, MaxBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s.Pull(ctx, ref, nil)
	}
	t.Run("no credentials", func(t *testing.T) {
		t.Setenv("DOCKER_CONFIG", t.TempDir())
		if _, err := pull(t); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
			t.Fatalf("pull without credentials: %v, want the registry's refusal", err)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		dockerConfig(t, "team", "wrong")
		if _, err := pull(t); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
			t.Fatalf("pull with a wrong password: %v, want the registry's refusal", err)
		}
	})
	t.Run("docker config", func(t *testing.T) {
		dockerConfig(t, "team", "s3cret")
		got, err := pull(t)
		if err != nil {
			t.Fatalf("pull with the Docker config's credentials: %v", err)
		}
		if got.Digest != want.String() {
			t.Errorf("digest %s, want %s", got.Digest, want)
		}
	})
}
