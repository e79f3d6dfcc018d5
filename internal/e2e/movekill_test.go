package e2e

import (
	"testing"

	"conquest/internal/mounttest"
)

// TestQueuedMoveAfterKill: a file written just past the large-file
// threshold (1 MiB) waits in the arena for the disk commit, which is an
// hour away here; the daemon is killed and forgets that the file waits.
// After the remount a read of the file queues it again, and the unmount
// (which moves every queued file) puts it on the disk. Before, it stayed
// in the arena until its next write.
func TestQueuedMoveAfterKill(t *testing.T) {
	m := mounttest.MountProcess(t, mounttest.WithArgs("--commit", "1h"))
	p := &pattern{seed: 303, size: 1<<20 + 300<<10}
	createPattern(t, m.Path("f"), *p, []int{128 << 10}, 0)
	m.Kill()
	fsck(t, m)
	if u := imageUsage(t, m); u.LargeFiles != 0 {
		t.Fatalf("%d large files on the disk after the kill, want the file still in the arena", u.LargeFiles)
	}
	remount(t, m)
	_, sum := fileSum(t, m.Path("f"), p)
	m.Unmount()
	if u := imageUsage(t, m); u.LargeFiles != 1 || u.LargeFileBytes != uint64(p.size) {
		t.Fatalf("after a read and an unmount: %d large files of %d bytes, want the file (%d bytes) on the disk", u.LargeFiles, u.LargeFileBytes, p.size)
	}
	remount(t, m)
	if _, again := fileSum(t, m.Path("f"), p); again != sum {
		t.Fatal("the file changed across its move")
	}
}
