package symlink_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/symlink"
)

// Vector is one case of testdata/symlink-vectors.json, which the Python
// SDK's tests read too (sdk/python/tests/test_symlinks.py).
type Vector struct {
	Name     string            `json:"name"`
	Links    map[string]string `json:"links"`
	Check    string            `json:"check"`
	Chain    int               `json:"chain"`
	OK       bool              `json:"ok"`
	Resolved string            `json:"resolved"`
}

// Vectors reads the shared test vectors, expanding chains.
func Vectors(t *testing.T) []Vector {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "symlink-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		MaxHops int      `json:"max_hops"`
		Cases   []Vector `json:"cases"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.MaxHops != symlink.MaxHops {
		t.Fatalf("the vectors say max_hops %d, the package %d", f.MaxHops, symlink.MaxHops)
	}
	for i, v := range f.Cases {
		if v.Chain > 0 {
			v.Links = map[string]string{}
			for j := 0; j < v.Chain; j++ {
				next := fmt.Sprintf("l%d", j+1)
				if j == v.Chain-1 {
					next = "end"
				}
				v.Links[fmt.Sprintf("l%d", j)] = next
			}
			v.Check = "l0"
			f.Cases[i] = v
		}
	}
	return f.Cases
}

func TestVectors(t *testing.T) {
	vs := Vectors(t)
	if len(vs) < 20 {
		t.Fatalf("only %d vectors", len(vs))
	}
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			target, ok := v.Links[v.Check]
			if !ok {
				t.Fatalf("the case checks %q, which is not one of its links", v.Check)
			}
			got, via, err := symlink.Resolve(v.Check, target, symlink.Map(v.Links))
			if !v.OK {
				if !errors.Is(err, symlink.ErrEscapes) {
					t.Fatalf("%q -> %q: got %q (via %v), %v; want it refused", v.Check, target, got, via, err)
				}
				return
			}
			if err != nil || got != v.Resolved {
				t.Fatalf("%q -> %q: got %q, %v; want %q", v.Check, target, got, err, v.Resolved)
			}
		})
	}
}

func TestLookupError(t *testing.T) {
	boom := errors.New("boom")
	_, _, err := symlink.Resolve("l", "a/b", func(string) (string, bool, error) { return "", false, boom })
	if !errors.Is(err, boom) || errors.Is(err, symlink.ErrEscapes) {
		t.Fatalf("got %v", err)
	}
}

func TestVia(t *testing.T) {
	_, via, err := symlink.Resolve("x", "y/y/../../etc", symlink.Map(map[string]string{"y": "."}))
	var e *symlink.Error
	if !errors.As(err, &e) || strings.Join(via, ",") != "y,y" || !strings.Contains(e.Error(), `through "y"`) {
		t.Fatalf("via %v, err %v", via, err)
	}
}

func TestLongTarget(t *testing.T) {
	// A target of many components, and links that multiply it, stay
	// bounded by MaxSteps.
	deep := strings.Repeat("a/", 2000)
	links := map[string]string{}
	for i := 0; i < symlink.MaxHops; i++ {
		links[fmt.Sprintf("l%d", i)] = deep + strings.Repeat("../", 2000) + fmt.Sprintf("l%d", i+1)
	}
	if _, _, err := symlink.Resolve("l0", links["l0"], symlink.Map(links)); !errors.Is(err, symlink.ErrEscapes) {
		t.Fatalf("got %v", err)
	}
}
