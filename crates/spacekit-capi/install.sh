#!/bin/sh
# Installs spacekit's C library under PREFIX:
#   PREFIX/lib/libspacekit.so, PREFIX/lib/libspacekit.a,
#   PREFIX/include/spacekit.h, PREFIX/lib/pkgconfig/spacekit.pc
#
#   crates/spacekit-capi/install.sh [--from DIR] PREFIX
#
# Builds the release library first (cargo build --release -p spacekit-capi);
# --from DIR installs the libspacekit.{so,a} already built in DIR instead
# (the tests use it with target/debug). Then:
#   cc prog.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs spacekit)
# and, unless PREFIX/lib is on the loader's path, run with
# LD_LIBRARY_PATH=PREFIX/lib (or link PREFIX/lib/libspacekit.a statically,
# with the libraries `pkg-config --static --libs spacekit` adds).
set -eu
crate=$(cd "$(dirname "$0")" && pwd)

from=""
if [ "${1:-}" = "--from" ]; then
    [ $# -ge 2 ] || { echo "usage: $0 [--from DIR] PREFIX" >&2; exit 2; }
    from=$2
    shift 2
fi
[ $# -eq 1 ] || { echo "usage: $0 [--from DIR] PREFIX" >&2; exit 2; }
prefix=$1

if [ -z "$from" ]; then
    (cd "$crate" && cargo build --release -p spacekit-capi --lib)
    target=$(cd "$crate" && cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    from="$target/release"
fi
for f in libspacekit.so libspacekit.a; do
    [ -f "$from/$f" ] || { echo "$from/$f not found: build spacekit-capi first" >&2; exit 1; }
done

version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$crate/../../Cargo.toml" | head -n 1)
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
prefix=$(cd "$prefix" && pwd)
cp "$from/libspacekit.so" "$from/libspacekit.a" "$prefix/lib/"
cp "$crate/include/spacekit.h" "$prefix/include/"
cat >"$prefix/lib/pkgconfig/spacekit.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: spacekit
Description: Fast paths for memory and storage managers (C ABI)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lspacekit
Libs.private: -lpthread -ldl -lm -lrt -lutil -lgcc_s
PC
echo "installed spacekit $version under $prefix"
