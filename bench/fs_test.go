package bench

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestOSFSFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	var osfs OSFS
	f, err := osfs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.Write([]byte("hello world")); n != 11 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if n, err := f.WriteAt([]byte("W"), 6); n != 1 || err != nil {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	buf := make([]byte, 20)
	if n, err := f.ReadAt(buf, 3); n != 8 || err != io.EOF || string(buf[:n]) != "lo World" {
		t.Fatalf("ReadAt = %d, %v, %q", n, err, buf[:n])
	}
	if pos, err := f.Seek(0, io.SeekStart); pos != 0 || err != nil {
		t.Fatalf("Seek = %d, %v", pos, err)
	}
	if n, err := f.Read(buf); n != 11 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	if n, err := f.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read at end = %d, %v", n, err)
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != 11 || fi.Mode() != 0o640 || fi.IsDir() || fi.Name() != "f" || fi.Sys().(*syscall.Stat_t).Blksize <= 0 {
		t.Fatalf("Stat = %v (mode %v), %v", fi, fi.Mode(), err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := osfs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL open of an existing file: %v", err)
	}
	if err := osfs.Remove(name); err != nil {
		t.Fatal(err)
	}
	if _, err := osfs.OpenFile(name, os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open of a removed file: %v", err)
	}
}
