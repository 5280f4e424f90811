//go:build !linux

package bench

import "context"

// runscPrefix is runsc on PATH off Linux (where it does not run anyway).
func runscPrefix() []string { return runscArgs }

// runscVersion is what runsc on PATH says, off Linux.
func runscVersion(ctx context.Context) string {
	return versionOf(ctx, "runsc version ", "runsc", "--version")
}
