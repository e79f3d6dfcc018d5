package dirhash

import (
	"testing"

	"conquest/internal/racetest"
	"conquest/internal/shadowtest"
)

// TestMain gives the tests their own directory of RAM copies and turns on
// pram's checkpoint verification (internal/shadowtest).
func TestMain(m *testing.M) {
	racetest.Select(heavy...)
	shadowtest.Main(m)
}

// heavy are the tests that run a sample under -race and in full in `make
// test`'s second step, without it (internal/racetest): the model simulation and the million
// entries.
var heavy = []string{
	"TestMillionEntries",
	"TestSimulation",
}
