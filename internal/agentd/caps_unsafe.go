package agentd

import "unsafe"

// uintptrOf passes a pointer to a raw system call.
func uintptrOf[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }
