package e2e

import (
	"bytes"
	"math/rand"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/internal/mounttest"
	"conquest/pram"
)

// TestSyncWritesSurvivePowerLoss: writes through write-only descriptors
// opened O_DSYNC or O_SYNC, or made with RWF_DSYNC, small files and large,
// are durable when write(2) returns, with no fsync: after the daemon is
// killed and the arena's RAM copy removed (a power loss, with no checkpoint
// due: --commit 1h), every one reads back. Write-only descriptors bypass the
// page cache, and the kernel sends no FSYNC after such a write; before
// session 47's review the daemon did not sync them either, and these files
// came back empty.
func TestSyncWritesSurvivePowerLoss(t *testing.T) {
	for _, args := range [][]string{nil, {"--cached-writes"}} {
		t.Run(map[bool]string{false: "direct", true: "cached"}[args != nil], func(t *testing.T) {
			m := mounttest.MountProcess(t, mounttest.WithArgs(append([]string{"--commit", "1h"}, args...)...))
			syncWritesSurvivePowerLoss(t, m)
		})
	}
}

func syncWritesSurvivePowerLoss(t *testing.T, m *mounttest.Mounted) {
	rng := rand.New(rand.NewSource(seed(t)))
	content := func(n int) []byte {
		b := make([]byte, n)
		rng.Read(b)
		return b
	}
	cases := []struct {
		name       string
		flags, rwf int
		size       int
	}{
		{"dsync-small", unix.O_DSYNC, 0, 20 << 10},
		{"sync-small", unix.O_SYNC, 0, 5000},
		{"rwf-dsync-small", 0, unix.RWF_DSYNC, 30 << 10},
		{"append-dsync-small", unix.O_APPEND | unix.O_DSYNC, 0, 12 << 10},
		{"dsync-large", unix.O_DSYNC, 0, 3 << 20},
		{"sync-large", unix.O_SYNC, 0, 2<<20 + 4097},
		{"rwf-dsync-large", 0, unix.RWF_DSYNC, 3<<20 + 100},
	}
	// The names first, made durable, so that only the writes are at stake.
	for _, c := range cases {
		if err := os.WriteFile(m.Path(c.name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := unix.Open(m.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fsync(dir); err != nil {
		t.Fatal(err)
	}
	unix.Close(dir)

	want := map[string][]byte{}
	for _, c := range cases {
		data := content(c.size)
		want[c.name] = data
		fd, err := unix.Open(m.Path(c.name), unix.O_WRONLY|c.flags|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(data); {
			n := min(len(data)-off, 64<<10+rng.Intn(64<<10))
			var err error
			switch {
			case c.rwf != 0:
				_, err = unix.Pwritev2(fd, [][]byte{data[off : off+n]}, int64(off), c.rwf)
			case c.flags&unix.O_APPEND != 0:
				_, err = unix.Write(fd, data[off:off+n])
			default:
				_, err = unix.Pwrite(fd, data[off:off+n], int64(off))
			}
			if err != nil {
				t.Fatalf("%s: writing at %d: %v", c.name, off, err)
			}
			off += n
		}
		unix.Close(fd) // no fsync
	}

	m.Kill()
	if err := pram.RemoveShadow(m.Pram, ""); err != nil {
		t.Fatal(err)
	}
	m.Remount()
	for _, c := range cases {
		got, err := os.ReadFile(m.Path(c.name))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !bytes.Equal(got, want[c.name]) {
			t.Errorf("%s: %d bytes read back after the power loss, not the %d written", c.name, len(got), len(want[c.name]))
		}
	}
}
