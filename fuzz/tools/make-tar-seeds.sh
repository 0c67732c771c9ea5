#!/usr/bin/env bash
# Makes the seed corpus of the `populate_tar` target (fuzz/corpus/populate_tar/):
# small archives from GNU tar in GNU and PAX format (long names, hard and
# symbolic links, a FIFO, a device, a sparse file, xattrs, an ACL,
# nanosecond times), gzip and zstd compressed, one with a damaged header,
# one cut short and one with a `..` name. Needs GNU tar, gzip, zstd,
# setfattr and setfacl; run as root for the device node.
set -euo pipefail
out="$(cd "$(dirname "$0")/.." && pwd)/corpus/populate_tar"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src="$tmp/src"
mkdir -p "$src/dir/sub"
printf 'hello\n' >"$src/dir/file"
ln "$src/dir/file" "$src/dir/hard"
ln -s file "$src/dir/link"
mkfifo "$src/fifo"
mknod "$src/null" c 1 3 2>/dev/null || true
long="$src/dir/sub/$(printf 'n%.0s' $(seq 1 120))"
printf 'long\n' >"$long"
# 12 KiB with data only in its middle 4 KiB: a sparse file.
truncate -s 12288 "$src/sparse"
printf 'data' | dd of="$src/sparse" bs=4096 seek=1 conv=notrunc status=none
chmod 4755 "$src/dir/file"
setfattr -n user.seed -v value "$src/dir/file" 2>/dev/null || true
setfacl -m u:1234:r "$src/dir/file" 2>/dev/null || true
find "$src" -exec touch -h -d '2023-11-14 22:13:20.123456789 UTC' {} +
common=(--blocking-factor=1 --sort=name --owner=1000 --group=1000 --numeric-owner --sparse -C "$src" .)
tar --format=gnu -cf "$out/gnu.tar" "${common[@]}"
tar --format=pax --xattrs --acls -cf "$out/pax.tar" "${common[@]}"
gzip -9 -n -c "$out/gnu.tar" >"$out/gnu.tar.gz"
zstd -q -19 -c "$out/pax.tar" >"$out/pax.tar.zst"
# A damaged header: one byte of the second header's size field changed.
python3 - "$out/pax.tar" "$out/damaged.tar" <<'PY'
import sys
d = bytearray(open(sys.argv[1], 'rb').read())
d[512 + 124 + 5] ^= 0x07
open(sys.argv[2], 'wb').write(d)
PY
# Cut inside the contents of a file.
head -c 2600 "$out/gnu.tar" >"$out/truncated.tar"
# A `..` name (GNU tar strips them, so Python's tarfile writes it).
python3 - "$out/dotdot.tar" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], 'w', format=tarfile.USTAR_FORMAT) as t:
    i = tarfile.TarInfo('a/../../escape')
    i.size = 3
    t.addfile(i, io.BytesIO(b'bad'))
PY
ls -l "$out"
