//go:build !linux

package fullbin

import (
	"errors"
	"io/fs"
)

// inMemory: only Linux has memory files to run a program from.
func inMemory(fs.FS) (string, error) {
	return "", errors.New("the complete airlock cannot be installed here, and this system cannot run it from memory")
}
