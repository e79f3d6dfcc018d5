package e2e

import (
	"crypto/rand"
	"os"
	"testing"

	"conquest/internal/mounttest"
)

// TestIdleMountSyncsTheDisk: a large file fsync'd, rewritten in part
// without fsync (copy-on-write keeps the old blocks until the disk is
// synced, in case a power loss brings the old contents back), then deleted,
// on a mount that then stays idle. The periodic disk commit syncs the disk
// in the background and frees the old blocks, so statfs shows all the space
// free again within a few commit intervals. Before it, those blocks counted
// as neither used nor free until something else synced the disk (2 MiB here,
// for as long as the mount was idle). In-process and through the CLI's
// --commit.
func TestIdleMountSyncsTheDisk(t *testing.T) {
	for _, process := range []bool{false, true} {
		name := map[bool]string{false: "in-process", true: "process"}[process]
		t.Run(name, func(t *testing.T) {
			var m *mounttest.Mounted
			if process {
				m = mounttest.MountProcess(t, mounttest.WithArgs("--commit", "100ms"))
			} else {
				m = mounttest.Mount(t)
			}
			base := freeBytes(t, m.Dir)
			data := make([]byte, 4<<20)
			rand.Read(data)
			f, err := os.Create(m.Path("f"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(data); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			rand.Read(data[:2<<20])
			if _, err := f.WriteAt(data[:2<<20], 1<<20); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(m.Path("f")); err != nil {
				t.Fatal(err)
			}
			// The arena's own use may differ by a few pages.
			const slack = 256 << 10
			if free := waitFree(t, m.Dir, base-slack); free < base-slack {
				t.Fatalf("free space %d bytes after the delete on an idle mount, want about %d (%d held)", free, base, base-free)
			}
		})
	}
}
