// Command conquest makes, mounts, checks and measures Conquest file systems.
//
//	conquest mkfs    --pram PATH --disk PATH [--pram-size SIZE] [--disk-size SIZE] [--force]
//	conquest mount   [--pram PATH --disk PATH] [--foreground] MOUNTPOINT
//	conquest umount  MOUNTPOINT
//	conquest fsck    [--repair [--zero-bad-blocks]] [--pram PATH --disk PATH]
//	conquest df      [--pram PATH --disk PATH | MOUNTPOINT]
//	conquest stat    [--pram PATH --disk PATH | MOUNTPOINT]
//	conquest bench   postmark|sprite-small|sprite-large ...
//	conquest SOURCE MOUNTPOINT -o OPTIONS   (as mount.fuse3 runs it: helper.go)
//	conquest --version
//
// Every error names the path and the problem; no Go stack trace reaches a
// user (run recovers at the top).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"conquest/bench"
)

func main() {
	if os.Getenv("PATH") == "" {
		// mount(8) runs its helpers without PATH (util-linux drops it from
		// their environment), and the daemon must still find fusermount3.
		os.Setenv("PATH", defaultPath)
	}
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// defaultPath is the search path when the environment has none: the one a
// shell uses then.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// run runs the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(stderr, "conquest: internal error: %v\n", v)
			code = 70 // EX_SOFTWARE
		}
	}()
	app := newApp(stdout, stderr)
	isCommand := func(name string) bool { return app.Command(name) != nil }
	if (len(args) >= 3 && helperName(args[0])) || isHelperCall(args, isCommand) {
		// mount(8) through mount.fuse3, or under a helper's name (helper.go).
		if isRemount(args) {
			if err := helperRemount(args); err != nil {
				fmt.Fprintf(stderr, "conquest: %v\n", err)
				return 1
			}
			return 0
		}
		margs, err := helperArgs(args)
		if err != nil {
			fmt.Fprintf(stderr, "conquest: %v\n", err)
			return 1
		}
		args = margs
	}
	err := app.Run(args)
	if err == nil {
		return 0
	}
	if msg := err.Error(); msg != "" {
		// The core's errors name their package, which is also the command.
		fmt.Fprintf(stderr, "conquest: %s\n", strings.TrimPrefix(msg, "conquest: "))
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:  "conquest",
		Usage: "a file system with all metadata and small files in persistent RAM",
		Description: "Conquest keeps every inode, directory and small file in a memory-mapped arena (persistent\n" +
			"RAM, or a file standing in for it) and only large-file data on disk. See README.md.",
		Version:         versionText(),
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		// Errors are printed once, by run; never os.Exit from inside.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{
			mkfsCommand(),
			mountCommand(),
			umountCommand(),
			fsckCommand(),
			dfCommand(),
			statCommand(),
			watchdogCommand(),
			{
				Name:        "bench",
				Usage:       "run the PostMark and Sprite LFS benchmarks on directories",
				Subcommands: bench.Commands(),
			},
		},
	}
}
