package conquest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"conquest/diskstore"
)

// testClock is a deterministic clock: each call advances it by 1 µs, so
// successive operations get distinct timestamps. Tests may set it.
type testClock struct {
	mu  sync.Mutex
	now Timespec
}

func (c *testClock) Now() Timespec {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now.Nsec += 1000
	if c.now.Nsec >= 1e9 {
		c.now.Sec++
		c.now.Nsec -= 1e9
	}
	return c.now
}

func (c *testClock) Advance(sec int64) {
	c.mu.Lock()
	c.now.Sec += sec
	c.mu.Unlock()
}

type testEnv struct {
	current *FS
	t       *testing.T
	path    string
	clock   *testClock
	logs    []string
	logMu   sync.Mutex

	disk     string            // disk image path ("" for none or dev)
	dev      reopener          // in-memory disk, reopened at each open
	diskOpts diskstore.Options // store tuning
	noAtime  bool
	commit   time.Duration                           // Options.DiskCommit
	wrap     func(diskstore.Device) diskstore.Device // wraps dev at each open (fault injection)
}

// reopener is an in-memory device (MemDevice, CrashDevice) that can be
// opened again with the same contents.
type reopener interface {
	diskstore.Device
}

type fsOpt struct {
	size       uint64
	journalLen uint64
	noCheck    bool

	disk      bool   // with a large-file disk (an image file in TempDir unless dev)
	threshold uint64 // default 64 KiB with a disk
	diskBlock uint32 // default 4 KiB
	diskSize  uint64 // default 64 MiB
	dev       reopener
	diskOpts  diskstore.Options
	noAtime   bool
	commit    time.Duration // Options.DiskCommit (0: no periodic disk commit)
	inPlace   bool          // the arena on tmpfs (/dev/shm), mapped in place, not shadowed
}

// newTestFS formats an arena in t.TempDir, opens it and registers a
// Cleanup that runs Check (which must be clean) and closes it.
func newTestFS(t *testing.T) (*FS, *testEnv) {
	return newTestFSOpt(t, fsOpt{})
}

func newTestFSOpt(t *testing.T, o fsOpt) (*FS, *testEnv) {
	t.Helper()
	if o.size == 0 {
		o.size = 32 << 20
	}
	dir := t.TempDir()
	arenaDir := dir
	if o.inPlace {
		var err error
		if arenaDir, err = os.MkdirTemp("/dev/shm", "conquest-inplace-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(arenaDir) })
	}
	env := &testEnv{t: t, path: filepath.Join(arenaDir, "arena"), clock: &testClock{now: Timespec{Sec: 1_700_000_000}},
		dev: o.dev, diskOpts: o.diskOpts, noAtime: o.noAtime, commit: o.commit}
	mo := MkfsOptions{PramSize: o.size, JournalLen: o.journalLen, RootUid: 1000, RootGid: 1000}
	if o.disk || o.dev != nil {
		mo.LargeFileThreshold, mo.DiskBlockSize, mo.DiskSize = o.threshold, o.diskBlock, o.diskSize
		if mo.LargeFileThreshold == 0 {
			mo.LargeFileThreshold = 64 << 10
		}
		if mo.DiskBlockSize == 0 {
			mo.DiskBlockSize = 4096
		}
		if mo.DiskSize == 0 {
			mo.DiskSize = 64 << 20
		}
		if o.dev == nil {
			env.disk = filepath.Join(dir, "disk")
		}
		mo.Device = o.dev
	}
	if err := Mkfs(env.path, env.disk, mo); err != nil {
		t.Fatalf("Mkfs: %v", err)
	}
	fs := env.open()
	t.Cleanup(func() {
		if fs := env.current; fs != nil && !fs.closed {
			if !o.noCheck {
				for _, err := range fs.Check() {
					t.Errorf("Check: %v", err)
				}
			}
			if err := fs.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
	return fs, env
}

func (env *testEnv) logf(format string, args ...any) {
	env.logMu.Lock()
	defer env.logMu.Unlock()
	env.logs = append(env.logs, sprintf(format, args...))
}

// open opens the arena and makes it the env's current FS.
func (env *testEnv) open() *FS {
	env.t.Helper()
	o := Options{Logf: env.logf, Now: env.clock.Now, Disk: env.diskOpts, NoAtime: env.noAtime, DiskCommit: env.commit}
	switch d := env.dev.(type) {
	case *diskstore.MemDevice:
		env.dev = d.Reopen()
		o.Device = env.dev
	case *diskstore.CrashDevice:
		env.dev = d.Reopen()
		o.Device = env.dev
	}
	if env.wrap != nil && o.Device != nil {
		o.Device = env.wrap(o.Device)
	}
	fs, err := Open(env.path, env.disk, o)
	if err != nil {
		env.t.Fatalf("Open: %v", err)
	}
	env.current = fs
	return fs
}

// reopen closes fs cleanly and opens it again.
func (env *testEnv) reopen(fs *FS) *FS {
	env.t.Helper()
	if errs := fs.Check(); len(errs) > 0 {
		env.t.Fatalf("Check before reopen: %v", errs)
	}
	if err := fs.Close(); err != nil {
		env.t.Fatalf("Close: %v", err)
	}
	return env.open()
}

func mustErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var root = Cred{Uid: 0, Gid: 0}
var user = Cred{Uid: 1000, Gid: 1000}

// create makes a regular file and closes it (the kernel reference stays,
// as with a real mount until Forget).
func create(t *testing.T, fs *FS, dir Ino, name string, data []byte) Attr {
	t.Helper()
	at, h, err := fs.Create(dir, name, 0o644, O_RDWR|O_CREAT|O_EXCL, user)
	if err != nil {
		t.Fatalf("Create %q: %v", name, err)
	}
	if len(data) > 0 {
		n, err := fs.Write(at.Ino, h, 0, data, false)
		if err != nil || n != len(data) {
			t.Fatalf("Write %q: %d, %v", name, n, err)
		}
	}
	fs.Release(at.Ino, h)
	at, err = fs.GetAttr(at.Ino)
	must(t, err)
	return at
}

func mkdir(t *testing.T, fs *FS, dir Ino, name string) Attr {
	t.Helper()
	at, err := fs.Mkdir(dir, name, 0o755, user)
	if err != nil {
		t.Fatalf("Mkdir %q: %v", name, err)
	}
	return at
}

func readAll(t *testing.T, fs *FS, ino Ino) []byte {
	t.Helper()
	at, err := fs.GetAttr(ino)
	must(t, err)
	buf := make([]byte, at.Size+10)
	n, err := fs.Read(ino, 0, 0, buf)
	must(t, err)
	if uint64(n) != at.Size {
		t.Fatalf("read %d bytes of a %d-byte file", n, at.Size)
	}
	return buf[:n]
}

func lookup(t *testing.T, fs *FS, dir Ino, name string) Attr {
	t.Helper()
	at, err := fs.Lookup(dir, name)
	if err != nil {
		t.Fatalf("Lookup %q: %v", name, err)
	}
	return at
}

func names(t *testing.T, fs *FS, dir Ino) map[string]Ino {
	t.Helper()
	m := make(map[string]Ino)
	err := fs.ReadDir(dir, 0, func(name string, ino Ino, typ uint8, next uint64) bool {
		if _, dup := m[name]; dup {
			t.Errorf("ReadDir: %q twice", name)
		}
		m[name] = ino
		return true
	})
	must(t, err)
	return m
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// logged reports whether a log line containing sub was written.
func (env *testEnv) logged(sub string) bool {
	env.logMu.Lock()
	defer env.logMu.Unlock()
	for _, l := range env.logs {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}
