package fusefs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// holdsWritable finds a descriptor of this process open for writing on a
// file by its inode number, and no other.
func TestHoldsWritable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	pid := uint32(os.Getpid())
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if holdsWritable(pid, st.Ino) {
		t.Fatal("a read-only descriptor counted as open for writing")
	}
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !holdsWritable(pid, st.Ino) {
		t.Fatal("a descriptor open for writing was not found")
	}
	if holdsWritable(pid, st.Ino+1000003) {
		t.Fatal("another inode number matched")
	}
	w.Close()
	if holdsWritable(pid, st.Ino) {
		t.Fatal("a closed descriptor still counted")
	}
}
