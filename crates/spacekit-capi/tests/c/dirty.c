/* Dirty logs: the atomic dirty bitmap, ranges into a caller-owned array and
 * into a library-owned table. */
#define _POSIX_C_SOURCE 200112L
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

#define BASE ((uint64_t)1 << 32)
#define PAGE 4096u

static void test_dirty_bitmap(void) {
    spacekit_dirty_bitmap *log = NULL;
    uint64_t words[4], pages = 0;
    size_t nwords = 0, dirty = 0;
    bool d = false;

    EXPECT(spacekit_dirty_bitmap_new(BASE, 3000, 1 << 20, &log), SPACEKIT_ERROR_BAD_PAGE_SIZE);
    EXPECT(spacekit_dirty_bitmap_new(BASE, 0, 1 << 20, &log), SPACEKIT_ERROR_BAD_PAGE_SIZE);
    EXPECT(spacekit_dirty_bitmap_new(UINT64_MAX - 10, PAGE, 100, &log),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_dirty_bitmap_new(BASE, PAGE, 1 << 20, NULL), SPACEKIT_ERROR_NULL_POINTER);
    CHECK(log == NULL);
    /* 1 MiB of 4 KiB pages: 256 pages, 4 words */
    OK(spacekit_dirty_bitmap_new(BASE, PAGE, 1 << 20, &log));
    OK(spacekit_dirty_bitmap_size(log, &nwords, &pages));
    CHECK(nwords == 4 && pages == 256);
    OK(spacekit_dirty_bitmap_size(log, NULL, NULL));
    EXPECT(spacekit_dirty_bitmap_size(NULL, &nwords, NULL), SPACEKIT_ERROR_NULL_POINTER);

    OK(spacekit_dirty_bitmap_mark(log, BASE + 0x3000, 0x5000)); /* pages 3..7 */
    OK(spacekit_dirty_bitmap_mark(log, BASE + 100 * PAGE + 5, 1)); /* page 100 */
    OK(spacekit_dirty_bitmap_mark(log, BASE, 0));                  /* nothing */
    EXPECT(spacekit_dirty_bitmap_mark(log, BASE - 1, 2), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_dirty_bitmap_mark(log, BASE + (1 << 20), 1), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_dirty_bitmap_mark(log, UINT64_MAX, 2), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_dirty_bitmap_mark(NULL, BASE, 1), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_dirty_bitmap_is_dirty(log, BASE + 0x3fff, &d));
    CHECK(d);
    OK(spacekit_dirty_bitmap_is_dirty(log, BASE + 0x2fff, &d));
    CHECK(!d);
    EXPECT(spacekit_dirty_bitmap_is_dirty(log, BASE - 1, &d), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_dirty_bitmap_is_dirty(log, BASE, NULL), SPACEKIT_ERROR_NULL_POINTER);

    OK(spacekit_dirty_bitmap_reset_range(log, BASE + 0x7000, 1)); /* page 7 */
    EXPECT(spacekit_dirty_bitmap_reset_range(log, BASE + (1 << 20), 1),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_dirty_bitmap_reset_range(NULL, BASE, 1), SPACEKIT_ERROR_NULL_POINTER);

    memset(words, 0xff, sizeof words);
    EXPECT(spacekit_dirty_bitmap_harvest(log, words, 3, &dirty), SPACEKIT_ERROR_LENGTH_MISMATCH);
    EXPECT(spacekit_dirty_bitmap_harvest(log, NULL, 4, &dirty), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_dirty_bitmap_harvest(log, words, 4, &dirty));
    CHECK(dirty == 2);
    CHECK(words[0] == 0x78 && words[1] == ((uint64_t)1 << 36) && words[2] == 0 && words[3] == 0);
    OK(spacekit_dirty_bitmap_is_dirty(log, BASE + 0x3000, &d));
    CHECK(!d); /* harvested: clean again */
    OK(spacekit_dirty_bitmap_harvest(log, words, 4, NULL));
    CHECK(words[0] == 0 && words[1] == 0);

    OK(spacekit_dirty_bitmap_free(log));
    OK(spacekit_dirty_bitmap_free(NULL));
}

static void test_ranges(void) {
    const uint64_t kvm[2] = {0x3, 0};
    const uint64_t vmm[2] = {0x10, (uint64_t)1 << 63};
    spacekit_memory_range out[4];
    size_t count = 0;

    /* one log */
    OK(spacekit_dirty_ranges(kvm, NULL, 2, BASE, PAGE, 0, out, 4, &count));
    CHECK(count == 1 && out[0].gpa == BASE && out[0].length == 2 * PAGE);
    /* two logs ORed, gaps of up to 2 clean pages merged */
    OK(spacekit_dirty_ranges(kvm, vmm, 2, BASE, PAGE, 2, out, 4, &count));
    CHECK(count == 2);
    CHECK(out[0].gpa == BASE && out[0].length == 5 * PAGE);
    CHECK(out[1].gpa == BASE + 127 * PAGE && out[1].length == PAGE);
    /* without the merge: three ranges */
    OK(spacekit_dirty_ranges(kvm, vmm, 2, BASE, PAGE, 0, out, 4, &count));
    CHECK(count == 3 && out[1].gpa == BASE + 4 * PAGE && out[1].length == PAGE);
    /* the two logs may be the same array: a | a is a */
    OK(spacekit_dirty_ranges(vmm, vmm, 2, BASE, PAGE, 0, out, 4, &count));
    CHECK(count == 2 && out[0].gpa == BASE + 4 * PAGE && out[0].length == PAGE);
    CHECK(out[1].gpa == BASE + 127 * PAGE && out[1].length == PAGE);
    /* a huge gap joins everything */
    OK(spacekit_dirty_ranges(kvm, vmm, 2, BASE, PAGE, UINT64_MAX, out, 4, &count));
    CHECK(count == 1 && out[0].length == 128 * PAGE);
    /* too small: the count needed comes back */
    memset(out, 0, sizeof out);
    EXPECT(spacekit_dirty_ranges(kvm, vmm, 2, BASE, PAGE, 0, out, 1, &count),
           SPACEKIT_ERROR_BUFFER_TOO_SMALL);
    CHECK(count == 3 && out[0].gpa == BASE && out[1].gpa == 0);
    EXPECT(spacekit_dirty_ranges(kvm, vmm, 2, BASE, PAGE, 0, NULL, 0, &count),
           SPACEKIT_ERROR_BUFFER_TOO_SMALL);
    CHECK(count == 3);
    OK(spacekit_dirty_ranges(NULL, NULL, 0, BASE, PAGE, 0, NULL, 0, &count));
    CHECK(count == 0);
    EXPECT(spacekit_dirty_ranges(kvm, NULL, 2, BASE, 3000, 0, out, 4, &count),
           SPACEKIT_ERROR_BAD_PAGE_SIZE);
    EXPECT(spacekit_dirty_ranges(kvm, NULL, 2, UINT64_MAX - PAGE, PAGE, 0, out, 4, &count),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_dirty_ranges(NULL, NULL, 2, BASE, PAGE, 0, out, 4, &count),
           SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_dirty_ranges(kvm, NULL, 2, BASE, PAGE, 0, NULL, 4, &count),
           SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_dirty_ranges(kvm, NULL, 2, BASE, PAGE, 0, out, 4, NULL),
           SPACEKIT_ERROR_NULL_POINTER);
}

static void test_range_table(void) {
    enum { WORDS = 1 << 16 }; /* 4M pages: large enough to scan in parallel */
    static uint64_t a[WORDS], b[WORDS];
    const uint64_t kvm[2] = {0x3, 0};
    const uint64_t vmm[2] = {0x10, (uint64_t)1 << 63};
    spacekit_range_table *t = NULL;
    const spacekit_memory_range *r = NULL;
    size_t count = 0, i;
    uint64_t total = 0;

    EXPECT(spacekit_range_table_new(NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_range_table_new(&t));
    OK(spacekit_range_table_ranges(t, &r, &count, &total));
    CHECK(r == NULL && count == 0 && total == 0);

    OK(spacekit_range_table_fill(t, kvm, vmm, 2, BASE, PAGE, 2, false));
    OK(spacekit_range_table_ranges(t, &r, &count, &total));
    CHECK(count == 2 && total == 6 * PAGE);
    CHECK(r[0].gpa == BASE && r[0].length == 5 * PAGE && r[1].gpa == BASE + 127 * PAGE);
    OK(spacekit_range_table_ranges(t, &r, &count, NULL));

    /* errors leave the table as it was */
    EXPECT(spacekit_range_table_fill(t, kvm, vmm, 2, BASE, 3000, 0, false),
           SPACEKIT_ERROR_BAD_PAGE_SIZE);
    EXPECT(spacekit_range_table_fill(t, kvm, NULL, 2, UINT64_MAX - PAGE, PAGE, 0, false),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_range_table_fill(t, NULL, NULL, 2, BASE, PAGE, 0, false),
           SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_range_table_fill(NULL, kvm, NULL, 2, BASE, PAGE, 0, false),
           SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_range_table_ranges(t, &r, &count, &total));
    CHECK(count == 2 && total == 6 * PAGE);
    EXPECT(spacekit_range_table_ranges(t, NULL, &count, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_range_table_ranges(t, &r, NULL, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_range_table_ranges(NULL, &r, &count, NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* a large pair of logs, serial and parallel, agree */
    for (i = 0; i < WORDS; i++) {
        a[i] = (i % 3 == 0) ? 0xF0F0F0F0F0F0F0F0ull : 0;
        b[i] = (i % 5 == 0) ? 0x8000000000000001ull : 0;
    }
    OK(spacekit_range_table_fill(t, a, b, WORDS, 0, PAGE, 1, false));
    {
        size_t serial_count = 0;
        uint64_t serial_total = 0;
        uint64_t first_gpa, last_gpa;
        OK(spacekit_range_table_ranges(t, &r, &serial_count, &serial_total));
        first_gpa = r[0].gpa;
        last_gpa = r[serial_count - 1].gpa;
        OK(spacekit_range_table_fill(t, a, b, WORDS, 0, PAGE, 1, true));
        OK(spacekit_range_table_ranges(t, &r, &count, &total));
        CHECK(count == serial_count && total == serial_total);
        CHECK(r[0].gpa == first_gpa && r[count - 1].gpa == last_gpa);
        /* the caller-owned path counts the same ranges */
        EXPECT(spacekit_dirty_ranges(a, b, WORDS, 0, PAGE, 1, NULL, 0, &count),
               SPACEKIT_ERROR_BUFFER_TOO_SMALL);
        CHECK(count == serial_count);
    }

    OK(spacekit_range_table_free(t));
    OK(spacekit_range_table_free(NULL));
}

/* Threads mark pages (a page each, stride THREADS) while the main thread
 * harvests: the union of the harvests is every page marked. */
#define THREADS 4
#define TPAGES 4096u

struct marker {
    spacekit_dirty_bitmap *log;
    unsigned id;
};

static void *mark_pages(void *arg) {
    const struct marker *m = (const struct marker *)arg;
    unsigned p;
    for (p = m->id; p < TPAGES; p += THREADS)
        if (spacekit_dirty_bitmap_mark(m->log, BASE + (uint64_t)p * PAGE, 1) != SPACEKIT_OK)
            return (void *)1;
    return NULL;
}

static void test_concurrent_marks(void) {
    spacekit_dirty_bitmap *log = NULL;
    pthread_t th[THREADS];
    struct marker m[THREADS];
    uint64_t words[TPAGES / 64], seen[TPAGES / 64];
    size_t i, rounds = 0;
    unsigned t;

    OK(spacekit_dirty_bitmap_new(BASE, PAGE, (uint64_t)TPAGES * PAGE, &log));
    memset(seen, 0, sizeof seen);
    for (t = 0; t < THREADS; t++) {
        m[t].log = log;
        m[t].id = t;
        CHECK(pthread_create(&th[t], NULL, mark_pages, &m[t]) == 0);
    }
    for (rounds = 0; rounds < 50; rounds++) {
        OK(spacekit_dirty_bitmap_harvest(log, words, TPAGES / 64, NULL));
        for (i = 0; i < TPAGES / 64; i++)
            seen[i] |= words[i];
    }
    for (t = 0; t < THREADS; t++) {
        void *ret = (void *)1;
        CHECK(pthread_join(th[t], &ret) == 0);
        CHECK(ret == NULL);
    }
    OK(spacekit_dirty_bitmap_harvest(log, words, TPAGES / 64, NULL));
    for (i = 0; i < TPAGES / 64; i++)
        CHECK((seen[i] | words[i]) == UINT64_MAX);
    OK(spacekit_dirty_bitmap_free(log));
}

int main(void) {
    test_dirty_bitmap();
    test_ranges();
    /* rayon's pool (a parallel fill) starts before this program's own
     * threads, so its threads never reuse their cached stacks, which
     * memcheck would attribute to pthread_create here */
    test_range_table();
    test_concurrent_marks();
    printf("dirty: ok\n");
    return 0;
}
