//go:build !linux

package bench

// runscPrefix is runsc on PATH off Linux (where it does not run anyway).
func runscPrefix() []string { return runscArgs }
