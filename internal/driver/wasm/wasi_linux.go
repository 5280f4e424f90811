package wasm

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// WASI preview 1 as wazero implements it, with one function of airlock's
// own: poll_oneoff, which sleeps until an absolute time too (wasi-libc's
// clock_nanosleep with TIMER_ABSTIME, which CPython's time.sleep uses, and
// which wazero refuses), and wakes when the exec is killed.

// wasiErrno values used here.
const (
	errnoSuccess = 0
	errnoFault   = 21
	errnoInval   = 28
)

// Subscription and event tags.
const (
	eventClock   = 0
	eventFdRead  = 1
	eventFdWrite = 2
)

// Clock ids.
const (
	clockRealtime  = 0
	clockMonotonic = 1
)

// instantiateWASI instantiates wazero's wasi_snapshot_preview1 with
// airlock's poll_oneoff in runtime r.
func instantiateWASI(ctx context.Context, r wazero.Runtime) error {
	b := r.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	i32 := api.ValueTypeI32
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(pollOneoff), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}).
		WithParameterNames("in", "out", "nsubscriptions", "result.nevents").
		Export("poll_oneoff")
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("instantiate WASI: %w", err)
	}
	return nil
}

// stopIfKilled ends the module at once when its exec was killed, as
// proc_exit does: a program that sleeps in a loop (CPython's time.sleep
// sleeps again until its deadline) would otherwise spin until wazero's
// own watcher closes the module, which takes a scheduling round on a busy
// host.
func stopIfKilled(ctx context.Context) {
	if ctx.Err() != nil {
		panic(sys.NewExitError(sys.ExitCodeContextCanceled))
	}
}

// clocks are an exec's clocks: the host's wall clock, and a monotonic
// clock that starts at the sandbox's creation (nothing of the host's
// uptime shows).
type clocks struct {
	base time.Time
}

func (c clocks) walltime() (int64, int32) {
	now := time.Now()
	return now.Unix(), int32(now.Nanosecond())
}

func (c clocks) nanotime() int64 { return int64(time.Since(c.base)) }

// stateKey finds an exec's state in the context its module runs with.
type stateKey struct{}

// pollOneoff is WASI's poll_oneoff: file descriptors are always ready (a
// read of standard input then blocks in the read, which a kill ends), and
// a clock subscription sleeps, relative or until an absolute time, unless
// the exec is killed first.
func pollOneoff(ctx context.Context, mod api.Module, stack []uint64) {
	in, out, n, resultN := uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])
	stack[0] = pollErrno(ctx, mod, in, out, n, resultN)
}

func pollErrno(ctx context.Context, mod api.Module, in, out, n, resultN uint32) uint64 {
	stopIfKilled(ctx)
	if n == 0 {
		return errnoInval
	}
	mem := mod.Memory()
	subs, ok := mem.Read(in, n*48)
	if !ok {
		return errnoFault
	}
	subs = append([]byte(nil), subs...) // the module may change its memory meanwhile
	st, _ := ctx.Value(stateKey{}).(*execState)
	type ev struct {
		userdata uint64
		tag      byte
		errno    uint16
		due      time.Duration // a clock's, from now
	}
	le := binary.LittleEndian
	events := make([]ev, 0, n)
	fdReady := false
	for i := range n {
		s := subs[i*48 : (i+1)*48]
		e := ev{userdata: le.Uint64(s[0:8]), tag: s[8]}
		switch e.tag {
		case eventClock:
			id, timeout, flags := le.Uint32(s[16:20]), le.Uint64(s[24:32]), le.Uint16(s[40:42])
			d := time.Duration(min(timeout, 1<<63-1))
			if flags&1 != 0 { // subscription_clock_abstime
				var now int64
				if id == clockRealtime {
					sec, nsec := st.clocks.walltime()
					now = sec*1e9 + int64(nsec)
				} else {
					now = st.clocks.nanotime()
				}
				d = time.Duration(int64(min(timeout, 1<<63-1)) - now)
			}
			e.due = max(d, 0)
		case eventFdRead, eventFdWrite:
			fdReady = true
		default:
			return errnoInval
		}
		events = append(events, e)
	}
	var ready []ev
	if fdReady {
		for _, e := range events {
			if e.tag != eventClock || e.due == 0 {
				ready = append(ready, e)
			}
		}
	} else {
		first := events[0].due
		for _, e := range events {
			first = min(first, e.due)
		}
		if first > 0 {
			t := time.NewTimer(first)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				stopIfKilled(ctx)
			}
		}
		for _, e := range events {
			if e.due <= first {
				ready = append(ready, e)
			}
		}
	}
	buf := make([]byte, 32*len(ready))
	for i, e := range ready {
		o := buf[i*32 : (i+1)*32]
		le.PutUint64(o[0:8], e.userdata)
		le.PutUint16(o[8:10], e.errno)
		o[10] = e.tag
		if e.tag != eventClock {
			le.PutUint64(o[16:24], 1) // nbytes: at least one, or EOF
		}
	}
	if !mem.Write(out, buf) || !mem.WriteUint32Le(resultN, uint32(len(ready))) {
		return errnoFault
	}
	return errnoSuccess
}
