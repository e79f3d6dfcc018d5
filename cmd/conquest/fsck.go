package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

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
		Usage:     "check a Conquest file system (not while mounted)",
		UsageText: "conquest fsck [--repair] [--pram PATH --disk PATH]",
		Description: "Opening the arena performs the recovery a mount would (rolling back an interrupted\n" +
			"transaction, freeing orphaned inodes); fsck then walks every structure.\n" +
			"Exit codes as fsck(8): 0 clean, 1 errors corrected, 4 errors left uncorrected,\n" +
			"8 operational error (missing image, in use).",
		Flags: append(deviceFlags(),
			&cli.BoolFlag{Name: "repair", Aliases: []string{"y"}, Usage: "repair what can be repaired"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("fsck takes no arguments (got %q): use --pram and --disk", c.Args().First()), fsckOperational)
			}
			im, err := resolveImages(c)
			if err != nil {
				return cli.Exit(err.Error(), fsckOperational)
			}
			out := c.App.Writer
			var logs []string
			fsys, err := coreOpen(im, conquest.Options{Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
			if err != nil {
				code := fsckOperational
				if isDamage(err) {
					code = fsckUncorrected
				}
				return cli.Exit(explainOpen(im, err).Error(), code)
			}
			dirty, rolled := fsys.Arena().WasDirty(), fsys.Arena().Recovered()
			errs := fsys.Check()
			if err := fsys.Close(); err != nil {
				return cli.Exit(fmt.Sprintf("%s: closing: %v", im.pram, err), fsckOperational)
			}
			for _, l := range logs {
				fmt.Fprintf(out, "%s\n", l)
			}
			code := fsckClean
			if dirty {
				fmt.Fprintf(out, "%s: was not unmounted cleanly: recovered (%d journal records rolled back)\n", im.pram, rolled)
				code = fsckCorrected
			}
			for _, e := range errs {
				fmt.Fprintf(out, "%s: %v\n", im.pram, e)
			}
			if len(errs) > 0 {
				msg := fmt.Sprintf("%s: %d errors found", im.pram, len(errs))
				if c.Bool("repair") {
					msg += "; these cannot be repaired automatically yet"
				}
				return cli.Exit(msg, fsckUncorrected)
			}
			fmt.Fprintf(out, "%s: clean\n", im.pram)
			if code != fsckClean {
				return cli.Exit("", code)
			}
			return nil
		},
	}
}

// isDamage reports whether err says the image is damaged (as opposed to
// missing, in use, or not a Conquest image at all).
func isDamage(err error) bool {
	for _, e := range []error{pram.ErrChecksum, pram.ErrCorrupt, pram.ErrSizeMismatch, conquest.ErrCorrupt, alloc.ErrCorrupt,
		diskstore.ErrChecksum, diskstore.ErrCorrupt, diskstore.ErrGeometry} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
