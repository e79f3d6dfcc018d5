package diskstore

import (
	"fmt"
	"io"
	"sync"
)

// MemDevice is an in-memory Device of fixed size. Sync does nothing: every
// write is "durable" at once. Use CrashDevice to model volatile caches.
type MemDevice struct {
	mu     sync.RWMutex
	b      []byte
	closed bool
}

// NewMemDevice returns a zero-filled in-memory device of size bytes.
func NewMemDevice(size int64) *MemDevice { return &MemDevice{b: make([]byte, size)} }

func checkRange(off int64, n int, size int64) error {
	if off < 0 || off > size || int64(n) > size-off {
		return fmt.Errorf("%w: [%d, +%d) beyond device size %d", io.ErrUnexpectedEOF, off, n, size)
	}
	return nil
}

// ReadAt implements Device.
func (m *MemDevice) ReadAt(p []byte, off int64) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return 0, ErrClosed
	}
	if err := checkRange(off, len(p), int64(len(m.b))); err != nil {
		return 0, err
	}
	return copy(p, m.b[off:]), nil
}

// WriteAt implements Device.
func (m *MemDevice) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	if err := checkRange(off, len(p), int64(len(m.b))); err != nil {
		return 0, fmt.Errorf("%w: %v", io.ErrShortWrite, err)
	}
	return copy(m.b[off:], p), nil
}

// Sync implements Device.
func (m *MemDevice) Sync() error { return nil }

// Size implements Device.
func (m *MemDevice) Size() int64 { return int64(len(m.b)) }

// Close implements Device. The contents stay readable through Bytes.
func (m *MemDevice) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

// Bytes is the device's memory (tests corrupt it on purpose).
func (m *MemDevice) Bytes() []byte { return m.b }

// Reopen returns a new open device over the same memory, as opening the
// same path again would (the receiver stays closed).
func (m *MemDevice) Reopen() *MemDevice {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return &MemDevice{b: m.b}
}
