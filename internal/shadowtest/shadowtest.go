package shadowtest

import (
	"fmt"
	"os"
	"testing"

	"conquest/internal/disktemp"
	"conquest/internal/reaper"
	"conquest/pram"
)

// Setup makes the directory, points $CONQUEST_SHADOW_DIR at it and turns
// verification on; the function it returns removes the directory. With
// /tmp a tmpfs, the tests' temporary files go to /var/tmp (disktemp).
func Setup() (cleanup func()) {
	disktemp.Use()
	dir, err := os.MkdirTemp("/dev/shm", "conquest-test-")
	if err != nil {
		dir, err = os.MkdirTemp("", "conquest-test-shadow-")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "shadowtest: %v\n", err)
		os.Exit(2)
	}
	reaper.Start()
	reaper.Remove(dir)
	os.Setenv(pram.ShadowDirEnv, dir)
	os.Setenv("CONQUEST_VERIFY_CHECKPOINTS", "1")
	pram.VerifyCheckpoints(true)
	return func() { os.RemoveAll(dir) }
}

// Main is a TestMain: Setup, the tests, cleanup.
//
//	func TestMain(m *testing.M) { shadowtest.Main(m) }
func Main(m *testing.M) {
	reaper.Child()
	cleanup := Setup()
	code := m.Run()
	cleanup()
	os.Exit(code)
}
