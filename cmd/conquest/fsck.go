package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"conquest/alloc"
	"conquest/conquest"
	"conquest/diskstore"
	"conquest/pram"
)

// fsck(8) exit codes.
const (
	fsckClean       = 0
	fsckCorrected   = 1
	fsckUncorrected = 4
	fsckOperational = 8
)

func fsckCommand() *cli.Command {
	return &cli.Command{
		Name:      "fsck",
		Usage:     "check (and repair) a Conquest file system (not while mounted)",
		UsageText: "conquest fsck [--repair [--zero-bad-blocks] | --no-write] [--pram PATH --disk PATH]",
		Description: "Opening the arena performs the recovery a mount would (rolling back an interrupted\n" +
			"transaction, freeing orphaned inodes); fsck then walks every structure and verifies\n" +
			"the checksum of every disk block. With --repair it fixes what it can, each fix in its\n" +
			"own transaction: it removes directory entries naming no valid inode, sets link counts\n" +
			"and \"..\" pointers to what the walk counted, moves inodes no directory names to\n" +
			"/lost+found (as #INO), frees unreachable allocations and fixes the counters; data\n" +
			"failing its checksum, or whose checksums were lost with a damaged record, is reported\n" +
			"(--zero-bad-blocks replaces such blocks by zeros, and empties a large file's damaged list of\n" +
			"segments or checksums: the file reads as zeros). The disk's free map and its other lists are\n" +
			"rebuilt from the files, and a disk superblock lost with its copy from the arena, once the\n" +
			"disk's data verifies against the arena's checksums. With --no-write (-n, as e2fsck -n)\n" +
			"nothing is written to either image, not even the mount counter; an image that needs\n" +
			"recovery is then refused. Exit codes as fsck(8): 0 clean, 1 errors corrected, 4 errors\n" +
			"left uncorrected, 8 operational error (missing image, in use).",
		Flags: append(deviceFlags(),
			&cli.BoolFlag{Name: "repair", Aliases: []string{"y"}, Usage: "repair what can be repaired"},
			&cli.BoolFlag{Name: "zero-bad-blocks", Usage: "with --repair: replace disk blocks failing their checksum, or whose checksums or block map are lost, by zeros (their data is lost)"},
			&cli.BoolFlag{Name: "no-write", Aliases: []string{"n"}, Usage: "check without writing anything to the images (no recovery, no mount counter)"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("fsck takes no arguments (got %q): use --pram and --disk", c.Args().First()), fsckOperational)
			}
			if c.Bool("zero-bad-blocks") && !c.Bool("repair") {
				return cli.Exit("--zero-bad-blocks needs --repair", fsckOperational)
			}
			noWrite := c.Bool("no-write")
			if noWrite && c.Bool("repair") {
				return cli.Exit("--no-write and --repair exclude each other", fsckOperational)
			}
			im, err := resolveImages(c)
			if err != nil {
				return cli.Exit(err.Error(), fsckOperational)
			}
			unlockDisk, err := lockDisk(im, func(msg string) { fmt.Fprintf(c.App.ErrWriter, "conquest: %s\n", msg) })
			if err != nil {
				return cli.Exit(err.Error(), fsckOperational)
			}
			defer unlockDisk()
			out := c.App.Writer
			var logs []string
			opts := conquest.Options{Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }}
			opts.Disk.ForCheck = true // a damaged unsynced list is reported, not refused
			var readOnly string       // why the images were opened read-only
			var fsys *conquest.FS
			if noWrite {
				opts.ReadOnly = true
				fsys, err = coreOpen(im, opts)
				if errors.Is(err, pram.ErrNeedsRecovery) {
					return cli.Exit(fmt.Sprintf("%v: run `conquest fsck` without --no-write (or mount the file system) once to recover it", err), fsckUncorrected)
				}
			} else {
				fsys, err = openImages(im, opts, !c.Bool("repair"), func(why string) { readOnly = why })
			}
			var rebuilt []string // fixes made before the file system could be opened
			triedCopy := false   // the heap's copy of the superblock was looked for
			grewDisk := false    // a disk image cut short was grown back
			fixedLength := false // the arena image's length was set to its superblock's
			for step := 0; err != nil && c.Bool("repair") && step < 8; step++ {
				if errors.Is(err, pram.ErrSuperBackup) {
					// The superblock's static part is damaged and page 0
					// keeps an intact copy of it.
					if _, rerr := pram.RestoreSuper(im.pram); rerr != nil {
						return cli.Exit(fmt.Sprintf("%v\n%s: restoring the superblock failed: %v", explainOpen(im, err), im.pram, rerr), fsckUncorrected)
					}
					rebuilt = append(rebuilt, fmt.Sprintf("arena superblock: %v: wrote the backup copy back", err))
				} else if (errors.Is(err, pram.ErrNotConquest) || errors.Is(err, pram.ErrChecksum)) && !errors.Is(err, pram.ErrSuperBackup) && !triedCopy &&
					holdsOther(im.pram, "a Conquest arena") == "" {
					// Both copies of the superblock's static part are
					// lost (one damaged page holds them): write back the
					// copy the heap keeps, if there is one. Not into a
					// disk given as the arena, or another file system
					// (searched in full for a copy, and written to if a
					// file it holds were one).
					triedCopy = true
					uuid, rerr := conquest.RestoreSuperFromCopy(im.pram, im.disk)
					if errors.Is(rerr, conquest.ErrNoSuperCopy) {
						break // an older arena, or not an arena: reported as it is
					} else if rerr != nil {
						return cli.Exit(fmt.Sprintf("%v\n%v", explainOpen(im, err), rerr), fsckUncorrected)
					}
					rebuilt = append(rebuilt, fmt.Sprintf("arena superblock: %v: wrote back the copy the heap keeps (file system %s)", err, uuid))
				} else if errors.Is(err, diskstore.ErrSuperBackup) {
					// The same for the disk's superblock, in its block 0.
					if rerr := restoreDiskSuper(im.disk); rerr != nil {
						return cli.Exit(fmt.Sprintf("%v\n%s: restoring the disk superblock failed: %v", explainOpen(im, err), im.disk, rerr), fsckUncorrected)
					}
					rebuilt = append(rebuilt, fmt.Sprintf("disk superblock: %v: wrote the backup copy back", err))
				} else if (errors.Is(err, diskstore.ErrNotConquestDisk) || errors.Is(err, diskstore.ErrChecksum)) && !errors.Is(err, diskstore.ErrSuperBackup) {
					// The disk's superblock and its copy are both lost
					// (one damaged page holds both): rebuild it from the
					// arena, once the disk's data has verified against it.
					did, rerr := rebuildDiskSuper(im, opts)
					if rerr != nil {
						return cli.Exit(fmt.Sprintf("%v\n%v", explainOpen(im, err), rerr), fsckUncorrected)
					}
					rebuilt = append(rebuilt, did)
				} else if errors.Is(err, conquest.ErrRootSlot) {
					// Root slot 1 does not lead to the root directory:
					// find its one inode record in the heap.
					from, to, rerr := conquest.FindRootInode(im.pram)
					if rerr != nil {
						return cli.Exit(fmt.Sprintf("%v\n%s: finding the root directory's inode failed: %v", explainOpen(im, err), im.pram, rerr), fsckUncorrected)
					}
					rebuilt = append(rebuilt, fmt.Sprintf("arena root slot 1: %v: set it from %#x to %#x, the root directory's inode", err, from, to))
				} else if short, ok := errors.AsType[*diskstore.ShortDeviceError](err); ok && !grewDisk {
					// A disk image cut short: grow it back to its size if
					// it is this arena's (the lost part reads as zeros;
					// data that was there fails its checksums below).
					grewDisk = true
					did, rerr := growShortDisk(im, short)
					if rerr != nil {
						return cli.Exit(fmt.Sprintf("%v\n%v", explainOpen(im, err), rerr), fsckUncorrected)
					}
					rebuilt = append(rebuilt, did)
				} else if errors.Is(err, pram.ErrSizeMismatch) && !fixedLength {
					// An arena image file cut short or grown: give it the
					// length its superblock's size means.
					fixedLength = true
					did, rerr := pram.FixImageLength(im.pram)
					if rerr != nil {
						return cli.Exit(fmt.Sprintf("%v\n%v", explainOpen(im, err), rerr), fsckUncorrected)
					}
					rebuilt = append(rebuilt, fmt.Sprintf("arena image: %v: %s", err, did))
				} else if me := missingRecord(err); me != nil {
					// The disk's free map or stats record is overwritten:
					// lay a new one. The walk below rebuilds the free map
					// from the files (every list in it follows from them)
					// and sets the stats record's count of files.
					lay, what := conquest.NewDiskFreeMap, "an empty one"
					if me.Slot == diskstore.RootStats {
						lay, what = conquest.NewDiskStats, "a new one"
					}
					from, to, rerr := lay(im.pram, im.disk)
					if rerr != nil {
						return cli.Exit(fmt.Sprintf("%v\n%s: laying a new %s failed: %v", explainOpen(im, err), im.pram, me.What, rerr), fsckUncorrected)
					}
					rebuilt = append(rebuilt, fmt.Sprintf("disk %s: %v: laid %s at %#x (root slot %d held %#x); the walk rebuilds what it holds from the files", me.What, err, what, to, me.Slot, from))
				} else if errors.Is(err, conquest.ErrOrphanList) && !opts.SkipDamagedOrphans {
					// The orphan list is damaged: open without freeing the
					// orphans; the repair cuts the list where it breaks.
					opts.SkipDamagedOrphans = true
				} else if errors.Is(err, pram.ErrJournal) && !opts.Arena.DiscardJournal {
					// The undo journal is damaged: nothing in it can be
					// trusted to roll back. Empty it; the walk below finds
					// what an interrupted operation left half done.
					opts.Arena.DiscardJournal = true
				} else if _, ok := errors.AsType[*alloc.StaticHeaderError](err); ok {
					// The allocator's root slot or header's static part
					// is damaged: it follows from the arena's geometry.
					n, rerr := conquest.RewriteHeapHeader(im.pram)
					if rerr != nil {
						return cli.Exit(fmt.Sprintf("%v\n%s: rewriting the allocator's header failed: %v", explainOpen(im, err), im.pram, rerr), fsckUncorrected)
					}
					rebuilt = append(rebuilt, fmt.Sprintf("arena heap: %v: rewrote the header's static part from the arena's geometry (%d bytes differed)", err, n))
				} else if _, ok := errors.AsType[*alloc.DerivedStateError](err); ok {
					// The allocator's lists or counters are damaged: they
					// follow from its page map, so rebuild them.
					rep, rerr := conquest.RebuildAllocator(im.pram)
					if rerr != nil {
						return cli.Exit(fmt.Sprintf("%v\n%s: rebuilding the allocator's lists and counters failed: %v", explainOpen(im, err), im.pram, rerr), fsckUncorrected)
					}
					rebuilt = append(rebuilt, fmt.Sprintf("arena heap: %v: rebuilt the allocator's lists and counters from its page map (%d words rewritten)",
						err, rep.Words))
				} else {
					break
				}
				fsys, err = coreOpen(im, opts) // and again
			}
			if err != nil {
				code := fsckOperational
				if isDamage(err) {
					code = fsckUncorrected
				}
				return cli.Exit(explainOpen(im, err).Error(), code)
			}
			dirty, rolled := fsys.Arena().WasDirty(), fsys.Arena().Recovered()
			if d := fsys.Arena().DiscardedJournal(); d != nil {
				rebuilt = append(rebuilt, fmt.Sprintf("%v: emptied it, rolling nothing back", d))
			}
			bar := newProgressBar(c.App.ErrWriter, "verifying data")
			var errs []error
			var rep conquest.RepairReport
			if c.Bool("repair") {
				rep, err = fsys.Repair(conquest.RepairOptions{VerifyData: true, ZeroBadBlocks: c.Bool("zero-bad-blocks"), Progress: bar.update})
				errs = rep.Found
			} else {
				errs = fsys.CheckWith(conquest.CheckOptions{VerifyData: true, Progress: bar.update})
			}
			bar.done()
			due, why := fsys.Arena().CheckDue(), fsys.CheckDueWhy()
			if due && !noWrite && err == nil && len(rep.Remaining) == 0 && (c.Bool("repair") || len(errs) == 0) {
				// Consistent now: a mount need not walk it again.
				if e := fsys.Arena().ClearCheckDue(); e != nil {
					err = fmt.Errorf("recording the check: %w", e)
				}
			}
			if e := fsys.Close(); e != nil && err == nil {
				err = fmt.Errorf("closing: %w", e)
			}
			if err != nil {
				return cli.Exit(fmt.Sprintf("%s: %v", im.pram, err), fsckOperational)
			}
			if readOnly != "" {
				fmt.Fprintf(out, "%s\n", readOnly)
			}
			for _, l := range logs {
				fmt.Fprintf(out, "%s\n", l)
			}
			code := fsckClean
			if dirty {
				fmt.Fprintf(out, "%s: was not unmounted cleanly: recovered (%d journal records rolled back)\n", im.pram, rolled)
				code = fsckCorrected
			}
			if due {
				fmt.Fprintf(out, "%s: %s: checked in full\n", im.pram, why)
			}
			for _, e := range errs {
				fmt.Fprintf(out, "%s: %v\n", im.pram, e)
			}
			if !c.Bool("repair") {
				if len(errs) > 0 {
					how := "run `conquest fsck --repair` to repair them"
					if readOnly != "" {
						how += ", once the images can be written"
					}
					return cli.Exit(fmt.Sprintf("%s: %s found (%s)", im.pram, plural(len(errs), "error"), how), fsckUncorrected)
				}
				fmt.Fprintf(out, "%s: clean\n", im.pram)
				return exitCode(code)
			}
			for _, f := range rebuilt {
				fmt.Fprintf(out, "%s: fixed: %s\n", im.pram, f)
			}
			for _, f := range rep.Fixes {
				fmt.Fprintf(out, "%s: fixed: %s\n", im.pram, f)
			}
			for _, e := range rep.Remaining {
				fmt.Fprintf(out, "%s: not repaired: %v\n", im.pram, e)
			}
			if len(rep.Remaining) > 0 {
				return cli.Exit(fmt.Sprintf("%s: %s found, %s made, %s left uncorrected",
					im.pram, plural(len(errs)+len(rebuilt), "error"), plural(len(rep.Fixes)+len(rebuilt), "repair"), plural(len(rep.Remaining), "error")), fsckUncorrected)
			}
			if len(errs) > 0 || len(rep.Fixes)+len(rebuilt) > 0 {
				fmt.Fprintf(out, "%s: %s found, %s made: clean now\n", im.pram, plural(len(errs)+len(rebuilt), "error"), plural(len(rep.Fixes)+len(rebuilt), "repair"))
				code = fsckCorrected
			} else {
				fmt.Fprintf(out, "%s: clean\n", im.pram)
			}
			return exitCode(code)
		},
	}
}

func exitCode(code int) error {
	if code == fsckClean {
		return nil
	}
	return cli.Exit("", code)
}

// progressBar draws the data verification's progress on a terminal; it
// draws nothing when w is not one.
type progressBar struct {
	w     io.Writer
	what  string
	last  int // per mille last drawn, -1 for none
	drawn bool
}

func newProgressBar(w io.Writer, what string) *progressBar {
	f, ok := w.(*os.File)
	if !ok {
		return &progressBar{last: -1}
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return &progressBar{last: -1}
	}
	return &progressBar{w: w, what: what, last: -1}
}

// update is the Progress callback.
func (p *progressBar) update(done, total uint64) {
	if p.w == nil || total == 0 {
		return
	}
	pm := int(min(done, total) * 1000 / total)
	if pm == p.last {
		return
	}
	p.last = pm
	const width = 40
	n := pm * width / 1000
	fmt.Fprintf(p.w, "\r%s [%s%s] %5.1f%% (%d/%d blocks)", p.what,
		strings.Repeat("=", n), strings.Repeat(" ", width-n), float64(pm)/10, done, total)
	p.drawn = true
}

// done ends the bar's line.
func (p *progressBar) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

// isDamage reports whether err says the image is damaged (as opposed to
// missing, in use, or not a Conquest image at all).
func isDamage(err error) bool {
	for _, e := range []error{pram.ErrSuperBackup, diskstore.ErrSuperBackup, pram.ErrChecksum, pram.ErrCorrupt, pram.ErrSizeMismatch, conquest.ErrCorrupt, alloc.ErrCorrupt,
		diskstore.ErrChecksum, diskstore.ErrCorrupt, diskstore.ErrGeometry} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// plural is "1 error", "2 errors".
func plural(n int, word string) string {
	return countOf(n, word, word+"s")
}

// countOf is n with the word for one or for many: "1 directory", "0 directories".
func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// restoreDiskSuper writes back the copy of the disk superblock that block 0
// of the disk at path keeps (diskstore.RestoreSuper).
func restoreDiskSuper(path string) error {
	dev, err := diskstore.OpenDevice(path, diskstore.DeviceOptions{})
	if err != nil {
		return err
	}
	_, err = diskstore.RestoreSuper(dev)
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// growShortDisk grows the disk image file im.disk, cut short, back to the
// size its superblock says, once that superblock names the arena's UUID
// (another pair's disk is left alone). A block device is not grown.
func growShortDisk(im images, short *diskstore.ShortDeviceError) (string, error) {
	st, err := os.Stat(im.disk)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s: a device smaller than its superblock says cannot be grown", im.disk)
	}
	g, err := pram.ReadGeometry(im.pram)
	if err != nil {
		return "", err
	}
	f, err := os.Open(im.disk)
	if err != nil {
		return "", err
	}
	page := make([]byte, 4096)
	_, err = io.ReadFull(f, page)
	f.Close()
	if err != nil {
		return "", fmt.Errorf("%s: reading its superblock: %w", im.disk, err)
	}
	sup, err := diskstore.DecodeSuper(page, 0)
	if err != nil {
		return "", fmt.Errorf("%s: %w", im.disk, err)
	}
	if sup.UUID != g.UUID || sup.Blocks != short.Blocks {
		return "", fmt.Errorf("%s: its superblock names file system %s, the arena is %s: not growing another pair's disk", im.disk, pram.FormatUUID(sup.UUID), g.UUIDString())
	}
	size := int64(sup.Blocks) * int64(sup.BlockSize)
	if err := os.Truncate(im.disk, size); err != nil {
		return "", fmt.Errorf("%s: growing it back to %d bytes: %w", im.disk, size, err)
	}
	return fmt.Sprintf("disk image: %s had %d bytes of its %d: grew it back (the lost part reads as zeros; data that was there fails its checksums)", im.disk, short.Size, size), nil
}
