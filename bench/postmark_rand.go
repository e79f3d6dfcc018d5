package bench

// mt19937 is the pseudo-random generator of PostMark 1.5 and later: the
// Mersenne Twister in its 1999 integer version (sgenrand/genrand by Matsumoto
// and Nishimura), with the seeding of that version. Earlier PostMark releases
// used libc rand(); 1.5 replaced it, so this, not rand(), is what the Debian
// postmark binary draws from. Reproducing it bit for bit makes a run here do
// the same sequence of creates, deletes, reads and appends, with the same
// sizes, as postmark with the same parameters (postmark_test.go checks the
// counts against the binary's output).
type mt19937 struct {
	mt  [mtN]uint32
	mti int
}

const (
	mtN       = 624
	mtM       = 397
	mtMatrixA = 0x9908b0df
	mtUpper   = 0x80000000
	mtLower   = 0x7fffffff
)

// newMT is sgenrand(seed): a linear congruential generator fills the state,
// 16 bits at a time.
func newMT(seed uint32) *mt19937 {
	m := &mt19937{mti: mtN}
	for i := range m.mt {
		m.mt[i] = seed & 0xffff0000
		seed = 69069*seed + 1
		m.mt[i] |= (seed & 0xffff0000) >> 16
		seed = 69069*seed + 1
	}
	return m
}

// next is genrand().
func (m *mt19937) next() uint32 {
	if m.mti >= mtN {
		mag := func(y uint32) uint32 { return (y >> 1) ^ (mtMatrixA * (y & 1)) }
		kk := 0
		for ; kk < mtN-mtM; kk++ {
			m.mt[kk] = m.mt[kk+mtM] ^ mag(m.mt[kk]&mtUpper|m.mt[kk+1]&mtLower)
		}
		for ; kk < mtN-1; kk++ {
			m.mt[kk] = m.mt[kk+mtM-mtN] ^ mag(m.mt[kk]&mtUpper|m.mt[kk+1]&mtLower)
		}
		m.mt[mtN-1] = m.mt[mtM-1] ^ mag(m.mt[mtN-1]&mtUpper|m.mt[0]&mtLower)
		m.mti = 0
	}
	y := m.mt[m.mti]
	m.mti++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

// rnd is PostMark's RND(x): genrand() % x, and 0 without drawing when x <= 0.
func (m *mt19937) rnd(x int64) int64 {
	if x <= 0 {
		return 0
	}
	return int64(uint64(m.next()) % uint64(x))
}
