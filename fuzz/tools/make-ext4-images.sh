#!/usr/bin/env bash
# Rebuilds the base images of the ext4 fuzz target
# (crates/spacekit-testkit/src/checks/ext4_images/*.sparse)
# with mkfs.ext4 -d. They are stored sparse (only the non-zero 1 KiB chunks) by
# tools/sparse.py; the checks expand them in memory. Rerun only to change
# the images: every corpus and regression file of the ext4 target edits
# these exact bytes, so a new image invalidates them. (`inline` was added
# later, made by its `mk` line alone: ONLY=inline.)
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
cd "$(dirname "$0")/.."
out=../crates/spacekit-testkit/src/checks/ext4_images
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
mkdir -p "$root/d/e"
head -c 3000 /dev/zero | tr '\0' 'a' > "$root/a"
: > "$root/b"
head -c 20000 /dev/zero | tr '\0' 'c' > "$root/d/c"
for i in $(seq 1 12); do echo "$i" > "$root/d/e/file-with-a-longer-name-$i"; done
export E2FSPROGS_FAKE_TIME=1700000000 MKE2FS_DEVICE_SECTSIZE=512
mk() { # name size args...
  local name=$1 size=$2; shift 2
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ]; then return; fi
  rm -f "$tmp/$name.img"
  truncate -s "$size" "$tmp/$name.img"
  mkfs.ext4 -q -F -U 5d8c6c1e-2b3a-4f5e-8c1d-0123456789ab -E hash_seed=11111111-2222-3333-4444-555555555555,root_owner=0:0 \
    -d "$root" "$@" "$tmp/$name.img"
  e2fsck -fn "$tmp/$name.img" >/dev/null
  python3 tools/sparse.py "$tmp/$name.img" "$out/$name.sparse"
}
mk csum 1M -b 1024 -g 512 -N 64 -I 256 -O ^has_journal
mk nocsum 1M -b 1024 -g 512 -N 64 -I 256 -O ^has_journal,^metadata_csum,^uninit_bg,^flex_bg,^resize_inode
mk gdtcsum 2M -b 2048 -g 512 -N 64 -I 128 -O ^has_journal,^metadata_csum,uninit_bg,64bit
# Directories and small files in their inodes (/d, /b, /d/e/...-7).
mk inline 1M -b 1024 -g 512 -N 64 -I 256 -O ^has_journal,inline_data
ls -l "$out"
