package sandbox

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize reads a size as Docker writes it: a number with an optional
// binary unit k, m, g or t (any case, with or without "b"/"ib"), such as
// "256M", "1.5g" or "512k"; a plain number is bytes. Zero is allowed;
// negative, NaN and sizes past 1 PiB are not.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult, t = 1<<10, t[:n-1]
		case 'm':
			mult, t = 1<<20, t[:n-1]
		case 'g':
			mult, t = 1<<30, t[:n-1]
		case 't':
			mult, t = 1<<40, t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	n := v * float64(mult)
	if err != nil || math.IsNaN(n) || n < 0 || n > 1<<50 {
		return 0, fmt.Errorf("%w: size %q: write it like 256M, 1G or 512k", ErrInvalid, s)
	}
	return int64(n), nil
}
