package egress

import (
	"fmt"
	"io"
	"testing"
)

// BenchmarkInterceptGet: one small HTTPS GET on a keep-alive connection
// through the proxy, tunnelled (tunnel.test) and intercepted (api.test,
// which also gets its secrets put in), HTTP/1.1 and HTTP/2.
func BenchmarkInterceptGet(b *testing.B) {
	for _, c := range []struct{ name, host string }{{"tunnel", "tunnel.test"}, {"intercept", "api.test"}} {
		for _, h2 := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/h2=%v", c.name, h2), func(b *testing.B) {
				f := newInterceptFixture(b, func(o *Options) {
					o.Logger, o.Decided = nil, nil
					o.Limits.RequestsPerSecond, o.Limits.Burst = 1e9, 1<<30
				})
				roots := f.pki.pool
				if c.host == "api.test" {
					roots = f.sandboxRoots()
				}
				cl := f.client(roots, h2)
				u := fmt.Sprintf("https://%s:%d/repos/x", c.host, f.srv.port)
				b.ResetTimer()
				for b.Loop() {
					resp, err := cl.Get(u)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
}

// BenchmarkInterceptDownload: a 1 MiB HTTPS download, tunnelled and
// intercepted (b.SetBytes: MB/s).
func BenchmarkInterceptDownload(b *testing.B) {
	for _, c := range []struct{ name, host string }{{"tunnel", "tunnel.test"}, {"intercept", "api.test"}} {
		b.Run(c.name, func(b *testing.B) {
			f := newInterceptFixture(b, func(o *Options) {
				o.Logger, o.Decided = nil, nil
				o.Limits = Limits{RequestsPerSecond: 1e9, Burst: 1 << 30, MaxBytes: 1 << 50}
			})
			roots := f.pki.pool
			if c.host == "api.test" {
				roots = f.sandboxRoots()
			}
			cl := f.client(roots, true)
			u := fmt.Sprintf("https://%s:%d/big", c.host, f.srv.port)
			b.SetBytes(1 << 20)
			b.ResetTimer()
			for b.Loop() {
				resp, err := cl.Get(u)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if n != 1<<20 {
					b.Fatalf("got %d bytes", n)
				}
			}
		})
	}
}
