package native

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestUserNamespaceOwner: a sandbox's user namespace is owned by the first
// uid of its own range, not by root, so that what the kernel counts per
// user at the host's level (inotify instances and watches, pending
// signals) comes out of a pool of the sandbox's own (docs/decisions.md,
// 44); and the forking thread is root again afterwards.
func TestUserNamespaceOwner(t *testing.T) {
	requireNative(t)
	in := sandboxT(t, newDriver(t), sandbox.Spec{})
	h := in.(*agentdriver.Instance).Host().(*host)
	f, err := os.Open("/proc/" + strconv.Itoa(h.agentPid) + "/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var owner uint32
	if err := ioctlOwner(int(f.Fd()), &owner); err != nil {
		t.Fatalf("NS_GET_OWNER_UID: %v", err)
	}
	if int(owner) != h.base {
		t.Errorf("the sandbox's user namespace is owned by uid %d, want its range's first uid %d", owner, h.base)
	}
	// A second sandbox comes from the same forking thread: were it not
	// root again, this one would fail or be owned by the first's uid.
	in2 := sandboxT(t, newDriver(t), sandbox.Spec{})
	h2 := in2.(*agentdriver.Instance).Host().(*host)
	f2, err := os.Open("/proc/" + strconv.Itoa(h2.agentPid) + "/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if err := ioctlOwner(int(f2.Fd()), &owner); err != nil {
		t.Fatalf("NS_GET_OWNER_UID: %v", err)
	}
	if int(owner) != h2.base {
		t.Errorf("the second sandbox's user namespace is owned by uid %d, want %d", owner, h2.base)
	}
}

// ioctlOwner is ioctl(NS_GET_OWNER_UID) on a namespace descriptor.
func ioctlOwner(fd int, owner *uint32) error {
	v, err := unix.IoctlGetUint32(fd, unix.NS_GET_OWNER_UID)
	*owner = v
	return err
}
