package e2e

import (
	"os"
	"strconv"
	"testing"
	"time"

	"conquest/internal/posixtest"
)

// seed returns CONQUEST_SEED if set (to replay a failure), else a fresh one.
func seed(t *testing.T) int64 {
	t.Helper()
	if s := os.Getenv("CONQUEST_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("CONQUEST_SEED=%q: %v", s, err)
		}
		return n
	}
	return time.Now().UnixNano()
}

// TestSimulate applies the same random operations to a Conquest mount and
// to a tmpfs and compares every outcome and, periodically, the whole trees.
func TestSimulate(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  int
		gen  posixtest.GenOptions
	}{
		// Many small operations on a small namespace.
		{"small", 5000, posixtest.GenOptions{}},
		// Fewer operations, with file sizes crossing 1 MiB (the
		// large-file threshold) in both directions.
		{"large", 2000, posixtest.GenOptions{BigEvery: 4, BigMax: 3 << 20, Names: []string{"a", "b", "c"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := mount(t)
			ref, mounted := posixtest.MountTmpfs(t, 1<<30)
			if !mounted {
				t.Log("reference is a plain temporary directory, not a tmpfs")
			}
			dir := m.Path("sim")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			refDir := ref + "/sim"
			if err := os.Mkdir(refDir, 0o755); err != nil {
				t.Fatal(err)
			}
			posixtest.Simulate(t, dir, refDir, posixtest.SimOptions{Seed: seed(t), Ops: c.ops, CheckEvery: 250, Gen: c.gen})
			check(t, m, "after the simulation")
		})
	}
}
