//go:build !linux

package procid

import (
	"errors"
	"net"
	"os"
)

// Pidfds, SO_PEERCRED and /proc need Linux; elsewhere every call fails.
var errNoProc = errors.New("process identities need Linux")

type Peer struct {
	Pid, UID int
	Pidfd    *os.File
}

func PeerOf(*net.UnixConn) (Peer, error)    { return Peer{}, errNoProc }
func InCgroup(int, string) bool             { return false }
func StartTime(int) (uint64, error)         { return 0, errNoProc }
func OpenPid(int, uint64) (*os.File, error) { return nil, errNoProc }

type PidWatch struct{}

func WatchPidfd(*os.File, func()) (*PidWatch, error) { return nil, errNoProc }
func (*PidWatch) Kill() error                        { return errNoProc }
func (*PidWatch) Stop()                              {}
