#!/bin/bash
# make-bench.sh — what `make bench` runs: mount Conquest on temporary images and compare it, side by side,
# with the kernel's tmpfs (the RAM limit) and ext4 on a loop file (a disk file system with the page cache),
# using `conquest bench`. Writes bench/results/<UTC date>-<host>/ (report.md, *.json, *.svg, *.md) and puts the
# tables and charts into bench/README.md between the "latest" markers.
#
# Needs root (mounts, a loop device, FUSE), e2fsprogs and Go. Everything it mounts or creates is under BASE and
# is removed on exit, also on failure or Ctrl-C.
#
# Knobs (environment):
#   RUNS=3                  interleaved rounds per benchmark
#   PM_PRESET=small         PostMark preset (10,000 files of 500 B-10 KB, 50,000 transactions)
#   PM_FSYNC_PRESET=quick   PostMark preset for the --fsync (mail server) variant; "" to skip it
#   SMALL_FILES=10000       Sprite LFS small-file count (1 KB each)
#   LARGE_RUNS="10:1m 10:1.01m 40:100m"  Sprite LFS large-file runs, COUNT:PRESET (the original evaluation's counts:
#                           ten 1 MB files, ten 1.01 MB files, forty 100 MB files; 8 KB requests)
#   LARGE_BIG_RUNS=1        rounds for the runs of 100 MB files (forty of them move 4 GB per phase)
#   LARGE_PRESETS=          more sprite-large presets at their own counts (e.g. "1m 1.01m 100m": 100, 100, 1 files)
#   DISK_SIZE=1G            the disk-path file: sequential write/read in 1 MiB requests (sprite-large)
#   COLD=1                  also run the disk-path file with the page cache dropped before every phase (0: skip)
#   FIO_RUNTIME=3           seconds of each 4 KiB random fio job on that file; 0 skips the fio section
#   TARGETS="conquest tmpfs ext4"  what to compare; the first is the reference for ratios
#   BASE=/tmp/conquest-bench       mount points and images
#   DISK_DIR=/var/tmp              where Conquest's disk image goes (should be on a disk, not in RAM)
#   CONQUEST_BIN=                  use this binary instead of building ./cmd/conquest
#   EXTRA_FLAGS=                   more flags for every `conquest bench` (e.g. --drop-caches)
#   NO_README=1                    do not update bench/README.md
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
RUNS=${RUNS:-3}
PM_PRESET=${PM_PRESET:-small}
PM_FSYNC_PRESET=${PM_FSYNC_PRESET-quick}
SMALL_FILES=${SMALL_FILES:-10000}
LARGE_RUNS=${LARGE_RUNS-10:1m 10:1.01m 40:100m}
LARGE_BIG_RUNS=${LARGE_BIG_RUNS:-1}
LARGE_PRESETS=${LARGE_PRESETS:-}
DISK_SIZE=${DISK_SIZE:-1G}
COLD=${COLD:-1}
FIO_RUNTIME=${FIO_RUNTIME:-3}
TARGETS=${TARGETS:-conquest tmpfs ext4}
BASE=${BASE:-/tmp/conquest-bench}
DISK_DIR=${DISK_DIR:-/var/tmp}
EXTRA_FLAGS=${EXTRA_FLAGS:-}

die() { echo "make-bench: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (mount, loop device, FUSE)"
command -v mkfs.ext4 >/dev/null || die "needs mkfs.ext4: apt-get install -y e2fsprogs"
command -v go >/dev/null || [ -n "${CONQUEST_BIN:-}" ] || die "needs go"
[ "$FIO_RUNTIME" = 0 ] || command -v fio >/dev/null || die "needs fio: apt-get install -y fio (or FIO_RUNTIME=0)"

STAMP=$(date -u +%Y-%m-%dT%H%M%SZ)
HOST=$(hostname -s 2>/dev/null || hostname)
NAME="$STAMP-$HOST"
OUT="$ROOT/bench/results/$NAME"
PRAM_IMG="$BASE/pram/conquest.pram"
DISK_IMG="$DISK_DIR/conquest-bench.$$.disk"
MOUNTED=() # mount points to take down, in order

cleanup() {
  local rc=$? m
  set +e
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    m=${MOUNTED[i]}
    mountpoint -q "$m" || continue
    if [ "$m" = "$BASE/conquest" ]; then
      "${BIN:-false}" umount "$m" 2>/dev/null || fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null || umount -l "$m"
    else
      umount "$m" 2>/dev/null || umount -l "$m"
    fi
  done
  rm -f "$BASE/ext4.img" "$PRAM_IMG" "$DISK_IMG"
  rmdir "$BASE/conquest" "$BASE/tmpfs" "$BASE/ext4" "$BASE/pram" 2>/dev/null
  rm -f "$BASE/conquest.bin"
  rmdir "$BASE" 2>/dev/null
  [ $rc = 0 ] || echo "make-bench: failed (exit $rc); partial results, if any, are in $OUT" >&2
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

T0=$(date +%s)
mkdir -p "$BASE"
if [ -n "${CONQUEST_BIN:-}" ]; then
  BIN=$CONQUEST_BIN
else
  BIN="$BASE/conquest.bin"
  echo "== building ./cmd/conquest" >&2
  go build -o "$BIN" ./cmd/conquest
fi

# mount_peer NAME: the logic of shared/bench/peers.sh, one target at a time.
mount_peer() {
  case $1 in
  tmpfs)
    mkdir -p "$BASE/tmpfs"
    mount -t tmpfs -o size=6g tmpfs "$BASE/tmpfs"; MOUNTED+=("$BASE/tmpfs") ;;
  ext4)
    mkdir -p "$BASE/ext4"
    # Sparse; 6 GiB because the forty 100 MB files (4 GB) exist at once.
    truncate -s 6G "$BASE/ext4.img" && mkfs.ext4 -q -F "$BASE/ext4.img"
    mount -o loop "$BASE/ext4.img" "$BASE/ext4"; MOUNTED+=("$BASE/ext4") ;;
  conquest)
    # Persistent RAM is stood in for by a tmpfs; the disk image lives on a disk.
    mkdir -p "$BASE/pram" "$BASE/conquest" "$DISK_DIR"
    mount -t tmpfs -o size=3g tmpfs "$BASE/pram"; MOUNTED+=("$BASE/pram")
    "$BIN" mkfs --pram "$PRAM_IMG" --disk "$DISK_IMG" --pram-size 2G --disk-size 8G
    MOUNTED+=("$BASE/conquest")
    "$BIN" mount --pram "$PRAM_IMG" --disk "$DISK_IMG" "$BASE/conquest"
    for _ in $(seq 50); do mountpoint -q "$BASE/conquest" && break; sleep 0.1; done
    mountpoint -q "$BASE/conquest" || die "conquest did not mount on $BASE/conquest" ;;
  *) die "unknown target $1 (have conquest, tmpfs, ext4)" ;;
  esac
}

DIRS=()
for t in $TARGETS; do
  echo "== mounting $t" >&2
  mount_peer "$t"
  DIRS+=(--dir "$t=$BASE/$t")
done
grep " $BASE/" /proc/mounts >&2 || true
mkdir -p "$OUT"

bench() { # NAME SUBCOMMAND FLAGS... (RUNS from the environment)
  local name=$1; shift
  echo "== conquest bench $* ($name)" >&2
  # shellcheck disable=SC2086
  "$BIN" bench "$@" --runs "$RUNS" --out "$OUT" --name "$name" "${DIRS[@]}" $EXTRA_FLAGS >/dev/null
  REPORTS+=("$name")
}

# fio_disk_path NAME: 4 KiB random writes and reads on one DISK_SIZE file per target, FIO_RUNTIME seconds each
# (time-bounded: at 4 KiB a request, covering a whole 1 GiB file through FUSE would take minutes), buffered
# psync I/O as a program would do it; the file is laid out by a first 1 MiB sequential write (not reported).
# Interleaved like `conquest bench`: round 1 does every target, then round 2, ... Writes NAME.md and NAME.tsv.
fio_disk_path() {
  local name=$1 raw="$OUT/$1.tsv" r t d
  echo "== fio: 4 KiB random write and read on a $DISK_SIZE file, ${FIO_RUNTIME}s each ($name)" >&2
  : > "$raw"
  for r in $(seq "$RUNS"); do
    for t in $TARGETS; do
      d="$BASE/$t/fio.$$"
      mkdir -p "$d"
      sync
      fio --name=layout --directory="$d" --filename=f --ioengine=psync --rw=write --bs=1M --size="$DISK_SIZE" \
        --end_fsync=1 --output-format=terse --terse-version=3 >/dev/null
      sync
      # terse v3: field 8 is read IOPS, 49 write IOPS.
      fio --name=randwrite --directory="$d" --filename=f --ioengine=psync --rw=randwrite --bs=4k --size="$DISK_SIZE" \
        --runtime="$FIO_RUNTIME" --time_based --end_fsync=1 --output-format=terse --terse-version=3 |
        awk -F';' -v t="$t" '{ printf "%s\trandom write 4 KiB\t%s\n", t, $49 }' >> "$raw"
      sync
      fio --name=randread --directory="$d" --filename=f --ioengine=psync --rw=randread --bs=4k --size="$DISK_SIZE" \
        --runtime="$FIO_RUNTIME" --time_based --output-format=terse --terse-version=3 |
        awk -F';' -v t="$t" '{ printf "%s\trandom read 4 KiB\t%s\n", t, $8 }' >> "$raw"
      rm -rf "$d"
      echo "   round $r $t: $(grep -P "^$t\t" "$raw" | tail -2 | cut -f2- | tr '\t\n' '= ' )" >&2
    done
  done
  # The table, in the format of `conquest bench`: median (ratio to the first target) [min–max].
  {
    echo "### $name"
    echo
    echo "fio $(fio --version | sed 's/^fio-//'): one $DISK_SIZE file per target, laid out by a sequential write; then 4 KiB random writes (then fsync) and 4 KiB random reads, ${FIO_RUNTIME} s each, \`--ioengine=psync\`, buffered."
    echo
    echo "Median of $RUNS run(s), interleaved; [min–max]; (ratio to ${TARGETS%% *})."
    echo
    awk -F'\t' -v targets="$TARGETS" '
      function fmt(x,  s, r) { if (x < 100) return sprintf("%.3g", x)
        s = sprintf("%d", x + 0.5); r = ""
        while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
        return s r }
      function med(k,  c, i, j, t, a) { c = n[k]
        for (i = 1; i <= c; i++) a[i] = v[k, i]
        for (i = 2; i <= c; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
        lo[k] = a[1]; hi[k] = a[c]
        return c % 2 ? a[(c+1)/2] : (a[c/2] + a[c/2+1]) / 2 }
      { if (!($2 in seen)) { seen[$2]; M[++nm] = $2 } k = $1 SUBSEP $2; v[k, ++n[k]] = $3 }
      END {
        nt = split(targets, T, " ")
        printf "| '"$name"' | unit |"; for (i = 1; i <= nt; i++) printf " %s |", T[i]; print ""
        printf "|---|---|"; for (i = 1; i <= nt; i++) printf "---:|"; print ""
        for (m = 1; m <= nm; m++) {
          ref = med(T[1] SUBSEP M[m]); printf "| %s ↑ | IOPS |", M[m]
          for (i = 1; i <= nt; i++) { k = T[i] SUBSEP M[m]; x = med(k); printf " %s", fmt(x)
            if (i > 1 && ref > 0) printf " (%.2fx)", x / ref
            printf " [%s–%s] |", fmt(lo[k]), fmt(hi[k]) }
          print "" } }' "$raw"
  } > "$OUT/$name.md"
  REPORTS+=("$name")
}

REPORTS=()
bench postmark postmark --preset "$PM_PRESET"
[ -z "$PM_FSYNC_PRESET" ] || bench postmark-fsync postmark --preset "$PM_FSYNC_PRESET" --fsync
bench sprite-small sprite-small --files "$SMALL_FILES" --size 1K
# The disk path (files above Conquest's 1 MiB threshold): one DISK_SIZE file, 1 MiB requests (sequential write
# and read, then every 1 MiB block rewritten and read in random order), then 4 KiB random I/O with fio.
bench "disk-path-$DISK_SIZE" sprite-large --files 1 --size "$DISK_SIZE" --request 1M
# The same from the disk itself: the page cache is dropped before every phase, so reads come from each file
# system's disk (Conquest's disk image, ext4's loop file), not from memory.
[ "$COLD" = 0 ] || bench "disk-path-$DISK_SIZE-cold" sprite-large --files 1 --size "$DISK_SIZE" --request 1M --drop-caches
[ "$FIO_RUNTIME" = 0 ] || fio_disk_path "disk-path-$DISK_SIZE-4k"
# Sprite LFS large-file runs with the original evaluation's file counts (8 KB requests).
for cp in $LARGE_RUNS; do
  c=${cp%%:*} p=${cp#*:}
  if [ "$p" = 100m ]; then
    RUNS=$LARGE_BIG_RUNS bench "sprite-large-${c}x$p" sprite-large --preset "$p" --files "$c"
  else
    bench "sprite-large-${c}x$p" sprite-large --preset "$p" --files "$c"
  fi
done
for p in $LARGE_PRESETS; do
  bench "sprite-large-$p" sprite-large --preset "$p"
done
T1=$(date +%s)

# report.md: the machine, then every table and chart.
{
  echo "# conquest bench: $(echo $TARGETS | sed 's/ /, /g')"
  echo
  echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on \`$HOST\` in $((T1 - T0)) s by \`make bench\` (bench/scripts/make-bench.sh)."
  echo "Commit: \`$(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with local changes)')\`."
  echo
  echo "| machine | |"
  echo "|---|---|"
  echo "| CPU | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') |"
  echo "| CPUs (nproc) | $(nproc) |"
  echo "| caches | $(lscpu 2>/dev/null | grep -E '^L[123]' | sed 's/  */ /g' | paste -sd ';' - | sed 's/;/; /g') |"
  echo "| memory | $(free -h | awk '/^Mem:/ { print $2 " total, " $7 " available" }') |"
  echo "| kernel | $(uname -srmo) |"
  echo "| Go | $(go version 2>/dev/null | cut -d' ' -f3-) |"
  echo
  echo "Targets:"
  for t in $TARGETS; do case $t in
    conquest) echo "- conquest: \`conquest mount\`, its persistent-RAM image on a tmpfs (standing in for battery-backed RAM), its disk image in \`$DISK_DIR\`" ;;
    tmpfs) echo "- tmpfs: the kernel's tmpfs (the RAM limit)" ;;
    ext4) echo "- ext4: ext4 on a 6 GiB sparse loop file in \`$BASE\` (a disk file system with the kernel page cache)" ;;
  esac; done
  echo
  echo "Each cell: median of the interleaved runs (RUNS=$RUNS; $LARGE_BIG_RUNS for the 100 MB files), (ratio to the first column), [min–max]; ↑ higher is better."
  echo
  for r in "${REPORTS[@]}"; do
    sed "s/^### .*/## $r/" "$OUT/$r.md"
    echo
    if [ -f "$OUT/$r.svg" ]; then echo "![$r]($r.svg)"; echo; fi
  done
} > "$OUT/report.md"
echo "== wrote $OUT/report.md ($((T1 - T0)) s)" >&2

# bench/README.md: the same tables and charts between the markers.
README="$ROOT/bench/README.md"
if [ -z "${NO_README:-}" ] && grep -q '<!-- latest:begin -->' "$README"; then
  tmp=$(mktemp)
  {
    sed '/<!-- latest:begin -->/q' "$README"
    echo "Latest: [results/$NAME/report.md](results/$NAME/report.md)."
    echo
    sed -e '1,2d' -e "s#](\([a-z0-9.-]*\.svg\))#](results/$NAME/\1)#" -e 's/^## /### /' "$OUT/report.md"
    sed -n '/<!-- latest:end -->/,$p' "$README"
  } > "$tmp"
  cat "$tmp" > "$README" && rm -f "$tmp"
  echo "== updated $README" >&2
fi
