package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"conquest/pram"
)

// Sizes of the embedded default's image files (sparse: they take disk space
// only as they fill) and of images mkfs creates when no size is given.
const (
	defaultPramSize = 1 << 30
	defaultDiskSize = 4 << 30
)

// images is a pram arena and its large-file disk.
type images struct {
	pram, disk string
	// dataDir holds the embedded default's images and the daemon's log.
	dataDir string
	// embedded: no --pram/--disk were given; the images live in dataDir.
	embedded bool
}

func deviceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "pram", Usage: "persistent-RAM arena: an image file, a device-DAX or a block device (default: the embedded image in the data directory)"},
		&cli.StringFlag{Name: "disk", Usage: "large-file disk: an image file or a block device (given together with --pram)"},
	}
}

// dataDir is $CONQUEST_HOME, else $XDG_DATA_HOME/conquest, else
// ~/.local/share/conquest.
func dataDir() (string, error) {
	if d := os.Getenv("CONQUEST_HOME"); d != "" {
		return filepath.Abs(d)
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "conquest"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot choose a data directory (%v): set CONQUEST_HOME", err)
	}
	return filepath.Join(home, ".local", "share", "conquest"), nil
}

// resolveImages reads --pram and --disk, or picks the embedded default.
func resolveImages(c *cli.Context) (images, error) {
	dir, err := dataDir()
	if err != nil {
		return images{}, err
	}
	im := images{pram: c.String("pram"), disk: c.String("disk"), dataDir: dir}
	switch {
	case im.pram == "" && im.disk == "":
		im.embedded = true
		im.pram = filepath.Join(dir, "pram.img")
		im.disk = filepath.Join(dir, "disk.img")
		return im, im.checkKinds()
	case im.pram == "":
		return images{}, errors.New("--disk given without --pram: give both, or neither for the embedded default")
	case im.disk == "":
		return images{}, errors.New("--pram given without --disk: give both, or neither for the embedded default")
	}
	if im.pram, err = filepath.Abs(im.pram); err != nil {
		return images{}, err
	}
	if im.disk, err = filepath.Abs(im.disk); err != nil {
		return images{}, err
	}
	if im.pram == im.disk {
		return images{}, fmt.Errorf("%s: --pram and --disk must be different", im.pram)
	}
	if sameImage(im.pram, im.disk) {
		return images{}, fmt.Errorf("%s and %s are the same file (a link, or two nodes of one device): --pram and --disk must be different", im.pram, im.disk)
	}
	return im, im.checkKinds()
}

// checkKinds refuses images that exist but can be no image: a FIFO (whose
// open waits for a writer: every command hung on one), a socket or a
// directory, and a character device as the disk (only an arena may be one,
// a device-DAX): refused here, before the arena's open counts the mount.
func (im images) checkKinds() error {
	for _, p := range []struct{ flag, path, want string }{
		{"--pram", im.pram, "an image file, a device-DAX or a block device"},
		{"--disk", im.disk, "an image file or a block device"},
	} {
		st, err := os.Stat(p.path)
		if err != nil {
			continue // opening it says why
		}
		what := ""
		switch m := st.Mode(); {
		case m&fs.ModeNamedPipe != 0:
			what = "a FIFO"
		case m&fs.ModeSocket != 0:
			what = "a socket"
		case m.IsDir():
			what = "a directory"
		case m&fs.ModeCharDevice != 0 && p.flag == "--disk":
			what = "a character device"
		default:
			continue
		}
		if im.embedded {
			return fmt.Errorf("%s: the embedded default's image is %s, not an image file: move it away", p.path, what)
		}
		return fmt.Errorf("%s: %s is %s; give %s", p.path, p.flag, what, p.want)
	}
	return nil
}

// sameImage reports whether two existing paths name one file (through a
// symlink or a hard link) or one block device (two device nodes).
func sameImage(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return false
	}
	if os.SameFile(sa, sb) {
		return true
	}
	ra, okA := sa.Sys().(*syscall.Stat_t)
	rb, okB := sb.Sys().(*syscall.Stat_t)
	return okA && okB && sa.Mode()&os.ModeDevice != 0 && sb.Mode()&os.ModeDevice != 0 &&
		sa.Mode()&os.ModeCharDevice == sb.Mode()&os.ModeCharDevice && ra.Rdev == rb.Rdev
}

// inUse reports whether a daemon (or fsck, or mkfs) holds path's arena lock.
func inUse(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return false
	}
	return errors.Is(err, unix.EWOULDBLOCK)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// exitWait is how long a command waits for an arena held by a process while
// no mount names it ($CONQUEST_EXIT_WAIT, a Go duration, overrides it; tests
// shorten it).
const exitWait = 30 * time.Second

// waitExited waits, up to exitWait, while the arena at path is held by a
// process and no mount names it, and reports whether it is free. That is
// most often the daemon of a mount just taken down by umount(8) or
// `fusermount3 -u`: they return once the kernel has detached the mount, while
// the daemon is still writing back and closing the file system, so an fsck,
// mount or mkfs run right after them found the arena in use (`conquest
// umount` waits for the daemon itself). A lazily detached mount whose files
// are still open, or another command running on the arena, holds it longer:
// the wait ends at exitWait and the caller refuses as before. A held arena
// that a mount names is not waited for, nor a held disk whose holder holds
// such an arena (heldByMount: mkfs given a mounted file system's disk with
// another arena), and the wait ends after half a second for an arena
// mounted in another mount namespace; note is told once if the wait lasts.
func waitExited(path string, note func(string)) bool {
	if !inUse(path) {
		return true
	}
	limit := exitWait
	if d, err := time.ParseDuration(os.Getenv("CONQUEST_EXIT_WAIT")); err == nil && d >= 0 {
		limit = d
	}
	start := time.Now()
	noted := false
	for i := 0; inUse(path); i++ {
		if i%10 == 0 {
			if _, ok := mountOf(path); ok || heldByMount(path) {
				return false
			}
		}
		if i == 50 && len(arenaMountedElsewhere(path, 1)) > 0 {
			return false // a copy of the mount in another namespace (elsewhere.go)
		}
		waited := time.Since(start)
		if waited >= limit {
			return false
		}
		if !noted && waited >= time.Second && note != nil {
			note(fmt.Sprintf("%s: waiting (up to %v) for the process holding the arena to let it go: the daemon of a mount just unmounted, still closing the file system, or of one detached with umount -l (--lazy), which lets it go when the last file open on it closes", path, limit))
			noted = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// diskLockWait is how long lockDisk waits for a disk whose lock is held
// while no process holds its arena: a daemon releases the disk just after
// the arena when it exits (see lockDisk).
const diskLockWait = 300 * time.Millisecond

// lockDisk takes an exclusive lock on im's disk, and claims both images if
// they are block devices (claim.go), held by every process that
// opens the file system (the daemon, fsck, df and stat) for as long as it
// has it open, as the arena's own lock is: the arena lock alone lets two
// daemons share one disk when two arenas name it (a copy of an arena, or an
// arena formatted again with a mounted file system's disk), and both then
// allocate and write the same blocks. The returned function releases the
// lock (more calls do nothing); a disk that does not exist is not locked
// (opening it fails).
//
// The lock is taken before the arena's and released after it, so a process
// that finds the arena free may still find the disk held for a moment by a
// daemon that is exiting (`conquest umount` waits for the arena only); a
// held disk whose arena is free is waited for, up to diskLockWait.
//
// Before that it waits for an arena held by an exiting daemon (waitExited,
// note told if that lasts).
func lockDisk(im images, note func(string)) (unlock func(), err error) {
	waitExited(im.pram, note)
	deadline := time.Now().Add(diskLockWait)
	for {
		unlock, busy, err := flockDisk(im.disk)
		claimed := ""
		if !busy && err == nil {
			// Then the block devices (claim.go), which a daemon also
			// lets go just after its arena.
			var release func()
			if release, claimed, err = claimDevices(im.pram, im.disk); claimed == "" && err == nil {
				disk := unlock
				return func() { release(); disk() }, nil
			}
			unlock()
		}
		switch {
		case err != nil:
			return nil, err
		case inUse(im.pram):
			return nil, explainOpen(im, pram.ErrLocked)
		case claimed != "" && mounted(im.pram):
			return nil, explainOpen(im, pram.ErrLocked) // through another device node
		case time.Now().Before(deadline):
		case claimed != "":
			return nil, fmt.Errorf("%s: in use: another process holds the device exclusively (a file system mounted from it, or a Conquest mount of it through another device node); refusing to open it", claimed)
		default:
			return nil, fmt.Errorf("%s: disk is in use by %s; refusing to share it", im.disk, heldBy(im.disk, "another process (the disk of a file system mounted from another arena?)"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mounted reports whether a mount names the arena at path (mountOf).
func mounted(path string) bool {
	_, ok := mountOf(path)
	return ok
}

// flockDisk tries once to take the exclusive lock on the disk at path
// (lockDisk) and returns the function that releases it (more calls do
// nothing), or busy if another process holds it. A path that does not exist
// has nothing to lock.
func flockDisk(path string) (unlock func(), busy bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return func() {}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("%s: locking the disk: %w", path, err)
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, false, nil
}
