package microvm

import (
	"time"

	"golang.org/x/sys/unix"
)

// rdtsc reads the CPU's time-stamp counter.
func rdtsc() uint64

// tscKHz measures the frequency of the host's time-stamp counter against
// the monotonic clock, in kHz, or 0 when it cannot. An emulated (TCG)
// guest's counter runs at the host's rate, and a guest told that rate
// (tsc_early_khz) does not calibrate it: calibration against emulated
// timers fails now and then on a loaded host, and the guest then hangs
// at boot.
func tscKHz() int64 {
	// Each sample pairs a counter reading with the clock read just before
	// and after it; a pair is kept only when the two clock readings are
	// close, so that being preempted in between cannot skew it.
	sample := func() (uint64, int64, bool) {
		var a, b unix.Timespec
		for range 100 {
			_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &a)
			c := rdtsc()
			_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &b)
			if d := b.Nano() - a.Nano(); d >= 0 && d < 20000 {
				return c, (a.Nano() + b.Nano()) / 2, true
			}
		}
		return 0, 0, false
	}
	c0, t0, ok0 := sample()
	time.Sleep(40 * time.Millisecond)
	c1, t1, ok1 := sample()
	if !ok0 || !ok1 || t1 <= t0 || c1 <= c0 {
		return 0
	}
	return int64(float64(c1-c0) / float64(t1-t0) * 1e6)
}
