// Package agentdriver is the host half of every driver whose sandbox runs
// airlock's agent (native, gvisor, and the drivers that start the same agent
// in a container, a virtual machine or a Pod): exec, files, egress and the
// checks of the agent's word against the host's own counters, over one agent
// connection, written once. A driver starts its environment, dials the
// agent, and supplies what differs (Host).
package agentdriver
