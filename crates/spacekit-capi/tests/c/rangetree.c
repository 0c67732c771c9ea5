/* The range tree with uint64_t values: an address space as mmap keeps it. */
#include <stdint.h>

#include "check.h"

struct tally {
    size_t calls;
    uint64_t value_sum;
    size_t stop_after;
};

static int32_t visit(void *ctx, uint64_t first, uint64_t last, uint64_t value) {
    struct tally *t = (struct tally *)ctx;
    CHECK(first <= last);
    t->calls++;
    t->value_sum += value;
    return t->stop_after != 0 && t->calls >= t->stop_after;
}

int main(void) {
    const uint64_t text = 0x400000, text_end = 0x40ffff;
    const uint64_t stack = 0x7ffff0000000ull, stack_end = 0x7fffffffffffull;
    const uint64_t lo = 0x10000, hi = 0x7fffefffffffull;
    spacekit_rangetree *t = NULL, *copy = NULL;
    spacekit_rangetree_cursor cur;
    struct tally tally = {0, 0, 0};
    uint64_t first = 0, last = 0, value = 0, at = 0;
    size_t len = 0, visited = 0, steps = 0;

    EXPECT(spacekit_rangetree_new(NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_rangetree_new(&t));
    OK(spacekit_rangetree_len(t, &len));
    CHECK(len == 0);
    EXPECT(spacekit_rangetree_len(t, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_rangetree_len(NULL, &len), SPACEKIT_ERROR_NULL_POINTER);

    /* insert: EEXIST on overlap, EINVAL for first > last */
    OK(spacekit_rangetree_insert(t, text, text_end, 1));
    OK(spacekit_rangetree_insert(t, stack, stack_end, 2));
    EXPECT(spacekit_rangetree_insert(t, text_end, text_end + 10, 3), SPACEKIT_ERROR_OCCUPIED);
    EXPECT(spacekit_rangetree_insert(t, 10, 5, 3), SPACEKIT_ERROR_INVALID_ARGUMENT);
    EXPECT(spacekit_rangetree_insert(NULL, 1, 2, 3), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_rangetree_len(t, &len));
    CHECK(len == 2);

    /* get */
    OK(spacekit_rangetree_get(t, 0x401234, &first, &last, &value));
    CHECK(first == text && last == text_end && value == 1);
    OK(spacekit_rangetree_get(t, stack_end, NULL, NULL, &value));
    CHECK(value == 2);
    value = 99;
    EXPECT(spacekit_rangetree_get(t, text_end + 1, &first, &last, &value), SPACEKIT_NOT_FOUND);
    CHECK(value == 99);
    EXPECT(spacekit_rangetree_get(NULL, 0, NULL, NULL, NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* gap search: mmap's top-down 2 MiB, 2 MiB-aligned, below the stack */
    OK(spacekit_rangetree_find_gap(t, 2 << 20, 2 << 20, lo, hi, true, &at));
    CHECK(at == 0x7fffefe00000ull);
    OK(spacekit_rangetree_find_gap(t, 0x1000, 1, lo, hi, false, &at));
    CHECK(at == lo);
    OK(spacekit_rangetree_find_gap(t, 0x1000, 1, text, hi, false, &at));
    CHECK(at == text_end + 1);
    EXPECT(spacekit_rangetree_find_gap(t, 1, 1, text, text_end, false, &at), SPACEKIT_NOT_FOUND);
    EXPECT(spacekit_rangetree_find_gap(t, 0, 1, lo, hi, false, &at), SPACEKIT_ERROR_ZERO_LENGTH);
    EXPECT(spacekit_rangetree_find_gap(t, 1, 3, lo, hi, false, &at),
           SPACEKIT_ERROR_BAD_ALIGNMENT);
    EXPECT(spacekit_rangetree_find_gap(t, 1, 1, hi, lo, false, &at),
           SPACEKIT_ERROR_INVALID_ARGUMENT);
    EXPECT(spacekit_rangetree_find_gap(t, 100, 1, 0, 10, false, &at),
           SPACEKIT_ERROR_INVALID_ARGUMENT);
    EXPECT(spacekit_rangetree_find_gap(t, 1, 1, lo, hi, false, NULL),
           SPACEKIT_ERROR_NULL_POINTER);

    /* alloc: find + insert */
    OK(spacekit_rangetree_alloc(t, 2 << 20, 2 << 20, lo, hi, true, 3, &at));
    CHECK(at == 0x7fffefe00000ull);
    OK(spacekit_rangetree_get(t, at + 5, &first, &last, &value));
    CHECK(first == at && last == at + (2 << 20) - 1 && value == 3);
    OK(spacekit_rangetree_alloc(t, 0x1000, 0x1000, lo, hi, false, 4, &at));
    CHECK(at == lo);
    EXPECT(spacekit_rangetree_alloc(t, 1, 1, text, text_end, false, 5, &at),
           SPACEKIT_ERROR_NO_SPACE);
    EXPECT(spacekit_rangetree_alloc(t, 0, 1, lo, hi, false, 5, &at), SPACEKIT_ERROR_ZERO_LENGTH);
    EXPECT(spacekit_rangetree_alloc(t, 1, 1, lo, hi, false, 5, NULL),
           SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_rangetree_len(t, &len));
    CHECK(len == 4);

    /* store overwrites, splitting the entry it lands in */
    OK(spacekit_rangetree_store(t, 0x400100, 0x4001ff, 9));
    OK(spacekit_rangetree_len(t, &len));
    CHECK(len == 6);
    OK(spacekit_rangetree_get(t, 0x400200, &first, &last, &value));
    CHECK(first == 0x400200 && last == text_end && value == 1);
    EXPECT(spacekit_rangetree_store(t, 5, 4, 0), SPACEKIT_ERROR_INVALID_ARGUMENT);

    /* erase */
    OK(spacekit_rangetree_erase(t, 0x400150, &value));
    CHECK(value == 9);
    EXPECT(spacekit_rangetree_erase(t, 0x400150, &value), SPACEKIT_NOT_FOUND);
    OK(spacekit_rangetree_erase(t, lo, NULL));
    EXPECT(spacekit_rangetree_erase(NULL, 0, NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* the whole space, 0 and UINT64_MAX included */
    OK(spacekit_rangetree_insert(t, UINT64_MAX - 1, UINT64_MAX, 7));
    OK(spacekit_rangetree_insert(t, 0, 0, 8));
    OK(spacekit_rangetree_len(t, &len));
    CHECK(len == 6);

    /* dup: an independent copy */
    EXPECT(spacekit_rangetree_dup(t, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_rangetree_dup(NULL, &copy), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_rangetree_dup(t, &copy));
    OK(spacekit_rangetree_erase(t, 0, NULL));
    OK(spacekit_rangetree_len(copy, &len));
    CHECK(len == 6);
    OK(spacekit_rangetree_get(copy, 0, NULL, NULL, &value));
    CHECK(value == 8);

    /* for_each: all, a window, and a stop */
    OK(spacekit_rangetree_for_each(copy, 0, UINT64_MAX, visit, &tally, &visited));
    CHECK(tally.calls == 6 && visited == 6 && tally.value_sum == 8 + 1 + 1 + 3 + 2 + 7);
    tally.calls = 0;
    tally.value_sum = 0;
    OK(spacekit_rangetree_for_each(copy, 0x400000, 0x400000, visit, &tally, NULL));
    CHECK(tally.calls == 1 && tally.value_sum == 1);
    tally.calls = 0;
    tally.stop_after = 2;
    OK(spacekit_rangetree_for_each(copy, 0, UINT64_MAX, visit, &tally, &visited));
    CHECK(tally.calls == 2 && visited == 2);
    EXPECT(spacekit_rangetree_for_each(copy, 0, UINT64_MAX, NULL, NULL, NULL),
           SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_rangetree_for_each(NULL, 0, 1, visit, &tally, NULL),
           SPACEKIT_ERROR_NULL_POINTER);

    /* cursor: a walk that ends at UINT64_MAX without wrapping */
    OK(spacekit_rangetree_cursor_init(&cur, 0, UINT64_MAX));
    while (spacekit_rangetree_cursor_next(copy, &cur, &first, &last, &value) == SPACEKIT_OK) {
        CHECK(first <= last);
        steps++;
    }
    CHECK(steps == 6 && cur.done && last == UINT64_MAX && value == 7);
    EXPECT(spacekit_rangetree_cursor_next(copy, &cur, NULL, NULL, NULL), SPACEKIT_NOT_FOUND);
    /* a window starting inside an entry reports that entry */
    OK(spacekit_rangetree_cursor_init(&cur, 0x400300, 0x7fffefe00000ull));
    OK(spacekit_rangetree_cursor_next(copy, &cur, &first, NULL, &value));
    CHECK(first == 0x400200 && value == 1);
    OK(spacekit_rangetree_cursor_next(copy, &cur, &first, NULL, &value));
    CHECK(first == 0x7fffefe00000ull && value == 3);
    EXPECT(spacekit_rangetree_cursor_next(copy, &cur, &first, NULL, &value), SPACEKIT_NOT_FOUND);
    OK(spacekit_rangetree_cursor_init(&cur, 10, 5));
    EXPECT(spacekit_rangetree_cursor_next(copy, &cur, NULL, NULL, NULL), SPACEKIT_NOT_FOUND);
    EXPECT(spacekit_rangetree_cursor_init(NULL, 0, 1), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_rangetree_cursor_next(copy, NULL, NULL, NULL, NULL),
           SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_rangetree_cursor_next(NULL, &cur, NULL, NULL, NULL),
           SPACEKIT_ERROR_NULL_POINTER);

    OK(spacekit_rangetree_free(copy));
    OK(spacekit_rangetree_free(t));
    OK(spacekit_rangetree_free(NULL));
    printf("rangetree: ok\n");
    return 0;
}
