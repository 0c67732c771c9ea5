/* The buddy allocator: pages, contiguous ranges, poison, statistics. */
#include <stdint.h>

#include "check.h"

#define BASE 0x100000u
#define PAGES (1u << 16)

int main(void) {
    spacekit_buddy *z = NULL;
    spacekit_buddy_config cfg;
    spacekit_buddy_free_summary sum;
    spacekit_buddy_statistics st;
    spacekit_buddy_page pg;
    uint64_t p = 0, q = 0, cma = 0;
    uint32_t left = 99;
    bool freed = false, was = false;
    int blocks = 0;

    OK(spacekit_buddy_config_default(&cfg));
    CHECK(cfg.max_order == 10 && cfg.section_pages == 32768);
    EXPECT(spacekit_buddy_config_default(NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* bad configurations */
    cfg.max_order = SPACEKIT_BUDDY_MAX_ORDER_LIMIT + 1;
    EXPECT(spacekit_buddy_new(BASE, PAGES, &cfg, &z), SPACEKIT_ERROR_BAD_CONFIG);
    cfg.max_order = 10;
    cfg.section_pages = 1000;
    EXPECT(spacekit_buddy_new(BASE, PAGES, &cfg, &z), SPACEKIT_ERROR_BAD_CONFIG);
    EXPECT(spacekit_buddy_new(BASE, (uint64_t)1 << 32, NULL, &z), SPACEKIT_ERROR_BAD_CONFIG);
    EXPECT(spacekit_buddy_new(UINT64_MAX - 10, 100, NULL, &z), SPACEKIT_ERROR_BAD_CONFIG);
    EXPECT(spacekit_buddy_new(BASE, PAGES, NULL, NULL), SPACEKIT_ERROR_NULL_POINTER);
    CHECK(z == NULL);
    cfg.section_pages = 32768;
    OK(spacekit_buddy_new(BASE, PAGES, &cfg, &z));

    /* memory starts reserved; hand it over */
    OK(spacekit_buddy_stats(z, &st));
    CHECK(st.free_pages == 0 && st.largest_free_order == -1);
    EXPECT(spacekit_buddy_alloc_pages(z, 0, &p), SPACEKIT_ERROR_NO_SPACE);
    OK(spacekit_buddy_add_range(z, BASE, PAGES, &sum));
    CHECK(sum.freed == PAGES && sum.poisoned == 0);
    EXPECT(spacekit_buddy_add_range(z, BASE, 1, NULL), SPACEKIT_ERROR_ALREADY_FREE);
    EXPECT(spacekit_buddy_add_range(z, BASE + PAGES, 1, NULL), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_buddy_add_range(NULL, BASE, 1, NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_buddy_stats(z, &st));
    CHECK(st.base == BASE && st.pages == PAGES && st.free_pages == PAGES);
    CHECK(st.max_order == 10 && st.largest_free_order == 10 && st.free_blocks[10] == 64);
    CHECK(st.free_blocks[0] == 0 && st.free_blocks[11] == 0);
    EXPECT(spacekit_buddy_stats(z, NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* single pages and blocks */
    OK(spacekit_buddy_alloc_pages(z, 0, &p));
    CHECK(p == BASE);
    OK(spacekit_buddy_page_state(z, p, &pg));
    CHECK(!pg.free && pg.refcount == 1 && pg.head_of == -1 && !pg.poisoned);
    OK(spacekit_buddy_page_state(z, p + 1, &pg));
    CHECK(pg.free && pg.head_of == 0);
    EXPECT(spacekit_buddy_page_state(z, BASE - 1, &pg), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_buddy_page_state(z, p, NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_buddy_free_pages(z, p, 0, &freed));
    CHECK(freed);
    EXPECT(spacekit_buddy_free_pages(z, p, 0, NULL), SPACEKIT_ERROR_ALREADY_FREE);
    EXPECT(spacekit_buddy_alloc_pages(z, 11, &p), SPACEKIT_ERROR_BAD_ORDER);
    EXPECT(spacekit_buddy_alloc_pages(z, 0, NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_buddy_alloc_pages(z, 3, &q));
    CHECK(q % 8 == 0);
    EXPECT(spacekit_buddy_free_pages(z, q + 1, 3, NULL), SPACEKIT_ERROR_MISALIGNED);
    EXPECT(spacekit_buddy_free_pages(z, q, 11, NULL), SPACEKIT_ERROR_BAD_ORDER);
    EXPECT(spacekit_buddy_free_pages(z, BASE + PAGES, 0, NULL), SPACEKIT_ERROR_OUT_OF_RANGE);
    OK(spacekit_buddy_free_pages(z, q, 3, NULL));

    /* CMA: 16384 pages aligned to 16384, one bad page, batched free */
    OK(spacekit_buddy_alloc_contig_pages(z, 16384, 16384, &cma));
    CHECK(cma % 16384 == 0);
    OK(spacekit_buddy_poison(z, cma + 100));
    OK(spacekit_buddy_free_contig_range(z, cma, 16384, &sum));
    CHECK(sum.freed == 16383 && sum.poisoned == 1 && sum.still_referenced == 0);
    OK(spacekit_buddy_page_state(z, cma + 100, &pg));
    CHECK(pg.poisoned && !pg.free);
    OK(spacekit_buddy_unpoison(z, cma + 100, &was));
    CHECK(was);
    OK(spacekit_buddy_unpoison(z, cma + 100, NULL));
    OK(spacekit_buddy_free_contig_frozen_range(z, cma + 100, 1, &sum));
    CHECK(sum.freed == 1);
    EXPECT(spacekit_buddy_free_contig_range(z, cma, 16, NULL), SPACEKIT_ERROR_ALREADY_FREE);
    EXPECT(spacekit_buddy_alloc_contig_pages(z, 0, 1, &p), SPACEKIT_ERROR_ZERO_LENGTH);
    EXPECT(spacekit_buddy_alloc_contig_pages(z, 16, 3, &p), SPACEKIT_ERROR_BAD_ALIGNMENT);
    EXPECT(spacekit_buddy_alloc_contig_pages(z, PAGES + 1, 1, &p), SPACEKIT_ERROR_NO_SPACE);
    EXPECT(spacekit_buddy_alloc_contig_pages(z, 1, 1, NULL), SPACEKIT_ERROR_NULL_POINTER);
    /* poisoning a free page takes it off the free lists */
    OK(spacekit_buddy_poison(z, BASE + 5));
    OK(spacekit_buddy_page_state(z, BASE + 5, &pg));
    CHECK(pg.poisoned && !pg.free);
    EXPECT(spacekit_buddy_poison(z, BASE + PAGES), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_buddy_unpoison(z, BASE + PAGES, NULL), SPACEKIT_ERROR_OUT_OF_RANGE);
    OK(spacekit_buddy_unpoison(z, BASE + 5, NULL));
    OK(spacekit_buddy_free_contig_frozen_range(z, BASE + 5, 1, NULL));

    /* exact ranges, references, frozen frees */
    OK(spacekit_buddy_alloc_contig_range(z, BASE + 7, BASE + 11));
    EXPECT(spacekit_buddy_alloc_contig_range(z, BASE + 10, BASE + 12), SPACEKIT_ERROR_BUSY);
    EXPECT(spacekit_buddy_alloc_contig_range(z, BASE + 12, BASE + 10),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_buddy_alloc_contig_range(NULL, 0, 0), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_buddy_free_contig_frozen_range(z, BASE + 7, 4, NULL),
           SPACEKIT_ERROR_REFERENCED);
    for (p = BASE + 7; p < BASE + 11; p++) {
        OK(spacekit_buddy_put_ref(z, p, &left));
        CHECK(left == 0);
    }
    EXPECT(spacekit_buddy_put_ref(z, BASE + 7, NULL), SPACEKIT_ERROR_NOT_REFERENCED);
    EXPECT(spacekit_buddy_put_ref(z, BASE + 20, NULL), SPACEKIT_ERROR_ALREADY_FREE);
    EXPECT(spacekit_buddy_put_ref(z, BASE + PAGES, NULL), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_buddy_free_contig_range(z, BASE + 7, 4, NULL),
           SPACEKIT_ERROR_NOT_REFERENCED);
    OK(spacekit_buddy_free_contig_frozen_range(z, BASE + 7, 4, &sum));
    CHECK(sum.freed == 4);
    EXPECT(spacekit_buddy_free_contig_frozen_range(z, BASE + PAGES - 1, 2, NULL),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_buddy_free_contig_range(NULL, 0, 1, NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* everything merged back: 64 max-order blocks */
    OK(spacekit_buddy_stats(z, &st));
    CHECK(st.free_pages == PAGES && st.free_blocks[10] == 64);

    /* drain the zone with max-order blocks, then it is full */
    while (spacekit_buddy_alloc_pages(z, 10, &p) == SPACEKIT_OK)
        blocks++;
    CHECK(blocks == 64);
    EXPECT(spacekit_buddy_alloc_pages(z, 0, &p), SPACEKIT_ERROR_NO_SPACE);
    OK(spacekit_buddy_stats(z, &st));
    CHECK(st.free_pages == 0 && st.largest_free_order == -1);

    OK(spacekit_buddy_free(z));
    OK(spacekit_buddy_free(NULL));
    printf("buddy: ok\n");
    return 0;
}
