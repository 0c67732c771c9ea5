/* A VMM's migration loop: each round, harvest the VMM's own dirty log
 * (pages it wrote for the guest, e.g. device DMA), OR it with the
 * hypervisor's log (KVM_GET_DIRTY_LOG's bitmap, simulated here), and turn
 * both into the {gpa, length} table Cloud Hypervisor sends, with gaps of up
 * to 2 clean pages merged. The OR is never built.
 *
 *   cc vmm_dirty.c $(pkg-config --cflags --libs spacekit) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spacekit.h"

#define GUEST_BASE ((uint64_t)1 << 32)
#define GUEST_SIZE ((uint64_t)64 << 20) /* 64 MiB */
#define PAGE 4096u

static int fail(const char *what, spacekit_status st) {
    fprintf(stderr, "%s: %s\n", what, spacekit_strerror((int)st));
    return 1;
}

int main(void) {
    spacekit_dirty_bitmap *vmm_log = NULL;
    spacekit_range_table *table = NULL;
    uint64_t *kvm = NULL, *vmm = NULL;
    size_t nwords = 0;
    spacekit_status st;
    unsigned round, seed = 12345;
    int rc = 1;

    if ((st = spacekit_dirty_bitmap_new(GUEST_BASE, PAGE, GUEST_SIZE, &vmm_log)))
        return fail("dirty_bitmap_new", st);
    if ((st = spacekit_dirty_bitmap_size(vmm_log, &nwords, NULL)))
        goto out_st;
    kvm = calloc(nwords, sizeof *kvm);
    vmm = calloc(nwords, sizeof *vmm);
    if (!kvm || !vmm)
        goto out;
    if ((st = spacekit_range_table_new(&table)))
        goto out_st;

    for (round = 1; round <= 4; round++) {
        const spacekit_memory_range *ranges = NULL;
        size_t count = 0, i, w;
        uint64_t bytes = 0;
        unsigned writes = 4096 >> round; /* the guest converges */

        /* the guest dirties pages (the hypervisor's log) ... */
        memset(kvm, 0, nwords * sizeof *kvm);
        for (i = 0; i < writes; i++) {
            seed = seed * 1103515245u + 12345u;
            w = (seed >> 8) % (nwords * 64);
            kvm[w / 64] |= (uint64_t)1 << (w % 64);
        }
        /* ... and the VMM writes guest memory itself (a 64 KiB packet) */
        if ((st = spacekit_dirty_bitmap_mark(vmm_log, GUEST_BASE + round * (1u << 20), 65536)))
            goto out_st;

        /* harvest the VMM's log (it is clean again afterwards) */
        if ((st = spacekit_dirty_bitmap_harvest(vmm_log, vmm, nwords, NULL)))
            goto out_st;
        /* one table from both logs, reusing the table's memory */
        if ((st = spacekit_range_table_fill(table, kvm, vmm, nwords, GUEST_BASE, PAGE, 2,
                                            false)))
            goto out_st;
        if ((st = spacekit_range_table_ranges(table, &ranges, &count, &bytes)))
            goto out_st;
        printf("round %u: %zu ranges, %llu bytes to send", round, count,
               (unsigned long long)bytes);
        if (count > 0)
            printf(", first at %#llx (+%llu)", (unsigned long long)ranges[0].gpa,
                   (unsigned long long)ranges[0].length);
        printf("\n");

        /* the same ranges into a caller-owned array */
        {
            spacekit_memory_range own[8];
            size_t need = 0;
            st = spacekit_dirty_ranges(kvm, vmm, nwords, GUEST_BASE, PAGE, 2, own, 8, &need);
            if (st != SPACEKIT_OK && st != SPACEKIT_ERROR_BUFFER_TOO_SMALL)
                goto out_st;
            if (need != count || (count > 0 && own[0].gpa != ranges[0].gpa)) {
                fprintf(stderr, "caller-owned ranges disagree\n");
                goto out;
            }
        }
    }
    printf("done\n");
    rc = 0;
    goto out;
out_st:
    fail("vmm loop", st);
out:
    spacekit_range_table_free(table);
    spacekit_dirty_bitmap_free(vmm_log);
    free(kvm);
    free(vmm);
    return rc;
}
