//go:build race

package diskstore

// raceEnabled: the race detector slows the crash-point tests about tenfold;
// under it they run the default mode only (background syncs), and the
// exhaustive ones leave out GatherInMemory (see skipGatherUnderRace).
const raceEnabled = true
