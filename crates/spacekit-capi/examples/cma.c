/* CMA on a buddy allocator: a zone fragmented by ordinary allocations gives
 * a 64 MiB contiguous, aligned range (16384 4 KiB pages) to a device, which
 * later hands it back in one batched free: the pages go back in a few large
 * aligned chunks rather than 16384 single-page frees.
 *
 *   cc cma.c $(pkg-config --cflags --libs spacekit) */
#include <stdint.h>
#include <stdio.h>

#include "spacekit.h"

#define BASE 0x100000u  /* pfn of 4 GiB */
#define PAGES (1u << 18) /* 1 GiB */
#define CMA_PAGES 16384u

static int fail(const char *what, spacekit_status st) {
    fprintf(stderr, "%s: %s\n", what, spacekit_strerror((int)st));
    return 1;
}

static void show(const char *when, const spacekit_buddy *zone) {
    spacekit_buddy_statistics st;
    unsigned o;
    if (spacekit_buddy_stats(zone, &st) != SPACEKIT_OK)
        return;
    printf("%-18s free %7llu pages, buddyinfo:", when, (unsigned long long)st.free_pages);
    for (o = 0; o <= st.max_order; o++)
        printf(" %llu", (unsigned long long)st.free_blocks[o]);
    printf("\n");
}

int main(void) {
    spacekit_buddy *zone = NULL;
    spacekit_buddy_free_summary done;
    uint64_t small[64], cma = 0;
    spacekit_status st;
    unsigned i;

    if ((st = spacekit_buddy_new(BASE, PAGES, NULL, &zone)))
        return fail("buddy_new", st);
    if ((st = spacekit_buddy_add_range(zone, BASE, PAGES, NULL)))
        return fail("add_range", st);
    /* ordinary allocations of mixed orders fragment the start of the zone */
    for (i = 0; i < 64; i++)
        if ((st = spacekit_buddy_alloc_pages(zone, i % 4, &small[i])))
            return fail("alloc_pages", st);
    show("fragmented:", zone);

    /* the lowest free 16384-page run aligned to 16384 pages */
    if ((st = spacekit_buddy_alloc_contig_pages(zone, CMA_PAGES, CMA_PAGES, &cma)))
        return fail("alloc_contig_pages", st);
    printf("CMA range: pfn %#llx..%#llx\n", (unsigned long long)cma,
           (unsigned long long)(cma + CMA_PAGES - 1));
    show("after CMA alloc:", zone);

    /* a page of the range goes bad while the device holds it */
    if ((st = spacekit_buddy_poison(zone, cma + 100)))
        return fail("poison", st);

    /* the device is done: one batched free of the whole range */
    if ((st = spacekit_buddy_free_contig_range(zone, cma, CMA_PAGES, &done)))
        return fail("free_contig_range", st);
    printf("freed %llu pages, %llu poisoned held back\n", (unsigned long long)done.freed,
           (unsigned long long)done.poisoned);
    show("after batched free:", zone);

    for (i = 0; i < 64; i++)
        if ((st = spacekit_buddy_free_pages(zone, small[i], i % 4, NULL)))
            return fail("free_pages", st);
    show("all freed:", zone);
    spacekit_buddy_free(zone);
    printf("done\n");
    return 0;
}
