package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/diskstore"
	"conquest/pram"
)

func mkfsCommand() *cli.Command {
	return &cli.Command{
		Name:      "mkfs",
		Usage:     "format a pram arena and its large-file disk",
		UsageText: "conquest mkfs --pram PATH --disk PATH [--pram-size SIZE] [--disk-size SIZE] [--large-threshold SIZE] [--disk-block-size SIZE] [--force]",
		Description: "Image files are created when the paths do not exist; existing files and devices are formatted.\n" +
			"An existing Conquest image, another file system, or any data in the first 64 KiB is refused\n" +
			"unless --force is given. Sizes take K, M, G or T suffixes.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "pram", Required: true, Usage: "arena: image file, device-DAX or block device"},
			&cli.StringFlag{Name: "disk", Required: true, Usage: "large-file disk: image file or block device"},
			&cli.StringFlag{Name: "pram-size", Usage: "arena size for a new image file (default 1G; a block device: the most that leaves room for checkpoint slots; a device-DAX: its whole size)"},
			&cli.StringFlag{Name: "disk-size", Usage: "disk size: of a new image file (default 4G), or how much of a block device to use (default all of it)"},
			&cli.StringFlag{Name: "large-threshold", Usage: "files larger than this keep their data on the disk (default " + formatSize(diskstore.DefaultThreshold) + ")"},
			&cli.StringFlag{Name: "disk-block-size", Usage: "unit of disk allocation and checksums, a power of two in 4K..1M (default 16K)"},
			&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "overwrite whatever the paths hold"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("mkfs takes no arguments (got %q): use --pram and --disk", c.Args().First())
			}
			im, err := resolveImages(c)
			if err != nil {
				return err
			}
			o := mkfsOptions{force: c.Bool("force"), note: func(msg string) { fmt.Fprintf(c.App.ErrWriter, "conquest: %s\n", msg) }}
			for _, f := range []struct {
				name string
				dst  *uint64
			}{{"pram-size", &o.pramSize}, {"disk-size", &o.diskSize}, {"large-threshold", &o.threshold}, {"disk-block-size", &o.blockSize}} {
				if v := c.String(f.name); v != "" {
					if *f.dst, err = parseSize(v); err != nil {
						return fmt.Errorf("--%s: %v", f.name, err)
					}
					if *f.dst == 0 {
						return fmt.Errorf("--%s %s: the size must be positive (leave the flag out for the default)", f.name, v)
					}
				}
			}
			if err := mkfs(im, o); err != nil {
				return err
			}
			if n := arenaSize(im.pram); n > 0 {
				fmt.Fprintf(c.App.Writer, "formatted %s (%s arena) with disk %s\n", im.pram, formatSize(n), im.disk)
			} else {
				fmt.Fprintf(c.App.Writer, "formatted %s (arena) with disk %s\n", im.pram, im.disk)
			}
			return nil
		},
	}
}

type mkfsOptions struct {
	pramSize, diskSize, threshold, blockSize uint64
	force                                    bool
	note                                     func(string) // told if mkfs waits for an exiting daemon
}

// mkfs formats im after checking that it overwrites nothing of value.
func mkfs(im images, o mkfsOptions) error {
	for _, p := range []string{im.pram, im.disk} {
		if !waitExited(p, o.note) {
			return fmt.Errorf("%s: in use by %s: unmount it first", p, heldBy(p, "a running Conquest daemon (mounted?)"))
		}
		claim, busy, err := claimDeviceWait(p)
		if busy {
			return fmt.Errorf("%s: in use (a mounted file system, swap, or another device holds it): refusing to format it", p)
		}
		if err != nil {
			return err
		}
		defer claim.Close()
		what, err := probe(p)
		if err != nil {
			return err
		}
		if what != "" && !o.force {
			return fmt.Errorf("%s: holds %s; refusing to overwrite it without --force", p, what)
		}
	}
	// Hold the disk's lock until the pair is formatted. A mount takes it
	// before the arena's, so none can start on the pair meanwhile (it
	// waits, then opens the new file system), and one that got in since
	// the check above makes mkfs refuse here, rather than have its disk
	// truncated under it (an existing disk image is opened with O_TRUNC).
	unlock, err := holdDisk(im.disk)
	if err != nil {
		return err
	}
	defer unlock()
	// Both must be writable before either is formatted: a disk formatted
	// before the arena's open failed lost the file system both held.
	for _, p := range []string{im.pram, im.disk} {
		if err := checkWritable(p); err != nil {
			return fmt.Errorf("%w: cannot format it (nothing was changed)", err)
		}
	}
	pramSize := o.pramSize
	if pramSize == 0 {
		pramSize = existingOr(im.pram, defaultPramSize)
	}
	diskSize := o.diskSize
	if diskSize == 0 && !exists(im.disk) {
		diskSize = defaultDiskSize
	}
	if o.blockSize != 0 && !diskstore.ValidBlockSize(o.blockSize) {
		return fmt.Errorf("--disk-block-size: %d is not a power of two from 4K to 1M", o.blockSize)
	}
	// The size given, not what the arena's layer rounds it down to.
	if o.pramSize != 0 && o.pramSize < pram.MinSize {
		given := plural(int(o.pramSize), "byte")
		if o.pramSize >= 1024 {
			given += " (" + formatSize(o.pramSize) + ")"
		}
		return fmt.Errorf("--pram-size: an arena of %s is too small: the least is %s (%d bytes)", given, formatSize(pram.MinSize), pram.MinSize)
	}
	if t := o.threshold; t != 0 && (t < conquest.MinLargeFileThreshold || t > conquest.MaxLargeFileThreshold) {
		return fmt.Errorf("--large-threshold %s: the large-file threshold must be from %s to %s",
			formatSize(t), formatSize(conquest.MinLargeFileThreshold), formatSize(conquest.MaxLargeFileThreshold))
	}
	if st, err := os.Stat(im.disk); err == nil && st.Mode().IsRegular() && st.Size() == 0 && diskSize == 0 {
		// An existing file keeps its size, and an empty one holds no block.
		return fmt.Errorf("%s: an empty file has no room for a disk: give its size with --disk-size (as for a new image file, %s by default)",
			im.disk, formatSize(defaultDiskSize))
	}
	mo := conquest.MkfsOptions{PramSize: pramSize, DiskSize: diskSize, LargeFileThreshold: o.threshold, DiskBlockSize: uint32(o.blockSize)}
	created := []string{}
	for _, p := range []string{im.pram, im.disk} {
		if !exists(p) {
			created = append(created, p)
		}
	}
	err = conquest.Mkfs(im.pram, im.disk, mo)
	if err != nil {
		// Leave nothing behind that was not there (a failed 100T arena
		// would stay as a sparse file of that size).
		for _, p := range created {
			os.Remove(p)
		}
		return explainMkfs(im, pramSize, diskSize, err)
	}
	return nil
}

// explainMkfs says what could not be made where, when conquest.Mkfs failed
// for want of room, which the core's errors leave out: an arena is sparse,
// but its journal and its allocator's map of all its pages are backed at
// once ("mkfs: conquest: no space left on device" for a 100T arena), or
// mapping it fails (ENOMEM); a disk image file may be larger than its file
// system allows (EFBIG, "truncate PATH: file too large"). Other errors are
// returned as they are.
func explainMkfs(im images, pramSize, diskSize uint64, err error) error {
	path, what, size, flag := im.pram, "an arena", pramSize, "--pram-size"
	if pe, ok := errors.AsType[*fs.PathError](err); ok && pe.Path == im.disk || strings.HasPrefix(err.Error(), im.disk+": ") {
		path, what, size, flag = im.disk, "a disk", diskSize, "--disk-size"
	}
	var why string
	advice := "give a smaller " + flag
	switch {
	case errors.Is(err, pram.ErrNoSpace), errors.Is(err, conquest.ErrNoSpace), errors.Is(err, syscall.ENOSPC):
		why = "no space left on device"
	case errors.Is(err, syscall.ENOMEM) && addressSpaceShort(size):
		why = fmt.Sprintf("more address space than this process may map (ulimit -v: %s)", formatSize(addressSpaceLimit()))
		advice = "raise the limit (ulimit -v unlimited) or " + advice
	case errors.Is(err, syscall.ENOMEM):
		why = "not enough memory to map it"
	case errors.Is(err, syscall.EFBIG) && fileSizeLimit() > 0 && fileSizeLimit() < size:
		why = fmt.Sprintf("a file larger than this process may write (ulimit -f: %s)", formatSize(fileSizeLimit()))
	case errors.Is(err, syscall.EFBIG):
		why = "a file larger than its file system allows"
	default:
		return err
	}
	if st, serr := os.Stat(path); serr == nil && !st.Mode().IsRegular() || size == 0 {
		return err // a device, sized by itself
	}
	var sfs unix.Statfs_t
	if unix.Statfs(filepath.Dir(path), &sfs) == nil {
		why += fmt.Sprintf(" (its file system has %s free)", formatSize(sfs.Bavail*uint64(sfs.Bsize)))
	}
	return fmt.Errorf("%s: cannot make %s of %s there: %s; %s", path, what, formatSize(size), why, advice)
}

// existingOr is the size of an existing non-empty regular file, 0 for a
// device (pram.Format sizes it), else def.
func existingOr(path string, def uint64) uint64 {
	st, err := os.Stat(path)
	switch {
	case err != nil:
	case st.Mode().IsRegular() && st.Size() > 0:
		return uint64(st.Size())
	case st.Mode()&os.ModeDevice != 0:
		return 0 // the arena's layer sizes a device (pram.Format)
	}
	return def
}

// arenaSize is the size of the arena formatted at path (0 when unknown):
// on a device it may be smaller than the device.
func arenaSize(path string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	page := make([]byte, pram.PageSize)
	if _, err := io.ReadFull(f, page); err != nil {
		return 0
	}
	g, err := pram.Validate(page, 0)
	if err != nil {
		return 0
	}
	return g.Size
}

func coreOpen(im images, o conquest.Options) (*conquest.FS, error) {
	if im.disk != "" {
		if what, err := probe(im.pram); err == nil && strings.HasPrefix(what, "a Conquest arena") {
			// A missing disk is refused before the arena is opened,
			// which writes its superblock (the core finds the disk
			// missing only after that).
			if _, err := os.Stat(im.disk); errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
		}
	}
	return conquest.Open(im.pram, im.disk, o)
}

// holdDisk takes the lock a mount takes on the disk at path (flockDisk),
// without lockDisk's wait for an exiting daemon, and returns the function
// that lets it go; a path that does not exist yet has nothing to lock.
func holdDisk(path string) (unlock func(), err error) {
	unlock, busy, err := flockDisk(path)
	if busy {
		return nil, fmt.Errorf("%s: in use by %s: unmount it first", path, heldBy(path, "a running Conquest daemon (mounted?)"))
	}
	return unlock, err
}

// fileSizeLimit is the largest file this process may write (RLIMIT_FSIZE,
// `ulimit -f`), or 0 if there is no such limit: past it writes fail with
// EFBIG, as past a file system's own maximum.
func fileSizeLimit() uint64 {
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_FSIZE, &r) != nil || r.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return r.Cur
}

// addressSpaceLimit is the most address space this process may map
// (RLIMIT_AS, `ulimit -v`), or 0 if there is no such limit: past it a
// mapping fails with ENOMEM however much memory is free. (Far below it the
// Go runtime itself cannot start, and dies with its own message.)
var addressSpaceLimit = func() uint64 {
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_AS, &r) != nil || r.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return r.Cur
}

// addressSpaceShort reports whether a mapping of size bytes would take
// this process past its address-space limit (an ENOMEM from elsewhere,
// under a limit with room, is not put on it).
func addressSpaceShort(size uint64) bool {
	lim := addressSpaceLimit()
	return lim > 0 && mappedBytes()+size > lim
}

// mappedBytes is this process's address space in use (VmSize; 0 if it
// cannot be read).
func mappedBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var pages uint64
	if _, err := fmt.Sscan(string(b), &pages); err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}
