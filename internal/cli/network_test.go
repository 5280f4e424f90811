package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestNetworkFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    sandbox.Network
		wantErr string
	}{
		{name: "default none", want: sandbox.Network{}},
		{name: "allow host implies egress", args: []string{"--allow-host", "example.com", "--allow-host", "*.pypi.org:443"},
			want: sandbox.Network{Mode: sandbox.NetworkEgress, AllowHosts: []string{"example.com", "*.pypi.org:443"}}},
		{name: "allow address implies egress", args: []string{"--allow-address", "10.1.2.3:443"},
			want: sandbox.Network{Mode: sandbox.NetworkEgress, AllowAddresses: []string{"10.1.2.3:443"}}},
		{name: "report", args: []string{"--network", "egress", "--egress-mode", "report"},
			want: sandbox.Network{Mode: sandbox.NetworkEgress, Report: true}},
		{name: "none with allow", args: []string{"--network", "none", "--allow-host", "a.com"}, wantErr: "need --network egress"},
		{name: "bad mode", args: []string{"--egress-mode", "log"}, wantErr: `--egress-mode "log"`},
		{name: "bad network", args: []string{"--network", "host"}, wantErr: `network mode "host"`},
		{name: "bad host", args: []string{"--allow-host", "a b"}, wantErr: `host pattern "a b"`},
		{name: "bad address", args: []string{"--allow-address", "10.1.2.3"}, wantErr: `allow address "10.1.2.3"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := newRunCmd()
			if err := cmd.ParseFlags(append(tt.args, "--", "true")); err != nil {
				t.Fatal(err)
			}
			var f runFlags
			fl := cmd.Flags()
			f.network, _ = fl.GetString("network")
			f.egressMode, _ = fl.GetString("egress-mode")
			f.allowHosts, _ = fl.GetStringArray("allow-host")
			f.allowAddrs, _ = fl.GetStringArray("allow-address")
			got, err := f.networkSpec()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("networkSpec() = %+v, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Mode != tt.want.Mode || got.Report != tt.want.Report ||
				!slices.Equal(got.AllowHosts, tt.want.AllowHosts) || !slices.Equal(got.AllowAddresses, tt.want.AllowAddresses) {
				t.Fatalf("networkSpec() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
