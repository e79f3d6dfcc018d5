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
#   LARGE_PRESETS="1m 1.01m 100m"  Sprite LFS large-file presets
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
LARGE_PRESETS=${LARGE_PRESETS:-1m 1.01m 100m}
TARGETS=${TARGETS:-conquest tmpfs ext4}
BASE=${BASE:-/tmp/conquest-bench}
DISK_DIR=${DISK_DIR:-/var/tmp}
EXTRA_FLAGS=${EXTRA_FLAGS:-}

die() { echo "make-bench: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (mount, loop device, FUSE)"
command -v mkfs.ext4 >/dev/null || die "needs mkfs.ext4: apt-get install -y e2fsprogs"
command -v go >/dev/null || [ -n "${CONQUEST_BIN:-}" ] || die "needs go"

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
    mount -t tmpfs -o size=4g tmpfs "$BASE/tmpfs"; MOUNTED+=("$BASE/tmpfs") ;;
  ext4)
    mkdir -p "$BASE/ext4"
    truncate -s 2G "$BASE/ext4.img" && mkfs.ext4 -q -F "$BASE/ext4.img"
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

bench() { # NAME SUBCOMMAND FLAGS...
  local name=$1; shift
  echo "== conquest bench $* ($name)" >&2
  # shellcheck disable=SC2086
  "$BIN" bench "$@" --runs "$RUNS" --out "$OUT" --name "$name" "${DIRS[@]}" $EXTRA_FLAGS >/dev/null
  REPORTS+=("$name")
}
REPORTS=()
bench postmark postmark --preset "$PM_PRESET"
[ -z "$PM_FSYNC_PRESET" ] || bench postmark-fsync postmark --preset "$PM_FSYNC_PRESET" --fsync
bench sprite-small sprite-small --files "$SMALL_FILES" --size 1K
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
    ext4) echo "- ext4: ext4 on a 2 GiB sparse loop file in \`$BASE\` (a disk file system with the kernel page cache)" ;;
  esac; done
  echo
  echo "Each cell: median of $RUNS interleaved runs, (ratio to the first column), [min–max]; ↑ higher is better."
  echo
  for r in "${REPORTS[@]}"; do
    sed "s/^### .*/## $r/" "$OUT/$r.md"
    echo
    echo "![$r]($r.svg)"
    echo
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
