#!/usr/bin/env python3
"""Seeds of the `snapshot` fuzz target (fuzz/corpus/snapshot/), written from
the format in crates/spacekit/src/snapshot/mod.rs without the library:

* `0` then a diff file against an all-zero base of its memory size (the
  base the check builds), some with zero pages in their data, one with a
  damaged data byte, one of another base;
* `0` then full snapshots with a trailer, and a plain memory image;
* `1` then bytes that drive the damaged-chain check.

Each seed is named by its SHA-1, as the other corpora are.
"""
import hashlib
import os
import random
import struct
import sys

T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


MAGIC = b"SKSNAP\x1a\n"


def header(kind, ps, size, base_id, count, data_off, data_bytes, data_crc):
    h = MAGIC + struct.pack("<HHIQ", 1, kind, ps, size) + base_id
    h += struct.pack("<QQQII", count, data_off, data_bytes, data_crc, 0)
    return h + bytes(128 - len(h))


def seal(block):
    crc = crc32c(block[:124] + block[128:])
    return block[:124] + struct.pack("<I", crc) + block[128:]


def full_id(size, crc):
    return struct.pack("<QI", size, crc) + b"FULL"


def diff(ps, size, ranges, data, base_id=None):
    if base_id is None:
        base_id = full_id(size, crc32c(bytes(size)))
    off = -(-(128 + 16 * len(ranges)) // ps) * ps
    h = header(2, ps, size, base_id, len(ranges), off, len(data), crc32c(data))
    table = b"".join(struct.pack("<QQ", g, n) for g, n in ranges)
    block = (h + table).ljust(off, b"\0")
    return seal(block) + data


def full(ps, mem):
    h = header(1, ps, len(mem), bytes(16), 0, 0, len(mem), crc32c(mem))
    return mem + seal(h.ljust(4096, b"\0"))


def main(out):
    rng = random.Random(31)
    seeds = []
    for ps, size, ranges in [
        (512, 8192, [(0, 512), (2048, 1024)]),
        (4096, 65536, [(4096, 8192), (40960, 4096)]),
        (512, 4096, [(512 * i, 512) for i in range(0, 8, 2)]),
        (1024, 16384, []),
    ]:
        n = sum(r[1] for r in ranges)
        data = bytearray(rng.randbytes(n))
        if n >= 1024:
            data[:512] = bytes(512)  # a zero page inside a range
        seeds.append(b"\0" + diff(ps, size, ranges, bytes(data)))
    bad = bytearray(seeds[0])
    bad[-3] ^= 4
    seeds.append(bytes(bad))
    seeds.append(b"\0" + diff(512, 8192, [(0, 512)], bytes(512), full_id(8192, 7)))
    mem = bytearray(8192)
    mem[1000:1100] = rng.randbytes(100)
    seeds.append(b"\0" + full(512, bytes(mem)))
    seeds.append(b"\0" + full(4096, bytes(4096)))
    seeds.append(b"\0" + rng.randbytes(4096))  # a plain memory image
    seeds.append(b"\0" + MAGIC + b"\x02\0\x02\0")  # a cut header
    for _ in range(8):
        seeds.append(b"\1" + rng.randbytes(rng.randrange(8, 120)))
    os.makedirs(out, exist_ok=True)
    for s in seeds:
        with open(os.path.join(out, hashlib.sha1(s).hexdigest()), "wb") as f:
            f.write(s)
    print(f"{len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/snapshot")
