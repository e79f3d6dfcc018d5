package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// Commands returns the benchmark subcommands, for cmd/conquest to mount under
// "bench":
//
//	conquest bench postmark     [flags] --dir A [--dir B ...]
//	conquest bench sprite-small [flags] --dir A [--dir B ...]
//	conquest bench sprite-large [flags] --dir A [--dir B ...]
//
// Each runs its benchmark on every directory in turn, interleaved, --runs
// times; shows progress on stderr; prints a Markdown table of medians with
// min/max and the ratio to the first directory on stdout; and writes
// NAME.json, NAME.svg and NAME.md to --out (NAME: --name, or the
// benchmark's name).
func Commands() []*cli.Command {
	return []*cli.Command{postmarkCommand(), spriteSmallCommand(), spriteLargeCommand()}
}

func commonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "dir", Aliases: []string{"d"}, Required: true,
			Usage: "directory to benchmark, as DIR or LABEL=DIR; repeat to compare (the first is the reference for ratios)"},
		&cli.IntFlag{Name: "runs", Aliases: []string{"n"}, Value: 3, Usage: "rounds; each runs every directory once, in order"},
		&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Value: "bench-out", Usage: "directory for NAME.json, NAME.svg and NAME.md (\"\" to write none)"},
		&cli.StringFlag{Name: "name", Usage: "base name of the files in --out (default: the benchmark's name)"},
		&cli.StringFlag{Name: "evict", Value: "auto",
			Usage: "before each phase, write a buffer of this size (K/M/G) to evict CPU caches; auto: twice the largest CPU cache; 0: off"},
		&cli.BoolFlag{Name: "drop-caches", Usage: "before each phase, drop the kernel page cache (/proc/sys/vm/drop_caches; needs root)"},
		&cli.BoolFlag{Name: "sync", Value: true, Usage: "before each phase, sync(2) so earlier dirty data is not written during the timing"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress on stderr"},
	}
}

func postmarkCommand() *cli.Command {
	var presets []string
	for _, p := range PostMarkPresets() {
		presets = append(presets, fmt.Sprintf("%s (%s)", p.Name, p.Description))
	}
	return &cli.Command{
		Name:  "postmark",
		Usage: "PostMark 1.5: a pool of small files, then transactions (create or delete + read or append), then deletion",
		Description: "Follows PostMark 1.5's algorithm and random stream (Mersenne Twister); every read is verified.\n" +
			"Flags override the preset. Presets: " + strings.Join(presets, "; ") + ".",
		Flags: append(commonFlags(),
			&cli.StringFlag{Name: "preset", Value: "default", Usage: "starting configuration: " + strings.Join(PostMarkPresetNames(), ", ")},
			&cli.IntFlag{Name: "files", Aliases: []string{"number"}, DefaultText: "from --preset", Usage: "files in the initial pool (set number)"},
			&cli.IntFlag{Name: "transactions", DefaultText: "from --preset", Usage: "transactions (set transactions)"},
			&cli.StringFlag{Name: "size-low", Usage: "smallest file size, K/M/G (set size LOW)"},
			&cli.StringFlag{Name: "size-high", Usage: "largest file size, K/M/G (set size HIGH)"},
			&cli.IntFlag{Name: "subdirs", DefaultText: "from --preset", Usage: "subdirectories to spread files over, when > 1 (set subdirectories)"},
			&cli.StringFlag{Name: "read-block", Usage: "read block size (set read)"},
			&cli.StringFlag{Name: "write-block", Usage: "write block size (set write)"},
			&cli.IntFlag{Name: "bias-read", DefaultText: "from --preset", Usage: "reads in 10 read-or-append choices, -1 for none (set bias read)"},
			&cli.IntFlag{Name: "bias-create", DefaultText: "from --preset", Usage: "creates in 10 create-or-delete choices, -1 for none (set bias create)"},
			&cli.BoolFlag{Name: "buffered", Value: true, Usage: "stdio-style buffered I/O (set buffering); --buffered=false for a system call per block"},
			&cli.UintFlag{Name: "seed", DefaultText: "from --preset", Usage: "random seed (set seed; PostMark's default is 42)"},
			&cli.BoolFlag{Name: "fsync", Usage: "fsync each file after creating or appending to it, as a mail server does"},
		),
		Action: func(c *cli.Context) error {
			cfg, err := findPreset(PostMarkPresets(), c.String("preset"))
			if err != nil {
				return err
			}
			ints := map[string]*int{"files": &cfg.Files, "transactions": &cfg.Transactions, "subdirs": &cfg.Subdirs,
				"bias-read": &cfg.BiasRead, "bias-create": &cfg.BiasCreate}
			for name, p := range ints {
				if c.IsSet(name) {
					*p = c.Int(name)
				}
			}
			sizes := map[string]*int64{"size-low": &cfg.SizeLow, "size-high": &cfg.SizeHigh}
			for name, p := range sizes {
				if err := setSize(c, name, p); err != nil {
					return err
				}
			}
			var rb, wb int64 = int64(cfg.ReadBlock), int64(cfg.WriteBlock)
			if err := setSize(c, "read-block", &rb); err != nil {
				return err
			}
			if err := setSize(c, "write-block", &wb); err != nil {
				return err
			}
			cfg.ReadBlock, cfg.WriteBlock = int(rb), int(wb)
			if c.IsSet("buffered") {
				cfg.Buffered = c.Bool("buffered")
			}
			if c.IsSet("seed") {
				cfg.Seed = uint32(c.Uint("seed"))
			}
			if c.IsSet("fsync") {
				cfg.Fsync = c.Bool("fsync")
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return runCommand(c, cfg)
		},
	}
}

func spriteSmallCommand() *cli.Command {
	return &cli.Command{
		Name:  "sprite-small",
		Usage: "Sprite LFS small-file benchmark: create, read and delete N files of S bytes; files/s per phase",
		Flags: append(commonFlags(),
			&cli.IntFlag{Name: "files", Value: 10000, Usage: "number of files"},
			&cli.StringFlag{Name: "size", Value: "1K", Usage: "bytes per file, K/M/G"},
			&cli.BoolFlag{Name: "fsync", Usage: "fsync each file before closing it"},
		),
		Action: func(c *cli.Context) error {
			cfg := DefaultSpriteSmall()
			cfg.Files, cfg.Fsync = c.Int("files"), c.Bool("fsync")
			var err error
			if cfg.Size, err = ParseSize(c.String("size")); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return runCommand(c, cfg)
		},
	}
}

func spriteLargeCommand() *cli.Command {
	var presets []string
	for _, p := range SpriteLargePresets() {
		presets = append(presets, fmt.Sprintf("%s (%s)", p.Name, p.Description))
	}
	return &cli.Command{
		Name:        "sprite-large",
		Usage:       "Sprite LFS large-file benchmark: sequential write, sequential read, random write, random read, sequential re-read; MiB/s",
		Description: "Flags override the preset. Presets: " + strings.Join(presets, "; ") + ".",
		Flags: append(commonFlags(),
			&cli.StringFlag{Name: "preset", Value: "100m", Usage: "starting configuration: 100m, 1m, 1.01m"},
			&cli.IntFlag{Name: "files", DefaultText: "from --preset", Usage: "number of files, each put through every phase"},
			&cli.StringFlag{Name: "size", Usage: "bytes per file, K/M/G (fractions allowed: 1.01M)"},
			&cli.StringFlag{Name: "request", Usage: "bytes per read or write request (default 8K)"},
			&cli.BoolFlag{Name: "fsync", Value: true, Usage: "fsync each file after writing it (timed); --fsync=false to skip"},
			&cli.Uint64Flag{Name: "seed", DefaultText: "from --preset", Usage: "seed of the random block order"},
		),
		Action: func(c *cli.Context) error {
			cfg, err := findPreset(SpriteLargePresets(), c.String("preset"))
			if err != nil {
				return err
			}
			if c.IsSet("files") {
				cfg.Files = c.Int("files")
			}
			if err := setSize(c, "size", &cfg.Size); err != nil {
				return err
			}
			req := int64(cfg.Request)
			if err := setSize(c, "request", &req); err != nil {
				return err
			}
			cfg.Request = int(req)
			if c.IsSet("fsync") {
				cfg.Fsync = c.Bool("fsync")
			}
			if c.IsSet("seed") {
				cfg.Seed = c.Uint64("seed")
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return runCommand(c, cfg)
		},
	}
}

// setSize parses flag name into *p if it was given.
func setSize(c *cli.Context, name string, p *int64) error {
	if !c.IsSet(name) {
		return nil
	}
	v, err := ParseSize(c.String(name))
	if err != nil {
		return fmt.Errorf("--%s: %w", name, err)
	}
	*p = v
	return nil
}

// runCommand runs b with the common flags and prints and writes the report.
func runCommand(c *cli.Context, b Benchmark) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (directories go in --dir)", c.Args().Slice())
	}
	opt := Options{Runs: c.Int("runs"), PhaseStart: PhaseStart{Sync: c.Bool("sync"), DropCaches: c.Bool("drop-caches")}}
	for _, d := range c.StringSlice("dir") {
		opt.Targets = append(opt.Targets, ParseTarget(d))
	}
	switch ev := c.String("evict"); ev {
	case "auto":
		opt.PhaseStart.EvictBytes = DefaultEvictBytes()
	default:
		n, err := ParseSize(ev)
		if err != nil {
			return fmt.Errorf("--evict: %w", err)
		}
		opt.PhaseStart.EvictBytes = n
	}
	errw := c.App.ErrWriter
	if errw == nil {
		errw = io.Discard
	}
	if !c.Bool("quiet") {
		opt.Progress = errw
		cfg, _ := json.Marshal(b)
		fmt.Fprintf(errw, "%s %s, %d run(s), each phase after: %s\n", b.Name(), cfg, opt.Runs, opt.PhaseStart.describe())
	}
	rep, err := Run(c.Context, b, opt)
	if err != nil {
		return err
	}
	rep.Name = c.String("name")
	out := c.App.Writer
	if out == nil {
		out = io.Discard
	}
	fmt.Fprint(out, rep.Table())
	if dir := c.String("out"); dir != "" {
		paths, err := rep.WriteFiles(dir)
		if err != nil {
			return err
		}
		if !c.Bool("quiet") {
			fmt.Fprintf(errw, "wrote %s\n", strings.Join(paths, ", "))
		}
	}
	return nil
}
