//go:build !linux

package agentdriver

import (
	"context"
	"errors"
	"net"
)

// Sessions need Linux (pidfds, SO_PEERCRED); elsewhere they fail.

var errNoSessions = errors.New("sandbox sessions need Linux")

func SessionDir(string) (string, error) { return "", errNoSessions }

func DialSession(context.Context, string, <-chan struct{}) (*net.UnixConn, error) {
	return nil, errNoSessions
}
