package mounttest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
	"conquest/internal/reaper"
	"conquest/pram"
)

// DefaultPramSize is the arena size of test images (a sparse file).
const DefaultPramSize = 256 << 20

// unmountWait bounds how long cleanup waits for a serve loop or daemon to end
// after unmounting.
const unmountWait = 30 * time.Second

// Option configures Mount and MountProcess.
type Option func(*config)

type config struct {
	pramSize uint64
	fuse     fusefs.Options
	core     conquest.Options
	args     []string
	pram     string
	disk     string
}

// WithPramSize sets the arena size of the fresh images.
func WithPramSize(n uint64) Option { return func(c *config) { c.pramSize = n } }

// WithFuseOptions sets the adapter options of an in-process mount (FSName
// and Logf are set by mounttest unless given).
func WithFuseOptions(o fusefs.Options) Option { return func(c *config) { c.fuse = o } }

// WithCoreOptions sets the core options of an in-process mount.
func WithCoreOptions(o conquest.Options) Option { return func(c *config) { c.core = o } }

// WithArgs adds flags to `conquest mount` for MountProcess (before the
// mount point), e.g. "--writeback-cache".
func WithArgs(args ...string) Option { return func(c *config) { c.args = append(c.args, args...) } }

// WithImages mounts existing images instead of formatting fresh ones.
func WithImages(pram, disk string) Option {
	return func(c *config) { c.pram, c.disk = pram, disk }
}

// Mounted is a mounted Conquest file system.
type Mounted struct {
	t   testing.TB
	cfg config

	Dir  string // the mount point
	Pram string // arena image
	Disk string // disk image

	// In-process mounts:
	FS     *conquest.FS   // nil when unmounted or when served by a process
	Server *fusefs.Server // nil when unmounted or when served by a process

	// MountProcess mounts:
	Cmd *exec.Cmd // the daemon, nil when not running

	process bool // served by a separate process
	bin     string
	logBuf  *syncBuffer
	noCheck bool
	exited  chan struct{} // closed when Cmd has been waited for
	logMu   sync.Mutex
	ended   bool // the test's cleanup has finished: t.Logf is no longer allowed
}

// Available reports why real mounts cannot be made here, or nil.
func Available() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no /dev/fuse: %v", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		return errors.New("no fusermount3 (apt-get install fuse3)")
	}
	return nil
}

func skipUnlessAvailable(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("cannot mount FUSE file systems: %v", err)
	}
}

func newMounted(t testing.TB, process bool, opts []Option) *Mounted {
	t.Helper()
	skipUnlessAvailable(t)
	cfg := config{pramSize: DefaultPramSize}
	for _, o := range opts {
		o(&cfg)
	}
	dir := t.TempDir()
	m := &Mounted{t: t, cfg: cfg, process: process, Dir: filepath.Join(dir, "mnt")}
	if err := os.Mkdir(m.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	registerDir(m.Dir)
	if cfg.pram != "" {
		m.Pram, m.Disk = cfg.pram, cfg.disk
	} else {
		m.Pram, m.Disk = filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img")
		if err := Mkfs(m.Pram, m.Disk, cfg.pramSize); err != nil {
			t.Fatalf("mkfs: %v", err)
		}
	}
	t.Cleanup(m.cleanup)
	return m
}

// Mount formats fresh images in t.TempDir() and serves them in-process on a
// temporary mount point.
func Mount(t testing.TB, opts ...Option) *Mounted {
	t.Helper()
	m := newMounted(t, false, opts)
	if err := m.mount(); err != nil {
		t.Fatal(err)
	}
	return m
}

// DiskSize is the size of test disk images (a sparse file).
const DiskSize = 256 << 20

// Mkfs formats a test arena of pramSize bytes and its disk image.
func Mkfs(pram, disk string, pramSize uint64) error {
	return conquest.Mkfs(pram, disk, conquest.MkfsOptions{PramSize: pramSize, DiskSize: DiskSize})
}

// Open opens the images as the CLI does.
//
// An arena found locked is tried again for a while: tests of a package run
// in parallel in one process, and a child that one of them starts holds a
// copy of every descriptor of the process from its fork to its exec, this
// arena's among them, and with it the arena's lock (a CI run's TestPosix
// failed so at its final check, its own file system closed, while
// parallel tests started processes). An arena left locked for good still
// fails, after lockedWait.
func Open(path, disk string, o conquest.Options) (*conquest.FS, error) {
	deadline := time.Now().Add(lockedWait)
	for {
		fs, err := conquest.Open(path, disk, o)
		if !errors.Is(err, pram.ErrLocked) || time.Now().After(deadline) {
			return fs, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockedWait bounds how long Open waits for a locked arena.
const lockedWait = 5 * time.Second

// Path joins elem to the mount point.
func (m *Mounted) Path(elem ...string) string {
	return filepath.Join(append([]string{m.Dir}, elem...)...)
}

// NoCheck skips the consistency check at unmount (for tests that damage the
// images on purpose).
func (m *Mounted) NoCheck() { m.noCheck = true }

// Mounted reports whether the file system is currently mounted.
func (m *Mounted) Mounted() bool { return m.FS != nil || m.Cmd != nil }

func (m *Mounted) logf(format string, args ...any) {
	m.logMu.Lock()
	defer m.logMu.Unlock()
	if !m.ended {
		m.t.Logf(format, args...)
	}
}

func (m *Mounted) mount() error {
	if m.process {
		return m.startProcess()
	}
	co := m.cfg.core
	if co.Logf == nil {
		co.Logf = m.logf
	}
	if co.DiskCommit == 0 {
		co.DiskCommit = pram.DefaultCheckpointInterval // as the CLI's --commit
	}
	co.Disk.PunchFree = true // as the CLI's mount
	fs, err := Open(m.Pram, m.Disk, co)
	if err != nil {
		return fmt.Errorf("opening %s: %w", m.Pram, err)
	}
	fo := m.cfg.fuse
	if fo.FSName == "" {
		fo.FSName = "conquest:" + m.Pram
	}
	if fo.Logf == nil {
		fo.Logf = m.logf
	}
	srv, err := fusefs.Mount(fs, m.Dir, fo)
	if err != nil {
		fs.Close()
		return err
	}
	m.FS, m.Server = fs, srv
	return nil
}

// Unmount unmounts, waits for the serve loop or daemon to end, closes the
// file system and checks the images (failing the test on errors).
func (m *Mounted) Unmount() {
	m.t.Helper()
	if err := m.unmount(); err != nil {
		m.t.Error(err)
	}
	m.check()
}

// Remount unmounts (with the check) and mounts the same images again, in
// the same way (in-process or as a process).
func (m *Mounted) Remount() {
	m.t.Helper()
	if m.Mounted() {
		m.Unmount()
	}
	if err := m.mount(); err != nil {
		m.t.Fatalf("remount: %v", err)
	}
}

// unmount ends the mount without checking.
func (m *Mounted) unmount() error {
	if m.process {
		return m.stopProcess()
	}
	if m.Server == nil {
		return nil
	}
	var errs []error
	if err := m.Server.Unmount(); err != nil {
		errs = append(errs, err)
	}
	select {
	case <-m.Server.Done():
	case <-time.After(unmountWait):
		errs = append(errs, fmt.Errorf("%s: serve loop still running %v after unmount (a file left open?)", m.Dir, unmountWait))
		// The mount was detached (a failed test left a file open), so
		// its directory no longer names the connection: abort it by
		// the number the server noted at mount.
		if err := m.Server.Abort(); err != nil {
			abortConnection(m.Dir)
		}
		select {
		case <-m.Server.Done():
		case <-time.After(unmountWait):
			return errors.Join(append(errs, fmt.Errorf("%s: serve loop still running after the connection's abort", m.Dir))...)
		}
	}
	if err := m.Server.Wait(); err != nil {
		errs = append(errs, err)
	}
	if err := m.FS.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing %s: %w", m.Pram, err))
	}
	m.FS, m.Server = nil, nil
	return errors.Join(errs...)
}

// check reopens the images and runs the full consistency walk.
func (m *Mounted) check() {
	m.t.Helper()
	if m.noCheck {
		return
	}
	if err := CheckImages(m.Pram, m.Disk); err != nil {
		m.t.Error(err)
	}
}

// CheckImages opens the images (recovering them if dirty), runs FS.Check
// and closes them; the error lists every problem found.
func CheckImages(pram, disk string) error {
	fs, err := Open(pram, disk, conquest.Options{})
	if err != nil {
		return fmt.Errorf("check: opening %s: %w", pram, err)
	}
	errs := fs.Check()
	if err := fs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing: %w", err))
	}
	if len(errs) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "check of %s found %d errors:", pram, len(errs))
	for _, e := range errs {
		fmt.Fprintf(&b, "\n\t%v", e)
	}
	return errors.New(b.String())
}

func (m *Mounted) cleanup() {
	if err := m.unmount(); err != nil {
		m.t.Error(err)
	}
	m.check()
	m.logMu.Lock()
	m.ended = true
	m.logMu.Unlock()
}

// abortConnection aborts the FUSE connection of the mount on dir through
// fusectl, ending a serve loop that an open file keeps alive after a lazy
// unmount.
func abortConnection(dir string) {
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return
	}
	_ = os.WriteFile(fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Minor(st.Dev)), []byte("1"), 0)
}

var (
	dirsMu sync.Mutex
	dirs   []string // every mount point made by this process
)

func registerDir(d string) {
	reaper.Mount(d)
	dirsMu.Lock()
	dirs = append(dirs, d)
	dirsMu.Unlock()
}

func mountDirs() []string {
	dirsMu.Lock()
	defer dirsMu.Unlock()
	return append([]string(nil), dirs...)
}
