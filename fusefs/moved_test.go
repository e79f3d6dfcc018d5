package fusefs_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"conquest/fusefs"
	"conquest/internal/mounttest"
)

// A file up to twice the threshold is written in the arena and moved to
// the disk by the periodic disk commit, which changes its st_blocks (here:
// a file of zeros takes arena pages, and no disk block). The kernel caches
// st_blocks with the attributes for their whole lifetime, so the adapter
// drops them after the move (FS.SetMovedHook); before, stat showed the
// arena's count until the attributes were evicted.
func TestBlocksAfterTheDiskCommitMove(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		p := m.Path("zeros")
		if err := os.WriteFile(p, make([]byte, 1500000), 0o644); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks == 0 {
			t.Fatalf("a 1.5 MB file of zeros in the arena has st_blocks 0: the test needs it there first")
		}
		deadline := time.Now().Add(10 * time.Second)
		for st.Blocks != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("st_blocks %d 10 s after writing; the disk commit moves the file within about a second and a block of zeros takes no disk space", st.Blocks)
			}
			time.Sleep(50 * time.Millisecond)
			if err := syscall.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(p)
		if err != nil || len(got) != 1500000 {
			t.Fatalf("read back: %d bytes, %v", len(got), err)
		}
		for i, b := range got {
			if b != 0 {
				t.Fatalf("byte %d is %#x", i, b)
			}
		}
	})
}
