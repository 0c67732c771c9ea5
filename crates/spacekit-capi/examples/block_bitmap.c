/* An e2fsprogs-style block bitmap: allocate runs of blocks in one group's
 * bitmap and keep its ext4 checksum (raw CRC-32C from the file system's
 * checksum seed over clusters_per_group / 8 bytes) current with
 * spacekit_crc32c_flip_range after each run is marked, instead of
 * recomputing it over the whole block.
 *
 *   cc block_bitmap.c $(pkg-config --cflags --libs spacekit) */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "spacekit.h"

#define BLOCK_SIZE 4096u                    /* one bitmap block */
#define BLOCKS_PER_GROUP (BLOCK_SIZE * 8u)  /* 32768 */
#define FIRST_BLOCK 32768u                  /* the group's first block */

static int fail(const char *what, spacekit_status st) {
    fprintf(stderr, "%s: %s\n", what, spacekit_strerror((int)st));
    return 1;
}

int main(void) {
    /* The bitmap as ext4 stores it is little-endian bytes; held as uint64_t
     * words it is the same memory on a little-endian machine. */
    static uint64_t bitmap[BLOCK_SIZE / 8];
    const uint32_t csum_seed = 0x1234ABCDu;
    uint32_t csum = 0, fresh = 0;
    spacekit_status st;
    int i;

    /* the group's metadata (bitmaps, inode table) takes its first 600 blocks */
    if ((st = spacekit_bitmap_set_range(bitmap, BLOCKS_PER_GROUP, 0, 600)) != SPACEKIT_OK)
        return fail("set metadata", st);
    if ((st = spacekit_crc32c_raw(csum_seed, (const uint8_t *)bitmap, BLOCK_SIZE, &csum)))
        return fail("crc", st);

    for (i = 0; i < 8; i++) {
        size_t start = 0;
        size_t len = 16 + 48 * (size_t)i;
        /* len free blocks, the first on a multiple of 16 in absolute block
         * numbers: bitmap_find_next_zero_area_off(map, size, 0, len, 15,
         * FIRST_BLOCK % 16) */
        st = spacekit_bitmap_find_clear_area(bitmap, BLOCKS_PER_GROUP, 0, len, 15,
                                             FIRST_BLOCK % 16, &start);
        if (st == SPACEKIT_NOT_FOUND) {
            printf("no room for %zu blocks\n", len);
            break;
        }
        if (st != SPACEKIT_OK)
            return fail("find_clear_area", st);
        if ((st = spacekit_bitmap_set_range(bitmap, BLOCKS_PER_GROUP, start, len)))
            return fail("set_range", st);
        /* every bit of the run went from 0 to 1: flip_range updates the
         * checksum in O(log n) */
        if ((st = spacekit_crc32c_flip_range(csum, BLOCK_SIZE, start, len, &csum)))
            return fail("flip_range", st);
        printf("allocated blocks %zu..%zu, bitmap checksum %08x\n",
               FIRST_BLOCK + start, FIRST_BLOCK + start + len - 1, csum);
    }

    /* the incremental checksum equals a full recomputation */
    if ((st = spacekit_crc32c_raw(csum_seed, (const uint8_t *)bitmap, BLOCK_SIZE, &fresh)))
        return fail("crc", st);
    if (fresh != csum) {
        fprintf(stderr, "checksum mismatch: %08x != %08x\n", csum, fresh);
        return 1;
    }
    printf("checksum verified: %08x\ndone\n", csum);
    return 0;
}
