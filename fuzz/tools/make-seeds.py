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

# ext4: /d/e (one block) fills with names of 255, 254, ... bytes until it
# becomes an htree and its leaves split; a mkdir, and renames out of it and
# back in.
for img in range(3):
    ops = []
    for n in range(254, 242, -1):
        ops += [4, 14, n, 0xFF]
    ops += [11, 14, 199]
    ops += [14, 14, 254, 15, 7]
    ops += [4, 14, 100, 0xFF]
    ops += [14, 15, 7, 14, 49]
    put("ext4", f"htree-{img}", [img, 0, 0] + [0] * 15 + ops)

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

# migration_session (appended last so the seeds above keep their bytes):
# sender offer (u16) and canned answer (16 bytes); memory size (u16), fill;
# receiver flags (extensions off, payload cap, table cap, refusing handler,
# drain limit); then ops, each a selector byte and its fields
# (fuzz/checks/session.rs).
def sk_answer(bits):
    return struct.pack("<H2sH2xQ", 1, b"SK", bits, 0)
def start_op(offer):
    return bytes([0, 1, 1 if offer else 0]) + (struct.pack("<H", 1) if offer else b"")
def payload_op(kind, data):
    return bytes([kind, len(data)]) + data
def memory_op(ranges, fill=7):
    b = bytes([3, len(ranges)])
    for gpa, ln in ranges:
        b += struct.pack("<HH", gpa, ln)
    return b + bytes([1, fill])
head = struct.pack("<H", 1) + sk_answer(1) + struct.pack("<H", 8192) + bytes([0xee])
happy = (start_op(True) + payload_op(1, b'{"cfg":1}') + memory_op([(0, 100), (4096, 599)])
         + bytes([9]) + struct.pack("<I", 4096) + payload_op(2, b"{}") + bytes([9]) + struct.pack("<I", 3000) + bytes([4]))
put("migration_session", "happy", head + bytes([0, 0, 0, 0, 0]) + happy)
put("migration_session", "plain-receiver", head + bytes([1, 0, 0, 0, 0]) + happy)
put("migration_session", "paused", head + bytes([0, 0, 0, 0, 0]) + start_op(False) + payload_op(1, b"c") + payload_op(2, b"s") + bytes([5]))
put("migration_session", "bad-version", head + bytes([0, 0, 0, 0, 0]) + bytes([0, 0]) + struct.pack("<H", 1) + bytes([0]) + payload_op(1, b"c"))
put("migration_session", "refused-config", head + bytes([0, 0, 0, 1, ord("{"), 0]) + start_op(True) + payload_op(1, b"{x}"))
put("migration_session", "payload-cap", head + bytes([0, 1]) + struct.pack("<H", 4) + bytes([0, 0, 0]) + start_op(False) + payload_op(1, b"12345"))
put("migration_session", "memoryfd-drained", head + bytes([0, 0, 0, 0, 1]) + struct.pack("<H", 100) + start_op(False) + bytes([7]) + struct.pack("<H", 250) + bytes([4]))
put("migration_session", "out-of-order", head + bytes([0, 0, 0, 0, 0]) + start_op(False) + memory_op([(0, 10)]) + bytes([4]))
put("migration_session", "unknown-and-pagefault", head + bytes([0, 0, 0, 0, 0]) + start_op(True) + payload_op(1, b"c") + bytes([8]) + bytes([10]) + struct.pack("<HH", 0x5349, 20))
put("migration_session", "abandon", struct.pack("<H", 0) + bytes(16) + struct.pack("<H", 4096) + bytes([1, 0, 0, 0, 0, 0]) + start_op(False) + payload_op(1, b"c") + bytes([6, 0]))
