package pram

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openWithin opens the image at path and fails the test if the open does
// not return within a minute (it is left running: a FIFO it waits on is
// opened for writing, which ends an open's wait for a writer).
func openWithin(t *testing.T, path string, fifos ...string) *Arena {
	t.Helper()
	type result struct {
		a   *Arena
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := OpenWith(path, OpenOptions{Interval: -1, Logf: t.Logf})
		done <- result{a, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.a
	case <-time.After(20 * time.Second):
		for _, f := range fifos {
			if w, err := os.OpenFile(f, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		}
		t.Fatal("the open did not return")
		return nil
	}
}

// TestShadowDirOddFiles (found by an outside review): files in the RAM
// copies' directory that are not what this package writes there. A FIFO
// under a record's or a copy's name made the open wait forever for a
// writer, in os.ReadFile or os.Open (mount and fsck hung with the arena
// locked), even for an image closed cleanly; a character device under a
// record's name (a node of /dev/zero) was read without end, taking memory
// until the machine ran out. They are now passed over: a copy whose
// record cannot be read is taken as a copy without one, and a copy that
// is not a regular file is not a copy.
func TestShadowDirOddFiles(t *testing.T) {
	const s = "kept by the RAM copy"
	zero := func(p string) error { return unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 5))) }
	fifo := func(p string) error { return unix.Mkfifo(p, 0o600) }
	for _, tc := range []struct {
		name string
		// odd replaces what is at p (the crashed arena's RAM copy at name,
		// or a copy of its under another device number at away) with an
		// odd file and reports the FIFOs the open may wait on.
		odd func(t *testing.T, name, away string) []string
		// reused: the copy's change survives.
		reused bool
	}{
		{"record a FIFO", func(t *testing.T, name, away string) []string {
			replace(t, name+imageSuffix, fifo)
			return []string{name + imageSuffix}
		}, true},
		{"record a character device", func(t *testing.T, name, away string) []string {
			replace(t, name+imageSuffix, zero)
			return nil
		}, true},
		{"copy a FIFO", func(t *testing.T, name, away string) []string {
			replace(t, name, fifo)
			return []string{name}
		}, false},
		{"copy a character device", func(t *testing.T, name, away string) []string {
			replace(t, name, zero)
			return nil
		}, false},
		{"other device's copy a FIFO", func(t *testing.T, name, away string) []string {
			moveShadow(t, name, away)
			replace(t, away, fifo)
			return []string{away}
		}, false},
		{"record's temporary file a FIFO", func(t *testing.T, name, away string) []string {
			must(t, unix.Mkfifo(name+imageSuffix+".tmp", 0o600))
			return []string{name + imageSuffix + ".tmp"}
		}, true},
		{"record's temporary file a directory", func(t *testing.T, name, away string) []string {
			must(t, os.Mkdir(name+imageSuffix+".tmp", 0o700))
			return nil
		}, true},
		{"other device's record a FIFO", func(t *testing.T, name, away string) []string {
			moveShadow(t, name, away)
			replace(t, away+imageSuffix, fifo)
			return []string{away + imageSuffix}
		}, false},
		{"other device's record a character device", func(t *testing.T, name, away string) []string {
			moveShadow(t, name, away)
			replace(t, away+imageSuffix, zero)
			return nil
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := formatClosed(t, 4<<20)
			a := openShadowed(t, path, OpenOptions{})
			commitString(a, s)
			name := a.Shadow().Path
			away := awayName(name, a)
			must(t, a.Abandon())
			t.Cleanup(func() { removeShadowFiles(away); removeShadowFiles(name) })
			fifos := tc.odd(t, name, away)

			b := openWithin(t, path, fifos...)
			wantCopy(t, b, tc.name, s, tc.reused)
			// And the open wrote the copy's record.
			if r, err := readRecord(b.Shadow().Path + imageSuffix); err != nil || !parseRecord(r).names(b.f) {
				t.Errorf("the record after the open: %q, %v", r, err)
			}
			must(t, b.Close())
		})
	}
}

// replace puts the file mk makes at p in place of what is there.
func replace(t *testing.T, p string, mk func(string) error) {
	t.Helper()
	must(t, os.Remove(p))
	if err := mk(p); err != nil {
		t.Skipf("cannot make %s: %v", p, err)
	}
}

// TestReadRecordBounded: a record is read only up to maxRecord bytes, and
// only from a regular file.
func TestReadRecordBounded(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r")
	want := strings.Repeat("x", maxRecord)
	must(t, os.WriteFile(p, []byte(want), 0o600))
	if b, err := readRecord(p); err != nil || string(b) != want {
		t.Fatalf("a record of %d bytes: %d bytes, %v", maxRecord, len(b), err)
	}
	must(t, os.WriteFile(p, []byte(want+"x"), 0o600))
	if b, err := readRecord(p); err == nil {
		t.Fatalf("a record of %d bytes read (%d bytes)", maxRecord+1, len(b))
	}
	must(t, os.Symlink("r", filepath.Join(dir, "l")))
	if _, err := readRecord(filepath.Join(dir, "l")); err == nil {
		t.Fatal("a record read through a symbolic link")
	}
	if _, err := readRecord(dir); err == nil || !strings.Contains(err.Error(), "a directory") {
		t.Fatalf("a directory as a record: %v", err)
	}
}

// TestShadowRecordDirectoryReplaced: an empty directory under a record's
// name (which a rename cannot replace) is replaced by the record when it
// is written; every checkpoint logged the failed rename before.
func TestShadowRecordDirectoryReplaced(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	commitString(a, "kept")
	name := a.Shadow().Path
	must(t, a.Abandon())
	replace(t, name+imageSuffix, func(p string) error { return os.Mkdir(p, 0o700) })
	b := openWithin(t, path)
	defer b.Close()
	wantCopy(t, b, "record a directory", "kept", true)
	if r, err := readRecord(name + imageSuffix); err != nil || !parseRecord(r).names(b.f) {
		t.Errorf("the record after the open: %q, %v", r, err)
	}
}
