package wasm

import (
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// pageSize is a WebAssembly page.
const pageSize = 64 << 10

// budget is a sandbox's memory limit, shared by the linear memories of
// every module it runs at once, as a cgroup is shared by a container's
// processes.
type budget struct {
	limit int64
	used  atomic.Int64
}

// take reserves n bytes, or reports that the limit would be passed.
func (b *budget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *budget) give(n int64) { b.used.Add(-n) }

// allocator gives each module of one exec a linear memory of its own, held
// to the sandbox's budget. The memory is an anonymous mapping reserved
// once at the most the module may ever have (no more than the sandbox's
// limit) and made accessible as it grows, so growing never copies, and
// closing the module returns the memory to the host at once.
type allocator struct {
	b *budget
	// refused is set when a memory.grow was refused at the limit.
	refused atomic.Bool
	// peak is the largest linear memory any module of the exec had.
	peak atomic.Int64
	// prepaid is taken from the budget before the module is instantiated,
	// so that its initial memory never fails inside wazero; its first
	// Reallocate uses it up.
	prepaid atomic.Int64
	// reclaim, when set, frees memory the sandbox holds for later (a warm
	// python3) and reports whether it freed any: an exec's need comes
	// before a warm interpreter's.
	reclaim func() bool
}

// take takes n bytes of the budget, reclaiming memory held for later when
// the budget is short.
func (a *allocator) take(n int64) bool {
	if a.b.take(n) {
		return true
	}
	return a.reclaim != nil && a.reclaim() && a.b.take(n)
}

// prepay takes n bytes of the budget for the module's initial memory.
func (a *allocator) prepay(n int64) bool {
	if !a.take(n) {
		return false
	}
	a.prepaid.Add(n)
	return true
}

// settle gives back what the initial memory did not use.
func (a *allocator) settle() { a.b.give(a.prepaid.Swap(0)) }

var _ experimental.MemoryAllocator = (*allocator)(nil)

// Allocate reserves the address space of a linear memory of at most max
// bytes. The reservation costs no memory; it fails (and so the
// instantiation) only when the host has no address space left.
func (a *allocator) Allocate(_, maxBytes uint64) experimental.LinearMemory {
	reserve := min(maxBytes, uint64(a.b.limit))
	reserve = (reserve + pageSize - 1) &^ (pageSize - 1)
	m := &linearMemory{a: a, reserve: reserve}
	if reserve > 0 {
		buf, err := unix.Mmap(-1, 0, int(reserve), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err == nil {
			m.buf = buf
		}
	}
	return m
}

// linearMemory is one module's memory.
type linearMemory struct {
	a       *allocator
	reserve uint64
	buf     []byte // the whole reservation; nil when it failed or after Free
	size    uint64 // the accessible part, taken from the budget
	mu      sync.Mutex
}

// Reallocate grows the memory to size bytes; nil refuses (memory.grow then
// returns -1 to the module, which sees an allocation failure).
func (m *linearMemory) Reallocate(size uint64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buf == nil {
		return nil
	}
	if size <= m.size {
		return m.buf[:size:size]
	}
	if size > m.reserve {
		m.a.refused.Store(true)
		return nil
	}
	grow := int64(size - m.size)
	if pre := m.a.prepaid.Load(); pre >= grow && m.a.prepaid.CompareAndSwap(pre, pre-grow) {
		// paid for before the instantiation
	} else if !m.a.take(grow) {
		m.a.refused.Store(true)
		return nil
	}
	if err := unix.Mprotect(m.buf[m.size:size], unix.PROT_READ|unix.PROT_WRITE); err != nil {
		m.a.b.give(grow)
		m.a.refused.Store(true)
		return nil
	}
	m.size = size
	for {
		p := m.a.peak.Load()
		if int64(size) <= p || m.a.peak.CompareAndSwap(p, int64(size)) {
			break
		}
	}
	return m.buf[:size:size]
}

// Free unmaps the memory and gives its size back to the budget.
func (m *linearMemory) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buf == nil {
		return
	}
	_ = unix.Munmap(m.buf)
	m.buf = nil
	m.a.b.give(int64(m.size))
	m.size = 0
}
