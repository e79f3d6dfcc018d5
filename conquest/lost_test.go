package conquest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"conquest/pram"
)

// TestLostArena: once a fault has made the arena lost, every change fails
// with ErrIO before it touches the arena, and Close takes no lock (a fault
// may have left FS.mu held: here it is held for good) and reports the
// loss. The next Open starts from the last checkpoint, whose files are
// intact, and the check is clean (at cleanup).
func TestLostArena(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true, commit: 10 * time.Millisecond})
	small := create(t, fs, RootIno, "small", []byte("small file"))
	bigData := bytes.Repeat([]byte("large file "), 20000) // over the 64 KiB threshold
	big := create(t, fs, RootIno, "big", bigData)
	must(t, fs.Sync())

	fs.Arena().SimulateLost(4096)
	if !errors.Is(fs.Lost(), pram.ErrLost) {
		t.Fatalf("Lost: %v", fs.Lost())
	}
	_, _, err := fs.Create(RootIno, "new", 0o644, O_RDWR|O_CREAT|O_EXCL, user)
	mustErr(t, err, ErrIO)
	_, err = fs.Mkdir(RootIno, "dir", 0o755, user)
	mustErr(t, err, ErrIO)
	mustErr(t, fs.Unlink(RootIno, "small"), ErrIO)
	h, err := fs.Open(small.Ino, O_RDWR)
	if err == nil {
		_, err = fs.Write(small.Ino, h, 0, []byte("changed"), false)
		mustErr(t, err, ErrIO)
		fs.Release(small.Ino, h)
	}

	fs.mu.Lock() // as a fault in an operation could leave it
	closed := make(chan error, 1)
	go func() { closed <- fs.Close() }()
	select {
	case err := <-closed:
		mustErr(t, err, pram.ErrLost)
	case <-time.After(10 * time.Second):
		t.Fatal("Close of a lost arena waits for FS.mu")
	}
	env.current = nil

	fs = env.open()
	if got := readAll(t, fs, lookup(t, fs, RootIno, "small").Ino); string(got) != "small file" {
		t.Errorf("small after reopening: %q", got)
	}
	if got := readAll(t, fs, lookup(t, fs, RootIno, "big").Ino); !bytes.Equal(got, bigData) || lookup(t, fs, RootIno, "big").Ino != big.Ino {
		t.Errorf("big after reopening: %d bytes, want %d", len(got), len(bigData))
	}
	if _, err := fs.Lookup(RootIno, "new"); !errors.Is(err, ErrNotFound) {
		t.Errorf("new after reopening: %v", err)
	}
}
