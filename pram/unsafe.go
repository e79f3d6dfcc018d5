package pram

import (
	"sync/atomic"
	"unsafe"
)

// word returns the 8-byte word at b[0:8] as an atomic-capable pointer.
// Preconditions: len(b) >= 8 and &b[0] is 8-byte aligned (the mapping is page
// aligned and callers pass 8-aligned offsets; checked by Arena.word8).
func word(b []byte) *uint64 { return (*uint64)(unsafe.Pointer(&b[0])) }

// store64 publishes v with a single 8-byte store, so a crash (kill -9) sees
// either the old or the new value, never a mix.
func store64(b []byte, v uint64) { atomic.StoreUint64(word(b), v) }

// load64 reads an 8-byte word written by store64.
func load64(b []byte) uint64 { return atomic.LoadUint64(word(b)) }

// offsetOf returns the arena offset of addr, an address a fault reported,
// and whether it lies inside the mapping.
func (a *Arena) offsetOf(addr uintptr) (uint64, bool) {
	m := a.m
	if len(m) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	if addr < base || addr-base >= uintptr(len(m)) {
		return 0, false
	}
	return uint64(addr - base), true
}
