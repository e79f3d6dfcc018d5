package conquest

import (
	"bytes"
	"testing"
)

func TestSmoke(t *testing.T) {
	fs, env := newTestFS(t)
	d := mkdir(t, fs, RootIno, "d")
	f := create(t, fs, d.Ino, "f", []byte("hello"))
	if got := readAll(t, fs, f.Ino); !bytes.Equal(got, []byte("hello")) {
		t.Fatalf("read %q", got)
	}
	fs = env.reopen(fs)
	got := lookup(t, fs, d.Ino, "f")
	if got.Ino != f.Ino || got.Size != 5 {
		t.Fatalf("after reopen: %+v", got)
	}
}
