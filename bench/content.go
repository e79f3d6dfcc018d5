package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// ErrCorrupt means that data read back differs from the data written: wrong
// bytes, or a file shorter or longer than written.
var ErrCorrupt = errors.New("bench: data read back differs from data written")

// corrupt wraps ErrCorrupt with where and what.
func corrupt(name string, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, name, fmt.Sprintf(format, args...))
}

// pattern defines the content of every benchmark file: the byte at offset off
// of the file with key k is src[(mix(k) + off) mod n]. The key names the file
// and, where a benchmark rewrites data, the generation, so a file system that
// returns another file's data, stale data, or data shifted by anything but a
// multiple of n fails verification. n is chosen not to be a power of two, so
// no block-aligned shift maps the pattern onto itself.
//
// buf holds src twice, so any run of up to n bytes is one contiguous slice
// and writes need no copy.
type pattern struct {
	buf []byte // src || src
	n   int
}

// defaultPatternLen is the pattern length of the Sprite benchmarks: just under
// 1 MiB and odd.
const defaultPatternLen = 1<<20 - 3

func newPattern(src []byte) *pattern {
	buf := make([]byte, 2*len(src))
	copy(buf, src)
	copy(buf[len(src):], src)
	return &pattern{buf: buf, n: len(src)}
}

// randomPattern is a pattern of n printable bytes from a seeded stream.
func randomPattern(n int, seed uint64) *pattern {
	r := rand.New(rand.NewPCG(seed, 0x636f6e7175657374)) // "conquest"
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(32 + r.IntN(95))
	}
	return newPattern(src)
}

// mix is the splitmix64 finaliser: it spreads consecutive keys over the
// pattern.
func mix(k uint64) uint64 {
	k += 0x9e3779b97f4a7c15
	k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9
	k = (k ^ (k >> 27)) * 0x94d049bb133111eb
	return k ^ (k >> 31)
}

// start is the index in src of the byte at offset off of file k.
func (p *pattern) start(k uint64, off int64) int {
	n := uint64(p.n)
	return int((mix(k)%n + uint64(off)%n) % n)
}

// view returns the content of file k at [off, off+size) without copying.
// Preconditions: size <= p.n.
func (p *pattern) view(k uint64, off int64, size int) []byte {
	s := p.start(k, off)
	return p.buf[s : s+size]
}

// fill writes the content of file k at [off, off+len(dst)) into dst.
func (p *pattern) fill(dst []byte, k uint64, off int64) {
	s := p.start(k, off)
	for len(dst) > 0 {
		c := copy(dst, p.buf[s:s+p.n])
		dst = dst[c:]
		s = (s + c) % p.n
	}
}

// verify checks that got is the content of file k at [off, off+len(got)).
func (p *pattern) verify(got []byte, k uint64, off int64, name string) error {
	s := p.start(k, off)
	for done := 0; done < len(got); {
		want := p.buf[s : s+min(p.n, len(got)-done)]
		part := got[done : done+len(want)]
		if string(part) != string(want) { // compiles to memequal, no allocation
			for i := range part {
				if part[i] != want[i] {
					return corrupt(name, "offset %d: read %#02x, wrote %#02x", off+int64(done+i), part[i], want[i])
				}
			}
		}
		done += len(want)
		s = (s + len(want)) % p.n
	}
	return nil
}
