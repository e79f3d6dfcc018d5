#!/bin/bash
# make.sh CONQUEST — remake the images of TestImageFormat1 (format_test.go) with the binary CONQUEST,
# as root. The images in this directory were made by conquest built at 390ec00 (2026-12-01), the
# oldest commit whose images the current code must still open as they are: the arena is used as
# it lies on the device, so a change of its layout must keep reading these, or refuse them by
# version. Writes arena.img.gz, disk.img.gz and manifest.txt beside this script.
set -euo pipefail
CQ=$1
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
M=$W/mnt
# Never rm -r: a mount left by a failure would be emptied through it.
trap 'cd /; mountpoint -q "$M" && "$CQ" umount "$M"; rm -f "$W"/*.img; rmdir "$M" "$W"' EXIT
mkdir "$M"
"$CQ" mkfs --pram "$W/arena.img" --disk "$W/disk.img" --pram-size 8M --disk-size 16M \
  --large-threshold 64K --force >/dev/null
"$CQ" mount --pram "$W/arena.img" --disk "$W/disk.img" "$M"
for _ in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done
cd "$M"
# text(NAME, LINES): compressible content that still differs line by line
text() { for i in $(seq "$2"); do printf '%s line %d of %d\n' "$1" "$i" "$2"; done; }
mkdir -p dir/sub/deep empty
for n in 1 2 3 4 5 6 7 8 9 10; do text "small$n" $((n * 7)) > "dir/small$n"; done
text large 4000 > dir/large                     # about 100 KiB: on the disk
head -c 65536 <(text edge 4000) > dir/edge  # the threshold itself: in the arena
head -c 65537 <(text over 4000) > dir/over  # one byte past it: on the disk
truncate -s 5M dir/sparse
printf 'middle' | dd of=dir/sparse bs=1 seek=3000000 conv=notrunc status=none
printf 'end' | dd of=dir/sparse bs=1 seek=5242877 conv=notrunc status=none
: > dir/zero
ln dir/small1 dir/sub/hard1
ln -s small2 dir/link2
ln -s sub/deep dir/linkdeep
mkfifo dir/sub/fifo
mknod dir/sub/chr c 1 3
text x 3 > dir/sub/deep/x
chmod 4755 dir/small4; chmod 2750 dir/small5; chmod 1777 empty; chmod 0600 dir/small6
chown 1234:5678 dir/small7
setfattr -n user.color -v blue dir/small3
setfattr -n user.empty dir/small3
setfattr -n trusted.t -v 0x00ff10 dir/large
setfattr -n user.d -v onadir dir/sub
touch -h -d @1000000000.123456789 dir/small8 dir/link2 dir/sub/deep
touch -d @1700000000 dir
cd /
"$CQ" umount "$M"
# manifest: one line per entry, sorted: path type mode uid gid nlink size mtime(ns) content
#   content is md5 for files, the target for symlinks, "-" otherwise;
#   then "xattr path name hex-value" lines.
"$CQ" mount --pram "$W/arena.img" --disk "$W/disk.img" "$M"
for _ in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done
(cd "$M" && find . -mindepth 1 | LC_ALL=C sort | while read -r p; do
  read -r type mode uid gid nlink size mtime < <(stat -c '%F %a %u %g %h %s %.9Y' "$p" | sed 's/regular empty file/file/; s/regular file/file/; s/symbolic link/symlink/; s/character special file/chardev/; s/fifo/fifo/')
  case $type in
    file) content=$(md5sum < "$p" | cut -d' ' -f1) ;;
    symlink) content=$(readlink "$p") ;;
    *) content=- ;;
  esac
  mtime=${mtime/./}
  # directories' sizes are the file system's own: not compared
  [ "$type" = directory ] && size=-
  echo "$p $type $mode $uid $gid $nlink $size $mtime $content"
done
find . -mindepth 1 | LC_ALL=C sort | while read -r p; do
  getfattr -h -d -m - -e hex "$p" 2>/dev/null |
    awk -v p="$p" -F= '/^#/ || !NF { next } { print "xattr", p, $1, (NF > 1 ? $2 : "-") }' | LC_ALL=C sort
done
) > "$HERE/manifest.txt"
cd /
"$CQ" umount "$M"
gzip -9 -c "$W/arena.img" > "$HERE/arena.img.gz"
gzip -9 -c "$W/disk.img" > "$HERE/disk.img.gz"
ls -l "$HERE"
