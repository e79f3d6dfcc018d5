package pram

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"conquest/internal/disktemp"
	"conquest/internal/racetest"
	"conquest/internal/reaper"
)

// TestMain gives the tests a shadow directory of their own (removed at the
// end, and reported if a test left a RAM copy behind that no Close
// removed: Abandon leaves them on purpose, so only a note) and turns on
// verification mode. With /tmp a tmpfs, the tests' images go to /var/tmp
// (disktemp), where they can be shadowed.
func TestMain(m *testing.M) {
	reaper.Child()
	racetest.Select(heavy...)
	disktemp.Use()
	dir, err := os.MkdirTemp("/dev/shm", "conquest-pram-test-")
	if err != nil {
		dir, err = os.MkdirTemp("", "conquest-pram-test-")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	reaper.Start()
	reaper.Remove(dir)
	os.Setenv(ShadowDirEnv, dir)
	VerifyCheckpoints(true)
	code := m.Run()
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) > 0 && testing.Verbose() {
		fmt.Fprintf(os.Stderr, "pram tests: %d RAM copies left by abandoned arenas\n", len(left))
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// heavy are the tests that run a sample under -race and in full in `make
// test`'s second step, without it (internal/racetest): the power-loss
// rounds.
var heavy = []string{
	"TestBlockDevicePowerLoss",
	"TestShadowPowerLoss",
}
