// Package bench owns the benchmarks by which Conquest is judged, as the
// original Conquest was: PostMark and the Sprite LFS small-file and
// large-file microbenchmarks, run against any directory, several directories
// side by side, with tables, JSON and a hand-written SVG chart.
//
// What bench owns:
//   - the workloads: PostMarkConfig (the PostMark 1.5 algorithm, with its
//     Mersenne Twister stream reproduced bit for bit), SpriteSmallConfig and
//     SpriteLargeConfig. Each is a Benchmark: it runs once in a fresh working
//     directory given by an Env and returns its metrics;
//   - verification: every byte a benchmark reads back is compared with the
//     byte it wrote, which is a function of the file's key and the offset
//     (content.go). A file system that loses, shifts, truncates or mixes up
//     data makes the benchmark fail with ErrCorrupt instead of reporting a
//     fast time;
//   - the state each phase starts from (cache.go): sync, optionally dropping
//     the kernel page cache, and evicting the CPU caches by touching a buffer
//     larger than the last-level cache;
//   - the runner (runner.go): directories interleaved (A B C A B C ...) N
//     times, progress on stderr, medians with min/max and the ratio to the
//     first directory (report.go, svg.go);
//   - the command-line subcommands (Commands), mounted by cmd/conquest as
//     `conquest bench postmark|sprite-small|sprite-large`;
//   - scripts/make-bench.sh, behind `make bench`, which compares Conquest with
//     tmpfs and ext4 and files the results under results/.
//
// All file operations go through the small FS interface (fs.go), so a test
// can put a corrupting file system underneath and check that the benchmark
// notices.
//
// What bench must never do: import the file system it measures (it sees only
// a directory), leave files behind in the directories it measures (each run
// works in its own subdirectory and removes it), or report a figure for a
// run whose data did not verify.
package bench
