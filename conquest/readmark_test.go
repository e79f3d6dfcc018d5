package conquest

import "testing"

// TestReadSinceLookup: a Read marks the inode while the kernel references
// it (fusefs drops what a direct write raced with by that mark); a FORGET
// of some of the references keeps the mark, the FORGET of the last one
// clears it, and a Read of an inode the kernel does not reference marks
// nothing.
func TestReadSinceLookup(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", pattern(10000, 1)) // one reference
	if fs.ReadSinceLookup(f.Ino) {
		t.Fatal("marked before any read")
	}
	if _, err := fs.Lookup(RootIno, "f"); err != nil { // two
		t.Fatal(err)
	}
	read := func() {
		t.Helper()
		if _, err := fs.Read(f.Ino, 0, 0, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	read()
	if !fs.ReadSinceLookup(f.Ino) {
		t.Fatal("not marked after a read")
	}
	fs.Forget(f.Ino, 1)
	if !fs.ReadSinceLookup(f.Ino) {
		t.Fatal("a FORGET of one of two references cleared the mark")
	}
	fs.Forget(f.Ino, 1)
	if fs.ReadSinceLookup(f.Ino) {
		t.Fatal("the FORGET of the last reference kept the mark")
	}
	read()
	if fs.ReadSinceLookup(f.Ino) {
		t.Fatal("a read of an inode the kernel does not reference marked it")
	}
	if _, err := fs.Lookup(RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	if fs.ReadSinceLookup(f.Ino) {
		t.Fatal("a new lookup found an old mark")
	}
	read()
	if !fs.ReadSinceLookup(f.Ino) {
		t.Fatal("not marked after a read under a new lookup")
	}
}
