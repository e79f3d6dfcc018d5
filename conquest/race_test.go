//go:build race

package conquest

// raceEnabled: the race detector slows memory-heavy tests about tenfold;
// they scale down to keep the package's tests fast.
const raceEnabled = true
