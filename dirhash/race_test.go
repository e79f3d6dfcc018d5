//go:build race

package dirhash

// raceEnabled: the race detector slows these single-threaded, memory-heavy
// simulations several times over; under it they run shorter.
const raceEnabled = true
