package diskstore

import (
	"bytes"
	"testing"

	"conquest/pram"
)

func TestWriteReadFlushRestart(t *testing.T) {
	e := newEnv(t, envOpts{})
	seg := e.newFile(7)
	data := pattern(1, 0, 3<<20+1234)
	if err := e.write(seg, 0, data); err != nil {
		t.Fatal(err)
	}
	got, err := e.read(seg, 0, len(data))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read buffered: err %v, equal %v", err, bytes.Equal(got, data))
	}
	if err := e.flush(seg); err != nil {
		t.Fatal(err)
	}
	if e.s.Buffered(seg) != 0 {
		t.Fatalf("buffered %d after flush", e.s.Buffered(seg))
	}
	files := map[pram.Off]int64{seg: int64(len(data))}
	e.check(files)
	e.restart()
	got, err = e.read(seg, 0, len(data))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after restart: err %v, equal %v", err, bytes.Equal(got, data))
	}
	e.check(files)
}
