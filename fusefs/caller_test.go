package fusefs

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// callerSyscall reads the system call a thread waits in: here a child
// process blocked in read(2) on a pipe; nothing for pid 0 or a pid that
// does not exist.
func TestCallerSyscall(t *testing.T) {
	if _, ok := callerSyscall(0); ok {
		t.Error("a system call for pid 0")
	}
	if _, ok := callerSyscall(1 << 30); ok {
		t.Error("a system call for a pid that does not exist")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for i := 0; ; i++ {
		nr, ok := callerSyscall(uint32(cmd.Process.Pid))
		if ok && nr == unix.SYS_CLOCK_NANOSLEEP || ok && nr == unix.SYS_NANOSLEEP {
			return
		}
		if i == 200 {
			t.Fatalf("sleep(1)'s system call: %d, %v; want clock_nanosleep", nr, ok)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
