// Package loopback holds no code, only a benchmark: what one more
// loopback TCP hop costs on this kernel, with the relay in user space
// (splice(2) or a copy) or in the kernel (a BPF sockhash redirecting each
// skb). It bounds every data path where airlock's daemon sits between two
// TCP sockets (an exposed port, an egress tunnel): see decision 82.
//
//	go test -run '^$' -bench LoopbackHop -benchtime 10x ./internal/bench/loopback/
package loopback
