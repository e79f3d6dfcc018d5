package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"conquest/fusefs"
	"conquest/pram"
)

func umountCommand() *cli.Command {
	return &cli.Command{
		Name:      "umount",
		Aliases:   []string{"unmount"},
		Usage:     "unmount a Conquest file system and wait for its daemon to exit",
		UsageText: "conquest umount [--lazy] [--timeout 1m] MOUNTPOINT",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "lazy", Aliases: []string{"l"}, Usage: "detach even if busy; the daemon exits after the last open file is closed (not waited for)"},
			&cli.DurationFlag{Name: "timeout", Value: time.Minute, Usage: "how long to wait for the daemon to close the arena"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errors.New("umount needs exactly one MOUNTPOINT")
			}
			mp, err := mountpointPath(c.Args().First())
			if err != nil {
				return err
			}
			mi, ok := fusefs.Mounted(mp)
			if !ok {
				if _, err := os.Lstat(mp); errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("%s: mount point does not exist", mp)
				}
				return fmt.Errorf("%s: not mounted", mp)
			}
			if mi.FSType != "fuse.conquest" {
				return fmt.Errorf("%s: not a Conquest file system (it is %s)", mp, mi.FSType)
			}
			// A dead mount (its daemon was killed) has nothing to wait
			// for: take it down even if processes still hold it.
			note := func(s string) { fmt.Fprintf(c.App.ErrWriter, "conquest: %s\n", s) }
			if cleared, detached, err := clearDeadMount(mi.Dir, note); err != nil {
				return err
			} else if cleared {
				how := "unmounted it"
				if detached {
					how = "detached it (processes still hold files or directories there; they get ENOTCONN)"
				}
				fmt.Fprintf(c.App.ErrWriter, "conquest: %s: its daemon had died: %s; the next mount recovers the arena\n", mi.Dir, how)
				return nil
			}
			if err := fusefs.Unmount(mi.Dir, c.Bool("lazy")); err != nil {
				if now, ok := fusefs.Mounted(mi.Dir); ok && now.Device == mi.Device {
					return err
				}
				// Taken down meanwhile (its daemon signalled, or another
				// umount): wait for the daemon to close the arena as usual.
			}
			arena, ok := strings.CutPrefix(mi.Source, fsnamePrefix)
			if !ok || c.Bool("lazy") {
				return nil
			}
			elsewhere := func() error {
				alive, known := connectionAlive(mi.Device)
				if known && !alive {
					return nil // the last mount is gone: the daemon is closing
				}
				if why := heldHere(mi.Device, mi.Source, mi.Dir); why != "" {
					return fmt.Errorf("%s: unmounted %s, but %s", arena, mi.Dir, why)
				}
				if held := mountedElsewhere(mi.Device, mi.Source, 3); len(held) > 0 {
					return heldElsewhereErr(arena, held)
				}
				if !known {
					return nil
				}
				note(fmt.Sprintf("%s: unmounted %s, but its daemon has not closed the arena yet: something still holds the file system (no other mount of it is to be seen); waiting up to %v",
					arena, mi.Dir, c.Duration("timeout")))
				return nil
			}
			if err := waitReleased(arena, c.Duration("timeout"), elsewhere); err != nil {
				return err
			}
			return closedCleanly(arena)
		},
	}
}

// closedCleanly is nil when the arena at path was closed cleanly. A daemon
// killed while it was closing lets go of the arena's lock as a clean exit
// does, so once waitReleased returns, umount asks the arena itself rather
// than report a clean unmount (an outside review saw 4 of 15 such kills
// reported as clean).
//
// An arena that cannot be read now (its image on a file system that went
// away, as when the file system holding it was another FUSE mount whose
// daemon died) is not reported clean either: the daemon could not have
// closed it (an outside review saw such an umount exit 0 in silence).
func closedCleanly(path string) error {
	open, err := pram.LeftOpen(path)
	if err != nil {
		return fmt.Errorf("unmounted, but cannot tell whether the daemon closed the arena: %w (its log says why; the next mount, or `conquest fsck`, recovers it if it did not)", err)
	}
	if open {
		return fmt.Errorf("%s: unmounted, but its daemon exited without closing the arena (was it killed?); the next mount, or `conquest fsck`, recovers it", path)
	}
	return nil
}

// waitReleased waits until no process holds the arena lock of path: the
// daemon has closed the file system (marked it clean) and is exiting. If
// it has not after half a second, elsewhere (if not nil) may end the wait
// with its error: the daemon has a reason to go on.
func waitReleased(path string, timeout time.Duration, elsewhere func() error) error {
	start := time.Now()
	deadline := start.Add(timeout)
	for inUse(path) {
		if elsewhere != nil && time.Since(start) > 500*time.Millisecond {
			if err := elsewhere(); err != nil {
				return err
			}
			elsewhere = nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: unmounted, but the daemon still holds the arena after %v", path, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}
