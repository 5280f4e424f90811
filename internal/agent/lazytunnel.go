package agent

// Lazy tunnel channels: a session that began without a tunnel channel
// (native's sandboxes without a network: decision 62 keeps them at two
// host descriptors) gets one when the host first dials one of its ports.
//
// The host makes a SOCK_SEQPACKET socketpair, writes one packet on its
// end, ExecFrameTunnel alone, and passes the other end on the session as
// it passes an exec socket (ExecSocketByte, execsock.go). The agent reads
// that first frame and makes the socket its tunnel channel (tunnel.go)
// instead of serving an exec on it; the dials then go as on a channel
// offered at the session's start: the agent answers each with the socket
// it connected inside the sandbox, which the host splices. The host closes
// the channel when the last connection dialled on it ends (and the agent
// drops its end on the close), so an idle sandbox holds no descriptor
// more; the next Dial opens another. An agent says LazyTunnels in Hello
// when it reads its session this way; an older one is never passed a
// channel and its ports stay on Dial streams. docs/decisions.md, 87.

// ExecFrameTunnel, alone in the first packet of a socket passed on the
// session, makes that socket the session's tunnel channel.
const ExecFrameTunnel = 'T'

// EnvLazyTunnels turns lazy tunnel channels off in the host ("0"): the
// exposed ports of a sandbox without a network then go by Dial streams,
// as before decision 87. They are on otherwise.
const EnvLazyTunnels = "AIRLOCK_LAZY_TUNNELS"
