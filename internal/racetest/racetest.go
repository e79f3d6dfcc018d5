package racetest

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// HeavyOnlyEnv, when set, makes Select run only the heavy tests (the
// second step of `make test`, built without -race).
const HeavyOnlyEnv = "CONQUEST_HEAVY_ONLY"

// FullEnv, when set, makes every heavy test run in full under the race
// detector too.
const FullEnv = "CONQUEST_RACE_FULL"

var (
	mu    sync.Mutex
	heavy = map[string]bool{}
)

// Select names the package's heavy tests (top-level test names); call it
// from TestMain before m.Run. With $CONQUEST_HEAVY_ONLY set it restricts
// the run to them, and exits with an error if the binary has the race
// detector (that step exists to run them uninstrumented).
func Select(names ...string) {
	mu.Lock()
	for _, n := range names {
		heavy[n] = true
	}
	mu.Unlock()
	if os.Getenv(HeavyOnlyEnv) == "" {
		return
	}
	if Enabled {
		fmt.Fprintf(os.Stderr, "racetest: $%s is for a run without -race\n", HeavyOnlyEnv)
		os.Exit(2)
	}
	if err := flag.Set("test.run", Pattern(names)); err != nil {
		fmt.Fprintf(os.Stderr, "racetest: %v\n", err)
		os.Exit(2)
	}
}

// Pattern is the -run pattern that selects exactly the top-level tests
// names (and all their subtests); with none, it matches no test.
func Pattern(names []string) string {
	if len(names) == 0 {
		return "^$"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(q, "|") + ")$"
}

// Reduced reports whether t should run its sample rather than all of it:
// under the race detector unless $CONQUEST_RACE_FULL is set. It fails t if
// t's top-level test is not named to Select, since then no run of `make
// test` would run it in full.
func Reduced(t testing.TB) bool {
	t.Helper()
	name, _, _ := strings.Cut(t.Name(), "/")
	mu.Lock()
	listed := heavy[name]
	mu.Unlock()
	if !listed {
		t.Fatalf("racetest: %s scales down under -race but is not named to racetest.Select in its package's TestMain: make test would never run it in full", name)
	}
	return Enabled && os.Getenv(FullEnv) == ""
}

// Sample reports whether case i of n (0-based) runs: all of them unless
// Reduced, else every stride-th one and the last. A test whose cases
// differ in kind (block sizes, modes) keeps one of each kind in its
// sample by choosing stride to cut across them.
func Sample(t testing.TB, i, n, stride int) bool {
	t.Helper()
	if !Reduced(t) || stride <= 1 {
		return true
	}
	return i%stride == 0 || i == n-1
}
