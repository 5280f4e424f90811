package agent

// Tunnels handed over: where the agent shares the host's kernel (native),
// a tunnelled connection leaves the agent connection altogether.
//
// The host opens the session with a tunnel channel: a SOCK_SEQPACKET
// socketpair whose one end rides, as SCM_RIGHTS, on the session's first
// byte (DialLocal). An agent that takes it says so in Hello (Tunnels);
// from then on, instead of carrying a connection's bytes in an HTTP/2
// stream, it hands the host the connection's socket itself: each
// connection a command makes to the proxy port is one "egress" message
// with the accepted TCP socket, and each Dial (an exposed port) is a
// "dial" request from the host answered by a message with the socket the
// agent connected inside the sandbox. The host then reads and writes the
// sandbox's end of the connection directly, and its egress proxy moves a
// tunnel's bytes with splice(2): no copy through the agent, no HTTP/2
// framing, one process fewer woken per message (docs/decisions.md, 61).
//
// The proxy still decides at CONNECT, counts every byte and holds the
// limits: the socket is the sandbox's own connection to its proxy port,
// exactly what the stream carried. An agent that did not take the
// channel (an older one, or one whose transport cannot carry a
// descriptor: gVisor, a container's stdio, a virtio-serial port) is
// served on the HTTP/2 streams as before; so is a forwarded loopback
// address (EgressConfig.Forward), whose CONNECT the agent speaks itself.

// TunnelMsg is one message on the tunnel channel, either way.
type TunnelMsg struct {
	// Kind is "egress" (agent to host, with the command's connection) or
	// "dial" (a host's request, and the agent's answer).
	Kind string `json:"kind"`
	// ID pairs a dial answer with its request.
	ID uint64 `json:"id,omitempty"`
	// Port is a dial request's port.
	Port int `json:"port,omitempty"`
	// Code and Error say why a dial failed ("not_found": nothing listens
	// there); empty with the socket attached on success.
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// Kinds of TunnelMsg.
const (
	TunnelEgress = "egress"
	TunnelDial   = "dial"
)

// TunnelMsgMax bounds one tunnel message's bytes.
const TunnelMsgMax = 4 << 10

// tunnelsHanded bounds the connections the agent has handed to the host
// that the egress proxy has not finished with: beyond it (far beyond the
// proxy's default cap of 32 connections), a connection handed over is
// closed at once, so that a sandbox cannot spend the host's descriptors.
const tunnelsHanded = 256
