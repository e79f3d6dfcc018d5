package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"conquest/bench"
	"conquest/pram"
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
	absShadowDir()
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
	app := &cli.App{
		Name:  "conquest",
		Usage: "a file system with all metadata and small files in persistent RAM",
		Description: "Conquest keeps every inode, directory and small file in a memory-mapped arena (persistent\n" +
			"RAM, or a file standing in for it) and only large-file data on disk. See README.md.",
		Version:   versionText(),
		Writer:    stdout,
		ErrWriter: stderr,
		// The help command is helpCommand, not urfave/cli's (see there);
		// with a command named help, cli adds no --help flag of its own.
		HideHelpCommand: true,
		Flags:           []cli.Flag{cli.HelpFlag},
		// A first argument that names no command (cli would look for a
		// "help topic" of that name).
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return unknownCommand(c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
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
				Subcommands: append(bench.Commands(), helpCommand("bench")),
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return unknownCommand("bench " + c.Args().First())
					}
					return cli.ShowSubcommandHelp(c)
				},
			},
			helpCommand(),
		},
	}
	app.OnUsageError = usageError
	setUsageErrors(app.Commands)
	return app
}

// setUsageErrors gives every command, down the tree, usageError: without
// it urfave/cli answers a flag it cannot parse with "Incorrect Usage" and
// the whole help on stdout, and the error in the flag package's words. A
// required flag that is missing is checked here too (before the command's
// own Before), for the same reason: cli prints the whole help for it.
func setUsageErrors(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = usageError
		var required []string
		for _, f := range c.Flags {
			switch f := f.(type) {
			case *cli.StringFlag:
				required, f.Required = appendIf(required, f.Required, f.Name), false
			case *cli.IntFlag:
				required, f.Required = appendIf(required, f.Required, f.Name), false
			case *cli.StringSliceFlag:
				required, f.Required = appendIf(required, f.Required, f.Name), false
			}
		}
		if len(required) > 0 {
			before := c.Before
			c.Before = func(ctx *cli.Context) error {
				for _, name := range required {
					if !ctx.IsSet(name) {
						return usageErr(ctx, dashed(name)+" is required")
					}
				}
				if before != nil {
					return before(ctx)
				}
				return nil
			}
		}
		setUsageErrors(c.Subcommands)
	}
}

// appendIf appends name to names if cond.
func appendIf(names []string, cond bool, name string) []string {
	if cond {
		return append(names, name)
	}
	return names
}

// usageError is the one-line error for a command line the flag package
// refused: an unknown flag, or a value it cannot parse.
func usageError(c *cli.Context, err error, _ bool) error {
	return usageErr(c, flagMessage(c, err.Error()))
}

// usageErr is the error for msg, a usage error of c's command, naming the
// command and its help; fsck's exits 8 as its other usage errors do.
func usageErr(c *cli.Context, msg string) error {
	name, help := "conquest", "conquest --help"
	if c.Command != nil && c.Command.Name != "" {
		name, help = c.Command.HelpName, c.Command.HelpName+" --help"
	}
	msg = fmt.Sprintf("%s: %s (see `%s`)", strings.TrimPrefix(name, "conquest "), msg, help)
	if name == "conquest fsck" {
		return cli.Exit(msg, fsckOperational)
	}
	return errors.New(msg)
}

// flagMessage rewords an error of the flag package: flags as they are
// written (--name, -n), and the reason kept unless it says nothing.
func flagMessage(c *cli.Context, msg string) string {
	if f, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag " + dashed(f)
	}
	if f, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return dashed(f) + " needs a value"
	}
	// "invalid value %q for flag -%s: %v", "invalid boolean value %q for -%s: %v"
	for _, sep := range []string{" for flag -", " for -"} {
		i := strings.Index(msg, sep)
		if i < 0 {
			continue
		}
		flag, reason, _ := strings.Cut(msg[i+len(sep):], ": ")
		out := msg[:i] + " for " + dashed(flag)
		if reason != "" && reason != "parse error" {
			out += ": " + reason
		}
		if c.Command != nil {
			for _, f := range c.Command.Flags {
				if _, ok := f.(*cli.DurationFlag); ok && slices.Contains(f.Names(), flag) {
					out += " (a duration: 90s, 2m)"
				}
			}
		}
		return out
	}
	return msg
}

// dashed is a flag's name as it is written: -f, --force.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// helpCommand is `conquest [PARENT...] help [COMMAND...]`: it shows what
// `conquest PARENT... COMMAND... --help` shows. urfave/cli's own help
// command answers a name it does not know with "No help topic for ..."
// (exit 3), and so did `conquest help` itself while it was hidden.
func helpCommand(parent ...string) *cli.Command {
	return &cli.Command{
		Name:      "help",
		Usage:     "show the commands, or a command's help (as COMMAND --help)",
		UsageText: strings.Join(append([]string{"conquest"}, parent...), " ") + " help [COMMAND...]",
		Action: func(c *cli.Context) error {
			names := append(append([]string{}, parent...), c.Args().Slice()...)
			// Only names of commands: --help after anything else would be
			// an argument of the command, which would then run.
			cmds := c.App.Commands
			for i, name := range names {
				if strings.HasPrefix(name, "-") {
					return fmt.Errorf("help takes command names only (got %q)", name)
				}
				var cmd *cli.Command
				for _, sub := range cmds {
					if sub.HasName(name) {
						cmd = sub
					}
				}
				if cmd == nil {
					return unknownCommand(strings.Join(names[:i+1], " "))
				}
				cmds = cmd.Subcommands
			}
			return c.App.Run(append(append([]string{c.App.Name}, names...), "--help"))
		},
	}
}

// unknownCommand is the error for a command name (with its parents) that
// names no command.
func unknownCommand(name string) error {
	see := "conquest --help"
	if parent, _, ok := strings.Cut(name, " "); ok {
		see = "conquest " + parent + " --help"
	}
	return fmt.Errorf("unknown command %q (see %s)", name, see)
}

// absShadowDir makes a relative $CONQUEST_SHADOW_DIR absolute, against the
// directory the command runs in: the daemon it starts runs in /, so a
// relative one named one directory for the daemon and another for an fsck
// run beside it, which then recovered from the image's last checkpoint,
// without the changes in the daemon's RAM copy.
func absShadowDir() {
	// The developers' CPU profile ($CONQUEST_CPUPROFILE) likewise.
	for _, env := range []string{pram.ShadowDirEnv, "CONQUEST_CPUPROFILE"} {
		if d := os.Getenv(env); d != "" && !filepath.IsAbs(d) {
			if abs, err := filepath.Abs(d); err == nil {
				os.Setenv(env, abs)
			}
		}
	}
}
