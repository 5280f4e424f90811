//go:build !linux

package agentdriver

import (
	"context"
	"errors"
	"net"
	"os"
)

// Sessions need Linux (pidfds, SO_PEERCRED); elsewhere they fail.

var errNoSessions = errors.New("sandbox sessions need Linux")

func SessionDir(string) (string, error) { return "", errNoSessions }

func DialSession(context.Context, string, <-chan struct{}) (*net.UnixConn, error) {
	return nil, errNoSessions
}

type Peer struct {
	Pid, UID int
	Pidfd    *os.File
}

func PeerOf(*net.UnixConn) (Peer, error)    { return Peer{}, errNoSessions }
func InCgroup(int, string) bool             { return false }
func StartTime(int) (uint64, error)         { return 0, errNoSessions }
func OpenPid(int, uint64) (*os.File, error) { return nil, errNoSessions }

type PidWatch struct{}

func WatchPidfd(*os.File, func()) (*PidWatch, error) { return nil, errNoSessions }
func (*PidWatch) Kill() error                        { return errNoSessions }
func (*PidWatch) Stop()                              {}
