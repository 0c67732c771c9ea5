#!/usr/bin/env python3
"""Writes the starting seed corpora (fuzz/corpus/<target>/seed-*): a few
hand-shaped inputs per target, byte layouts as the checks decode them
(fuzz/checks/*.rs). Deterministic. The fuzzers' own finds are added with
`cargo fuzz cmin` afterwards."""
import os, random, struct

root = os.path.join(os.path.dirname(__file__), "..", "corpus")
rng = random.Random(18)

def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "seed-" + name), "wb").write(bytes(data))

def rnd(n):
    return bytes(rng.randrange(256) for _ in range(n))

# ext4: image, flags (bit 0: re-sign checksums), edit count, edits, then
# the read-only choices and the read-write operations.
for img in range(3):
    put("ext4", f"pristine-{img}", [img, 0, 0] + [0] * 15)
    ops = []
    # alloc, create /new, fallocate /new, truncate, unlink /a, flush.
    ops += [0, 1, 0x10, 0, 0, 0, 30, 20, 2]
    ops += [4, 8, 20]
    ops += [5, 8, 0, 0, 20, 0]
    ops += [6, 1, 3, 0]
    ops += [7, 1]
    ops += [8]
    put("ext4", f"ops-{img}", [img, 0, 0] + [0] * 15 + ops)
    put("ext4", f"edits-{img}", [img, 1, 4] + list(rnd(4 * 8)) + [0] * 15 + ops)

# migration_wire: 16 header bytes, memory size, fill, max-table flag, then
# a stream: Start, Memory (two ranges), PageHashes, Complete.
def req(cmd, length):
    return struct.pack("<H6xQ", cmd, length)
mem = 8192
table = struct.pack("<QQ", 0, 100) + struct.pack("<QQ", 4096, 50)
stream = req(1, 0) + req(4, len(table)) + table + rnd(150) + req(0x5348, 8) + struct.pack("<Q", 4096) + req(5, 0)
put("migration_wire", "session", req(4, 32) + struct.pack("<H", mem) + bytes([7, 0]) + stream)
put("migration_wire", "abandon", req(1, 0) + struct.pack("<H", mem) + bytes([0, 0]) + req(1, 0) + req(6, 0))
put("migration_wire", "outside", req(1, 0) + struct.pack("<H", 100) + bytes([0, 1, 64]) + req(1, 0) + req(4, 16) + struct.pack("<QQ", 90, 20))

# proc_maps: text.
maps = """55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 1311 /usr/bin/cat
55d0c0a02000-55d0c0a07000 r-xp 00002000 08:01 1311 /usr/bin/cat
55d0c1e3e000-55d0c1e5f000 rw-p 00000000 00:00 0 [heap]
7f1f2c000000-7f1f2c021000 rw-p 00000000 00:00 0
7ffd7a9d6000-7ffd7a9f7000 rw-p 00000000 00:00 0 [stack]
7ffd7a9fb000-7ffd7a9fd000 r-xp 00000000 00:00 0 [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
"""
put("proc_maps", "cat", maps.encode())
put("proc_maps", "overlap", b"1000-3000 r--p 0 0:0 0\n2000-4000 r--p 0 0:0 0 /x\n")
put("proc_maps", "deleted", b"400000-401000 r-xp 00000000 fd:00 42 /tmp/a file (deleted)\r\n\n")

for t, sizes in [("dirty", [64, 300, 2000]), ("rangetree", [64, 400, 1500]),
                 ("buddy", [40, 300, 1200]), ("freespace", [64, 400, 1200]),
                 ("bitmap", [64, 500, 1500]), ("crc32c", [16, 100, 3000])]:
    for n in sizes:
        put(t, f"random-{n}", rnd(n))
