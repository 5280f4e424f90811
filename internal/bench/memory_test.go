package bench

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const smapsRollup = `55d4c9a4e000-7ffd2a1f6000 ---p 00000000 00:00 0                          [rollup]
Rss:                4312 kB
Pss:                2987 kB
Pss_Dirty:          1900 kB
Pss_Anon:           1800 kB
Pss_File:           1187 kB
Pss_Shmem:             0 kB
Shared_Clean:       2400 kB
Private_Dirty:      1900 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
`

const meminfo = `MemTotal:       24683916 kB
MemFree:        23420500 kB
MemAvailable:   24164460 kB
Buffers:           91624 kB
Cached:           874180 kB
SwapTotal:             0 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
`

func TestParsePss(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    uint64
		wantErr string
	}{
		{name: "real rollup, not Pss_Dirty or SwapPss", in: smapsRollup, want: 2987 * 1024},
		{name: "zero", in: "Rss: 0 kB\nPss: 0 kB\n", want: 0},
		{name: "no Pss line", in: "Rss: 12 kB\nPss_Anon: 3 kB\n", wantErr: "no Pss line"},
		{name: "empty", in: "", wantErr: "no Pss line"},
		{name: "not a number", in: "Pss: many kB\n", wantErr: "want a number of kB"},
		{name: "wrong unit", in: "Pss: 12 MB\n", wantErr: "want a number of kB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePss(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePss = %d, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParsePss = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestParseMemInfo(t *testing.T) {
	got, err := ParseMemInfo(strings.NewReader(meminfo))
	if err != nil {
		t.Fatal(err)
	}
	if want := (MemInfo{Total: 24683916 * 1024, Available: 24164460 * 1024}); got != want {
		t.Errorf("ParseMemInfo = %+v, want %+v", got, want)
	}

	for name, in := range map[string]string{
		"no MemAvailable (old kernel)": "MemTotal: 1000 kB\nMemFree: 500 kB\n",
		"no MemTotal":                  "MemAvailable: 1000 kB\n",
		"garbage value":                "MemTotal: lots kB\nMemAvailable: 1 kB\n",
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := ParseMemInfo(strings.NewReader(in)); err == nil {
				t.Errorf("ParseMemInfo(%q) = %+v, want an error", in, got)
			}
		})
	}
}

// fakeProc writes smaps_rollup files under a temporary /proc: pid → content.
func fakeProc(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, content := range files {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "smaps_rollup"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestPssOf(t *testing.T) {
	root := fakeProc(t, map[string]string{
		"10": "Pss: 100 kB\n",
		"11": "Pss: 20 kB\n",
		"12": "", // a zombie: no memory
	})
	// 10 twice (a process seen in two cgroups), 99 gone meanwhile.
	got, err := pssOf(root, []int{10, 11, 10, 12, 99})
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(120 * 1024); got != want {
		t.Errorf("pssOf = %d, want %d (each process once, gone and zombie ones as zero)", got, want)
	}

	bad := fakeProc(t, map[string]string{"7": "Rss: 5 kB\n"})
	if _, err := pssOf(bad, []int{7}); err == nil || !strings.Contains(err.Error(), "process 7") {
		t.Errorf("pssOf on a rollup without Pss = %v, want an error naming the process", err)
	}
}

func TestCgroupMemory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "memory.usage_in_bytes"), []byte("1863680\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.current"), []byte("4096\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := cgroupMemory(dir, false); err != nil || got != 1863680 {
		t.Errorf("v1: cgroupMemory = %d, %v; want memory.usage_in_bytes 1863680", got, err)
	}
	if got, err := cgroupMemory(dir, true); err != nil || got != 4096 {
		t.Errorf("v2: cgroupMemory = %d, %v; want memory.current 4096", got, err)
	}
	if _, err := cgroupMemory(t.TempDir(), false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroupMemory without the file = %v, want ErrNotExist", err)
	}
}

func TestMemGuard(t *testing.T) {
	mi := MemInfo{Total: 10 << 30, Available: 2 << 30}
	g, err := newMemGuard(func() (MemInfo, error) { return mi, nil })
	if err != nil {
		t.Fatal(err)
	}
	if g.reserve != 1<<30 {
		t.Fatalf("reserve = %d, want a tenth of 10 GiB", g.reserve)
	}
	// 1 GiB above the reserve at 32 MiB each: 32 sandboxes.
	if n, _, _ := g.allow(1000); n != 32 {
		t.Errorf("allow(1000) = %d, want 32", n)
	}
	if n, _, _ := g.allow(5); n != 5 {
		t.Errorf("allow(5) = %d, want 5", n)
	}
	g.learn(1<<20, 0) // measured 1 MiB: expect 2 MiB, but never under 4 MiB
	if n, _, _ := g.allow(1000); n != 256 {
		t.Errorf("after learning, allow(1000) = %d, want 256 (1 GiB / 4 MiB)", n)
	}
	// MemAvailable fell by 8 MiB a sandbox over the last step (the kernel's
	// share grows with the count): expect 12 MiB.
	g.learn(1<<20, 8<<20)
	if n, _, _ := g.allow(1000); n != 85 {
		t.Errorf("after a marginal of 8 MiB, allow(1000) = %d, want 85 (1 GiB / 12 MiB)", n)
	}
	mi.Available = 512 << 20 // below the reserve
	if n, _, _ := g.allow(10); n != 0 {
		t.Errorf("below the reserve, allow(10) = %d, want 0", n)
	}
	small, err := newMemGuard(func() (MemInfo, error) { return MemInfo{Total: 1 << 30, Available: 1 << 30}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if small.reserve != 512<<20 {
		t.Errorf("reserve on a 1 GiB host = %d, want the 512 MiB floor", small.reserve)
	}
}

func TestDensitySteps(t *testing.T) {
	tests := []struct {
		n    int
		want []int
	}{
		{200, []int{20, 50, 100, 200}},
		{20, []int{2, 5, 10, 20}},
		{4, []int{1, 2, 4}},
		{1, []int{1}},
		{3, []int{1, 3}},
	}
	for _, tt := range tests {
		if got := DensitySteps(tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("DensitySteps(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestBendAt(t *testing.T) {
	step := func(n int, p99 float64) DensityStep {
		return DensityStep{Sandboxes: n, Exec: Stats{N: 10, P50: 1, P99: p99}}
	}
	tests := []struct {
		name  string
		steps []DensityStep
		want  int
	}{
		{name: "flat", steps: []DensityStep{step(20, 4), step(50, 5), step(100, 7.9)}, want: 0},
		{name: "exactly twice is no bend", steps: []DensityStep{step(20, 4), step(50, 8)}, want: 0},
		{name: "first step past twice", steps: []DensityStep{step(20, 4), step(50, 5), step(100, 8.1), step(200, 20)}, want: 100},
		{name: "one step", steps: []DensityStep{step(20, 4)}, want: 0},
		{name: "none", steps: nil, want: 0},
		{name: "a step without execs is skipped", steps: []DensityStep{step(20, 4), {Sandboxes: 50}, step(100, 9)}, want: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BendAt(tt.steps); got != tt.want {
				t.Errorf("BendAt = %d, want %d", got, tt.want)
			}
		})
	}
}
