package loopback

import (
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hopSize is one download.
const hopSize = 100 << 20

// BenchmarkLoopbackHop downloads 100 MiB a round from a server to a client,
// both in this process, straight or through a relay of two more sockets:
// "splice" (TCPConn.ReadFrom, splice(2) through a pipe, as the daemon's
// exposed ports and tunnels), "copy" (read and write through a 256 KiB
// buffer), "sockmap" (the relay's two sockets in a BPF sockhash whose
// sk_skb verdict program redirects each skb to the other: no user space
// after the setup). Besides MB/s it reports the process's CPU per 100 MiB
// (cpu-ms) and the machine's (host-cpu-ms, from /proc/stat: it includes
// the kernel's workers, which a sockmap redirect uses, and anything else
// running).
func BenchmarkLoopbackHop(b *testing.B) {
	for _, mode := range []string{"direct", "splice", "copy", "sockmap"} {
		b.Run(mode, func(b *testing.B) { benchHop(b, mode) })
	}
}

func benchHop(b *testing.B, mode string) {
	srv := listen(b)
	go serve(srv)
	if mode != "direct" {
		rl := listen(b)
		ready := make(chan error, 1)
		go func() { ready <- relay(rl, srv.Addr().String(), mode) }()
		c := dial(b, rl.Addr().String())
		if err := <-ready; err != nil {
			b.Skip(err)
		}
		runHop(b, c)
		return
	}
	runHop(b, dial(b, srv.Addr().String()))
}

func runHop(b *testing.B, c net.Conn) {
	defer c.Close()
	buf := make([]byte, 1<<20)
	b.SetBytes(hopSize)
	cpu0, host0 := cpuTime(), hostBusy()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write([]byte{1}); err != nil {
			b.Fatal(err)
		}
		for left := hopSize; left > 0; {
			n, err := c.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			left -= n
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms")
	b.ReportMetric(float64((hostBusy()-host0).Milliseconds())/float64(b.N), "host-cpu-ms")
}

func listen(b *testing.B) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	return ln
}

func dial(b *testing.B, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// serve answers each byte it reads with hopSize bytes, in 1 MiB writes.
func serve(ln net.Listener) {
	buf := make([]byte, 1<<20)
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			one := make([]byte, 1)
			for {
				if _, err := io.ReadFull(c, one); err != nil {
					return
				}
				for left := hopSize; left > 0; left -= len(buf) {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}
		}()
	}
}

// plain hides ReadFrom and WriteTo, so io.CopyBuffer copies.
type plain struct{ net.Conn }

// relay accepts one connection and joins it to one it dials to target;
// it returns once bytes may flow.
func relay(ln net.Listener, target, mode string) error {
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	s, err := net.Dial("tcp", target)
	if err != nil {
		return err
	}
	switch mode {
	case "splice":
		go func() { _, _ = c.(*net.TCPConn).ReadFrom(s); c.Close() }()
		go func() { _, _ = s.(*net.TCPConn).ReadFrom(c); s.Close() }()
	case "copy":
		go func() { _, _ = io.CopyBuffer(plain{c}, plain{s}, make([]byte, 256<<10)); c.Close() }()
		go func() { _, _ = io.CopyBuffer(plain{s}, plain{c}, make([]byte, 256<<10)); s.Close() }()
	case "sockmap":
		m, err := newRedirect()
		if err != nil {
			return err
		}
		if err := m.pair(c.(*net.TCPConn), s.(*net.TCPConn)); err != nil {
			return err
		}
		go func() { // both stay open until the client goes
			_, _ = c.Read(make([]byte, 1))
			c.Close()
			s.Close()
			m.close()
		}()
	}
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}

// hostBusy is the machine's non-idle time, all CPUs, from /proc/stat.
func hostBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	var t int64
	for i, s := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseInt(s, 10, 64)
		t += v
	}
	return time.Duration(t) * time.Second / 100 // USER_HZ
}

// The BPF helpers' numbers (include/uapi/linux/bpf.h).
const (
	helperSocketCookie   = 46
	helperSkRedirectHash = 72
)

// license and scratch are what bpf(2) attributes point to: globals, which
// the runtime never moves (a stack variable given as a uintptr may be).
var (
	license = []byte("GPL\x00")
	scratch struct {
		key uint64
		val uint32
	}
)

// redirect is a sockhash with an sk_skb verdict program: an skb that
// arrives on a socket in the map leaves by the socket stored under the
// first one's cookie.
type redirect struct{ sockhash, prog int }

func newRedirect() (*redirect, error) {
	fd, err := bpf(unix.BPF_MAP_CREATE, unsafe.Pointer(&struct{ typ, key, val, max, flags uint32 }{
		unix.BPF_MAP_TYPE_SOCKHASH, 8, 4, 16, 0}), 20)
	if err != nil {
		return nil, err
	}
	r := &redirect{sockhash: fd}
	insn := func(code, dst, src uint8, off int16, imm int32) []byte {
		return []byte{code, dst | src<<4, byte(off), byte(uint16(off) >> 8), byte(imm), byte(imm >> 8), byte(imm >> 16), byte(imm >> 24)}
	}
	var p []byte
	for _, i := range [][]byte{
		insn(0xbf, 6, 1, 0, 0),                              // r6 = skb
		insn(0x85, 0, 0, 0, helperSocketCookie),             // r0 = its socket's cookie
		insn(0x7b, 10, 0, -8, 0),                            // *(u64 *)(r10-8) = r0
		insn(0xbf, 1, 6, 0, 0),                              // r1 = skb
		insn(0x18, 2, 1, 0, int32(fd)), insn(0, 0, 0, 0, 0), // r2 = the sockhash
		insn(0xbf, 3, 10, 0, 0), insn(0x07, 3, 0, 0, -8), // r3 = &cookie
		insn(0xb7, 4, 0, 0, 0), // r4 = 0: out of the other socket
		insn(0x85, 0, 0, 0, helperSkRedirectHash),
		insn(0x95, 0, 0, 0, 0),
	} {
		p = append(p, i...)
	}
	attr := struct {
		typ, cnt       uint32
		insns, license uint64
		_              [64]byte
	}{typ: unix.BPF_PROG_TYPE_SK_SKB, cnt: uint32(len(p) / 8),
		insns: uint64(uintptr(unsafe.Pointer(&p[0]))), license: uint64(uintptr(unsafe.Pointer(&license[0])))}
	r.prog, err = bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(p) // attr holds it as a number only
	if err != nil {
		r.close()
		return nil, err
	}
	if _, err := bpf(unix.BPF_PROG_ATTACH, unsafe.Pointer(&struct{ target, prog, typ, flags, replace uint32 }{
		uint32(fd), uint32(r.prog), unix.BPF_SK_SKB_VERDICT, 0, 0}), 20); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// pair stores each socket under the other's cookie.
func (r *redirect) pair(a, b *net.TCPConn) error {
	ka, fa, err := cookie(a)
	if err != nil {
		return err
	}
	kb, fb, err := cookie(b)
	if err != nil {
		return err
	}
	for _, kv := range [][2]uint64{{ka, uint64(fb)}, {kb, uint64(fa)}} {
		scratch.key, scratch.val = kv[0], uint32(kv[1])
		if _, err := bpf(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&struct {
			fd, _      uint32
			key, value uint64
			flags      uint64
		}{fd: uint32(r.sockhash), key: uint64(uintptr(unsafe.Pointer(&scratch.key))), value: uint64(uintptr(unsafe.Pointer(&scratch.val)))}), 32); err != nil {
			return err
		}
	}
	return nil
}

func (r *redirect) close() {
	if r.prog > 0 {
		unix.Close(r.prog)
	}
	unix.Close(r.sockhash)
}

func cookie(c *net.TCPConn) (uint64, int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var k uint64
	var fd int
	if cerr := rc.Control(func(f uintptr) {
		fd = int(f)
		k, err = unix.GetsockoptUint64(int(f), unix.SOL_SOCKET, unix.SO_COOKIE)
	}); cerr != nil {
		return 0, 0, cerr
	}
	return k, fd, err
}

func bpf(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}
