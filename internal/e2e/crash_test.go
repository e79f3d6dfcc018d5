package e2e

import (
	"math/rand"
	"testing"
	"time"

	"conquest/internal/mounttest"
	"conquest/internal/posixtest"
)

// TestKillBusy kills the daemon with SIGKILL while several workers run
// random operations through it, then checks the images (fsck), remounts
// and verifies every worker's subtree: it must equal the shadow copy of all
// completed operations, plus possibly the one operation that worker had in
// flight. Three rounds, each continuing on the recovered file system.
func TestKillBusy(t *testing.T) {
	m := mounttest.MountProcess(t)
	shadow, _ := posixtest.MountTmpfs(t, 1<<30)
	s := seed(t)
	rng := rand.New(rand.NewSource(s))
	w, err := posixtest.NewWorkload(m.Dir, shadow, 6, s, posixtest.GenOptions{BigEvery: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	total := 0
	for round := 0; round < 3; round++ {
		done := make(chan int, 1)
		go func() { done <- w.Run(1<<30, nil) }()
		time.Sleep(time.Duration(300+rng.Intn(700)) * time.Millisecond)
		m.Kill()
		var n int
		select {
		case n = <-done:
		case <-time.After(time.Minute):
			t.Fatal("workers still running a minute after the daemon was killed")
		}
		if err := w.Err(); err != nil {
			t.Fatalf("round %d: before the kill: %v", round, err)
		}
		inflight := w.InFlight()
		t.Logf("round %d: %d operations completed in all, %d in flight at the kill: %v", round, n, len(inflight), inflight)
		if n <= total {
			t.Fatalf("round %d: no operation completed before the kill", round)
		}
		total = n
		fsck(t, m)
		m.Remount()
		if err := w.Verify(m.Dir); err != nil {
			t.Fatalf("round %d: after kill -9 and remount: %v", round, err)
		}
	}
}
