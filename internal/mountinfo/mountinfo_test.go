package mountinfo

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// hybridMountinfo is the cgroup part of the development machine's table.
const hybridMountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

// v2Mountinfo is a typical systemd host with cgroup v2 only.
const v2Mountinfo = `22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
25 24 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Mount
		wantErr string
	}{
		{
			name: "several optional fields",
			in:   "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue\n",
			want: []Mount{{Root: "/mnt1", Point: "/mnt2", Options: []string{"rw", "noatime"}, FSType: "ext3", Source: "/dev/root", SuperOptions: []string{"rw", "errors=continue"}}},
		},
		{
			name: "no optional fields",
			in:   "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
			want: []Mount{{Root: "/", Point: "/sys/fs/cgroup/unified", Options: []string{"rw", "relatime"}, FSType: "cgroup2", Source: "cgroup2", SuperOptions: []string{"rw"}}},
		},
		{
			name: "escaped space and backslash",
			in:   `50 22 0:40 /a\134b /mnt/my\040disk ro,nosuid - tmpfs my\040tmp rw` + "\n",
			want: []Mount{{Root: `/a\b`, Point: "/mnt/my disk", Options: []string{"ro", "nosuid"}, FSType: "tmpfs", Source: "my tmp", SuperOptions: []string{"rw"}}},
		},
		{
			name: "blank lines are skipped",
			in:   "\n41 31 0:38 / /x rw - cgroup2 cgroup2 rw\n\n",
			want: []Mount{{Root: "/", Point: "/x", Options: []string{"rw"}, FSType: "cgroup2", Source: "cgroup2", SuperOptions: []string{"rw"}}},
		},
		{
			name: "empty",
			in:   "",
			want: nil,
		},
		{
			name:    "no separator",
			in:      "36 35 98:0 /mnt1 /mnt2 rw,noatime ext3 /dev/root rw\n",
			wantErr: "line 1: malformed",
		},
		{
			name:    "separator too early",
			in:      "36 35 98:0 /mnt1 - ext3 /dev/root rw\n",
			wantErr: "line 1: malformed",
		},
		{
			name:    "truncated after separator",
			in:      "41 31 0:38 / /x rw - cgroup2 cgroup2 rw\n36 35 98:0 /mnt1 /mnt2 rw - ext3\n",
			want:    []Mount{{Root: "/", Point: "/x", Options: []string{"rw"}, FSType: "cgroup2", Source: "cgroup2", SuperOptions: []string{"rw"}}},
			wantErr: "line 2: malformed",
		},
		{
			name: "the well-formed lines around malformed ones",
			in:   "garbage\n41 31 0:38 / /x rw - cgroup2 cgroup2 rw\n- - -\n1 2 - cgroup cgroup rw,memory\n42 31 0:39 / /y ro - tmpfs tmpfs rw\n",
			want: []Mount{
				{Root: "/", Point: "/x", Options: []string{"rw"}, FSType: "cgroup2", Source: "cgroup2", SuperOptions: []string{"rw"}},
				{Root: "/", Point: "/y", Options: []string{"ro"}, FSType: "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw"}},
			},
			wantErr: "line 1: malformed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				var se *SyntaxError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &se) {
					t.Fatalf("Parse() error = %v, want a *SyntaxError containing %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("Parse() error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseLongLine(t *testing.T) {
	long := "1 0 0:1 / /" + strings.Repeat("x", 2<<20) + " rw - tmpfs tmpfs rw\n"
	_, err := Parse(strings.NewReader(long))
	var se *SyntaxError
	if err == nil || errors.As(err, &se) {
		t.Errorf("a 2 MiB line: %v, want a read error (not a syntax error)", err)
	}
}

func TestRead(t *testing.T) {
	mounts, err := Read()
	if err != nil {
		t.Skipf("no mount table here: %v", err)
	}
	for _, m := range mounts {
		if m.Point == "/" {
			return
		}
	}
	t.Errorf("this process's mount table has no root mount: %+v", mounts)
}

func TestUnescape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/plain", "/plain"},
		{`/a\040b`, "/a b"},
		{`/a\011b`, "/a\tb"},
		{`/tab\011x\012y`, "/tab\tx\ny"},
		{`/a\134b`, `/a\b`},
		{`/end\040`, "/end "},
		{`\040start`, " start"},
		{`/two\040\040`, "/two  "},
		{`/short\04`, `/short\04`},
		{`/notoctal\08x`, `/notoctal\08x`},
		{`/notoctal\09x`, `/notoctal\09x`},
		{`/toobig\777`, `/toobig\777`},
		{`/trailing\`, `/trailing\`},
	}
	for _, tt := range tests {
		if got := Unescape(tt.in); got != tt.want {
			t.Errorf("Unescape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(hybridMountinfo)
	f.Add(v2Mountinfo)
	f.Add(`50 22 0:40 /a\134b /mnt/my\040disk rw - tmpfs tmpfs rw`)
	f.Add("garbage\n1 2 - x\n")
	f.Fuzz(func(t *testing.T, in string) {
		mounts, err := Parse(strings.NewReader(in))
		var se *SyntaxError
		if err != nil && !errors.As(err, &se) {
			return
		}
		if err == nil && strings.Count(in, "\n") < len(mounts)-1 {
			t.Fatalf("%d mounts from %d lines", len(mounts), strings.Count(in, "\n")+1)
		}
		for _, m := range mounts {
			if m.Root == "" || m.Point == "" || m.FSType == "" || m.Source == "" {
				t.Fatalf("a mount with an empty field: %+v", m)
			}
			if len(m.Options) == 0 || len(m.SuperOptions) == 0 {
				t.Fatalf("a mount without options: %+v", m)
			}
		}
	})
}
