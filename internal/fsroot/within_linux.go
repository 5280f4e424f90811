package fsroot

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Within opens the directory name (following no symlink on the way) and
// runs f with its descriptor, readable, on a thread with the root's
// identity. f works below it with the *at calls and O_NOFOLLOW, and must
// not hand work to other goroutines: only this thread has the identity.
func (r *Root) Within(name string, f func(dirfd int) error) error {
	p, err := cleanPath(r.workdir, name)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	err = r.do(func(root int) error {
		fd, err := r.openHow(root, p, unix.O_RDONLY|unix.O_DIRECTORY, strictFlags)
		if err != nil {
			return fail("open", p, err)
		}
		defer unix.Close(fd)
		if err := checkFS(fd); err != nil {
			return fail("open", p, err)
		}
		return f(fd)
	})
	return err
}
