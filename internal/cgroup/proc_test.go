package cgroup

import (
	"os"
	"reflect"
	"testing"
)

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Membership
	}{
		{name: "v2", in: "0::/airlock/sb1/agent\n", want: []Membership{{V2: true, Path: "/airlock/sb1/agent"}}},
		{
			name: "v1 co-mounted and named",
			in:   "4:cpu,cpuacct:/airlock/x\n1:name=systemd:/init.scope\n0::/\n",
			want: []Membership{
				{Controllers: []string{"cpu", "cpuacct"}, Path: "/airlock/x"},
				{Controllers: []string{"name=systemd"}, Path: "/init.scope"},
				{V2: true, Path: "/"},
			},
		},
		{name: "a path with colons", in: "3:memory:/a:b\n", want: []Membership{{Controllers: []string{"memory"}, Path: "/a:b"}}},
		{name: "junk", in: "nonsense\n\n", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseProcCgroup(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseProcCgroup(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestOfSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/cgroup"); err != nil {
		t.Skipf("no /proc/self/cgroup here: %v", err)
	}
	self, err := Of(0)
	if err != nil || len(self) == 0 {
		t.Fatalf("Of(0) = %v, %v; want this process's groups", self, err)
	}
	byPid, err := Of(os.Getpid())
	if err != nil || !reflect.DeepEqual(self, byPid) {
		t.Fatalf("Of(pid) = %v, %v; want %v", byPid, err, self)
	}
	if !Within(os.Getpid(), self[0].Path) {
		t.Errorf("Within(self, %q) = false", self[0].Path)
	}
	if Within(os.Getpid(), "/no-such-airlock-group") {
		t.Error("Within(self, /no-such-airlock-group) = true")
	}
}
