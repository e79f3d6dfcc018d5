package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
	"conquest/pram"
)

func dfCommand() *cli.Command {
	return &cli.Command{
		Name:      "df",
		Usage:     "show arena and disk usage and file counts",
		UsageText: "conquest df [--pram PATH --disk PATH | MOUNTPOINT]",
		Description: "With a MOUNTPOINT, or when the images are mounted, the arena and disk figures come from the\n" +
			"mount's daemon, as the read-only extended attribute system.conquest.space of its root (from\n" +
			"statfs(2), which adds the two together, if the daemon does not serve it), and the per-kind\n" +
			"file counts need the images unmounted; otherwise the images are opened (they must not be in\n" +
			"use) and read directly. Images a crash left needing recovery are recovered (df says so).",
		Flags:  deviceFlags(),
		Action: func(c *cli.Context) error { return report(c, false) },
	}
}

func statCommand() *cli.Command {
	return &cli.Command{
		Name:      "stat",
		Usage:     "show the arena's geometry, allocator state and file counts",
		UsageText: "conquest stat [--pram PATH --disk PATH | MOUNTPOINT]",
		Flags:     deviceFlags(),
		Action:    func(c *cli.Context) error { return report(c, true) },
	}
}

// report is df (detail false) and stat (detail true).
func report(c *cli.Context, detail bool) error {
	out := c.App.Writer
	if c.NArg() > 1 {
		return errors.New("give at most one MOUNTPOINT")
	}
	if c.NArg() == 1 {
		if c.IsSet("pram") || c.IsSet("disk") {
			return errors.New("give either a MOUNTPOINT or --pram/--disk, not both")
		}
		mp, err := mountpointPath(c.Args().First())
		if err != nil {
			return err
		}
		mi, ok := fusefs.Mounted(mp)
		if !ok || mi.FSType != "fuse.conquest" {
			return fmt.Errorf("%s: not a mounted Conquest file system", mp)
		}
		return reportMounted(out, mi)
	}
	im, err := resolveImages(c)
	if err != nil {
		return err
	}
	if !exists(im.pram) {
		err := fmt.Errorf("%s: no such arena", im.pram)
		if diskKept(im) {
			return arenaLost(im, err)
		}
		return fmt.Errorf("%w (format it with `conquest mkfs`, or `conquest mount` the embedded default)", err)
	}
	note := func(msg string) { fmt.Fprintf(c.App.ErrWriter, "conquest: %s\n", msg) }
	if !waitExited(im.pram, note) {
		if mi, ok := mountOf(im.pram); ok {
			return reportMounted(out, mi)
		}
		return fmt.Errorf("%s: arena is in use by another process", im.pram)
	}
	unlockDisk, err := lockDisk(im, note)
	if err != nil {
		if mi, ok := mountOf(im.pram); ok {
			return reportMounted(out, mi) // mounted through another device node
		}
		return err
	}
	defer unlockDisk()
	// df opens read-only first: reporting usage writes nothing, not even
	// the mount counter. A pair a crash left needing recovery is opened as
	// a mount would open it, which recovers it. stat opens as a mount
	// would, to show how a mount maps the arena (a RAM copy, slots).
	var fsys *conquest.FS
	if !detail {
		fsys, err = coreOpen(im, conquest.Options{Logf: func(string, ...any) {}, ReadOnly: true})
	}
	if detail || err != nil {
		fsys, err = openImages(im, conquest.Options{Logf: func(string, ...any) {}}, true, func(why string) {
			fmt.Fprintf(c.App.ErrWriter, "conquest: %s\n", why)
		})
	}
	if err != nil {
		return explainOpen(im, err)
	}
	if a := fsys.Arena(); a.WasDirty() {
		// As mount and fsck say: else the crash would go unnoticed, the
		// pair being clean from here on (fsck finds nothing to recover).
		note(fmt.Sprintf("%s was not unmounted cleanly (its daemon crashed or was killed): recovered it (%d journal records rolled back)", im.pram, a.Recovered()))
	}
	u, st, g := fsys.Usage(), fsys.StatFS(), fsys.Arena().Geometry()
	mounts, shadow := fsys.Arena().Mounts(), fsys.Arena().Shadow()
	if err := fsys.Close(); err != nil {
		return fmt.Errorf("%s: closing: %w", im.pram, err)
	}
	if detail {
		printStat(out, im, g, mounts, shadow, u, st)
	} else {
		printDF(out, im.pram, u)
	}
	return nil
}

// mountOf finds the mount whose source names the arena path.
func mountOf(arena string) (fusefs.MountInfo, bool) {
	for _, mi := range conquestMounts() {
		if mi.Source == fsnamePrefix+arena || sameImage(strings.TrimPrefix(mi.Source, fsnamePrefix), arena) {
			return mi, true
		}
	}
	return fusefs.MountInfo{}, false
}

// conquestMounts lists the mounted Conquest file systems.
func conquestMounts() []fusefs.MountInfo {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ms []fusefs.MountInfo
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.Contains(line, " - fuse.conquest "+fsnamePrefix) {
			if mi, ok := fusefs.Mounted(unescapeOctal(f[4])); ok {
				ms = append(ms, mi)
			}
		}
	}
	return ms
}

func unescapeOctal(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func pct(used, total uint64) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%d%%", (used*100+total-1)/total)
}

func printDF(out io.Writer, name string, u conquest.Usage) {
	printSpace(out, conquest.Space{ArenaBytes: u.ArenaBytes, HeapBytes: u.HeapBytes, HeapUsed: u.HeapUsed, HeapFree: u.HeapFree,
		Inodes: u.Inodes, DiskBytes: u.DiskBytes, DiskUsed: u.DiskUsed, DiskFree: u.DiskFree, DiskAvail: u.DiskAvail})
	fmt.Fprintf(out, "%s: %s: %s (%s of data), %s, %s, %d special, %s\n",
		name, plural(int(u.Inodes), "inode"), plural(int(u.Files), "file"), formatSize(u.FileBytes),
		countOf(int(u.Dirs), "directory", "directories"), plural(int(u.Symlinks), "symlink"), u.Specials, plural(int(u.Orphans), "orphan"))
}

func printStat(out io.Writer, im images, g pram.Geometry, mounts uint64, sh pram.ShadowInfo, u conquest.Usage, st conquest.StatFS) {
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("arena", im.pram)
	row("disk", im.disk)
	row("uuid", g.UUIDString())
	row("created", time.Unix(0, g.CreatedNs).UTC().Format(time.RFC3339))
	row("mounts", mounts)
	row("arena size", fmt.Sprintf("%s (%d bytes)", formatSize(g.Size), g.Size))
	row("journal", fmt.Sprintf("%s at offset %d", formatSize(g.JournalLen), g.JournalOff))
	if sh.Path != "" {
		row("mapped as", fmt.Sprintf("a RAM copy in %s, checkpointed to the image (checkpoint %d)", filepath.Dir(sh.Path), sh.Seq))
		row("checkpoints", fmt.Sprintf("two slots of %s after the arena; a transaction waits for one past %s changed",
			formatSize(sh.SlotPages*pram.PageSize), formatSize(uint64(sh.Limit)*pram.PageSize)))
	} else {
		row("mapped as", fmt.Sprintf("the image itself (%s)", sh.InPlace))
	}
	row("heap", fmt.Sprintf("%s: %s used in %d objects, %s free", formatSize(u.HeapBytes), formatSize(u.HeapUsed), u.HeapObjects, formatSize(u.HeapFree)))
	row("large-file threshold", thresholdText(g.Params[0]))
	if u.DiskBytes > 0 {
		row("disk usage", fmt.Sprintf("%s of %s", formatSize(u.DiskUsed), formatSize(u.DiskBytes)))
		row("disk block size", formatSize(u.DiskBlockSize))
		row("disk free space", fmt.Sprintf("%s in %d extents", formatSize(u.DiskFree), u.DiskFreeExtents))
		row("disk unsynced", fmt.Sprintf("%s written since the last device sync, %s quarantined",
			formatSize(u.DiskUnsynced), formatSize(u.DiskQuarantined)))
		row("disk errors", fmt.Sprintf("%d checksum, %d I/O (since mkfs)", u.DiskChecksumErrors, u.DiskIOErrors))
	} else {
		row("disk usage", "- (large-file disk not in use yet)")
	}
	row("inodes", fmt.Sprintf("%d in use, %d free", u.Inodes, st.Ffree))
	row("files", fmt.Sprintf("%d (%s of data, %s of arena blocks)", u.Files, formatSize(u.FileBytes), formatSize(u.FileAllocated)))
	if u.DiskBytes > 0 {
		row("  in the arena", fmt.Sprintf("%d (%s of data)", u.SmallFiles, formatSize(u.SmallFileBytes)))
		row("  on the disk", fmt.Sprintf("%d (%s of data)", u.LargeFiles, formatSize(u.LargeFileBytes)))
	}
	row("directories", u.Dirs)
	row("symlinks", u.Symlinks)
	row("special files", u.Specials)
	row("orphans", u.Orphans)
	tw.Flush()
}

func thresholdText(v uint64) string {
	if v == 0 {
		return "default"
	}
	return formatSize(v)
}

// printSpace prints the arena and disk rows of df.
func printSpace(out io.Writer, sp conquest.Space) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tSize\tUsed\tAvail\tUse%%\t\n")
	fmt.Fprintf(tw, "arena\t%s\t%s\t%s\t%s\t\n", formatSize(sp.ArenaBytes), formatSize(sp.HeapUsed), formatSize(sp.HeapFree), pct(sp.HeapUsed, sp.HeapBytes))
	if sp.DiskBytes > 0 {
		// Avail leaves out the disk's overwrite reserve, as statfs does.
		fmt.Fprintf(tw, "disk\t%s\t%s\t%s\t%s\t\n", formatSize(sp.DiskBytes), formatSize(sp.DiskUsed), formatSize(sp.DiskAvail), pct(sp.DiskUsed, sp.DiskBytes))
	} else {
		fmt.Fprintf(tw, "disk\t-\t-\t-\t-\t\n")
	}
	tw.Flush()
}

// reportMounted prints the arena's and the disk's space of a mounted file
// system, which its daemon serves as an extended attribute
// (fusefs.SpaceXattr); from a daemon that does not, what statfs(2) tells
// (the two added together).
func reportMounted(out io.Writer, mi fusefs.MountInfo) error {
	buf := make([]byte, 4096)
	if n, err := unix.Getxattr(mi.Dir, fusefs.SpaceXattr, buf); err == nil {
		if sp, err := fusefs.ParseSpace(buf[:n]); err == nil {
			printSpace(out, sp)
			fmt.Fprintf(out, "%s (arena %s, mounted): %s in use; unmount for the per-kind file counts\n",
				mi.Dir, strings.TrimPrefix(mi.Source, fsnamePrefix), plural(int(sp.Inodes), "inode"))
			return nil
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mi.Dir, &st); err != nil {
		return fmt.Errorf("%s: statfs: %v", mi.Dir, err)
	}
	bs := uint64(st.Frsize)
	if bs == 0 {
		bs = uint64(st.Bsize)
	}
	total, free, avail := st.Blocks*bs, st.Bfree*bs, st.Bavail*bs
	used := total - min(free, total)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tSize\tUsed\tAvail\tUse%%\tInodes\tIUsed\tIFree\t\n")
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t\n", mi.Dir, formatSize(total), formatSize(used), formatSize(avail), pct(used, total),
		st.Files, st.Files-min(st.Ffree, st.Files), st.Ffree)
	tw.Flush()
	fmt.Fprintf(out, "%s is mounted (arena %s): figures from statfs; unmount for the per-kind counts\n",
		mi.Dir, strings.TrimPrefix(mi.Source, fsnamePrefix))
	return nil
}
