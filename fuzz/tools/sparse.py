#!/usr/bin/env python3
"""Writes an image as spacekit's fuzz sparse format: b"SKSP", the image
length (u32 LE), then each non-zero 1 KiB chunk as its index (u32 LE) and
its 1024 bytes. fuzz/checks/ext4.rs expands it."""
import struct, sys
data = open(sys.argv[1], "rb").read()
assert len(data) % 1024 == 0
out = bytearray(b"SKSP" + struct.pack("<I", len(data)))
for i in range(len(data) // 1024):
    chunk = data[i * 1024:(i + 1) * 1024]
    if any(chunk):
        out += struct.pack("<I", i) + chunk
open(sys.argv[2], "wb").write(out)
