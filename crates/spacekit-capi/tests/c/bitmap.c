/* Bitmaps over caller-owned words, the free-space index, and strerror. */
#include <stdint.h>
#include <string.h>

#include "check.h"

static void test_strerror(void) {
    int code;
    CHECK(strcmp(spacekit_strerror(SPACEKIT_OK), "success") == 0);
    CHECK(strcmp(spacekit_strerror(SPACEKIT_NOT_FOUND), "not found") == 0);
    CHECK(strcmp(spacekit_strerror(-1), "unknown spacekit status code") == 0);
    CHECK(strcmp(spacekit_strerror(1000), "unknown spacekit status code") == 0);
    for (code = 0; code <= SPACEKIT_ERROR_INTERNAL; code++) {
        const char *s = spacekit_strerror(code);
        CHECK(s != NULL && s[0] != '\0');
        CHECK(strcmp(s, "unknown spacekit status code") != 0);
    }
}

static void test_bitmap(void) {
    uint64_t w[4] = {0, 0, 0, 0};
    const size_t n = 256;
    size_t out = 12345;
    bool b = false;

    OK(spacekit_bitmap_words(200, &out));
    CHECK(out == 4);
    OK(spacekit_bitmap_words(0, &out));
    CHECK(out == 0);
    /* no overflow where (nbits + 63) / 64 would wrap */
    OK(spacekit_bitmap_words(SIZE_MAX, &out));
    CHECK(out == SIZE_MAX / 64 + 1);
    EXPECT(spacekit_bitmap_words(1, NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* set / test */
    OK(spacekit_bitmap_set_range(w, n, 0, 70));
    CHECK(w[0] == UINT64_MAX && w[1] == 0x3f && w[2] == 0 && w[3] == 0);
    OK(spacekit_bitmap_test(w, n, 69, &b));
    CHECK(b);
    OK(spacekit_bitmap_test(w, n, 70, &b));
    CHECK(!b);
    EXPECT(spacekit_bitmap_test(w, n, 256, &b), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_bitmap_test(NULL, n, 0, &b), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_bitmap_test(w, n, 0, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_bitmap_test(NULL, 0, 0, &b), SPACEKIT_ERROR_OUT_OF_RANGE);

    /* range errors change nothing */
    EXPECT(spacekit_bitmap_set_range(w, n, 250, 10), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_bitmap_set_range(w, n, SIZE_MAX, 2), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_bitmap_clear_range(w, n, 0, 257), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_bitmap_flip_range(w, n, 256, 1), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_bitmap_set_range(NULL, n, 0, 1), SPACEKIT_ERROR_NULL_POINTER);
    CHECK(w[0] == UINT64_MAX && w[1] == 0x3f && w[2] == 0 && w[3] == 0);
    OK(spacekit_bitmap_set_range(w, n, 256, 0)); /* empty range at the end */
    OK(spacekit_bitmap_set_range(NULL, 0, 0, 0));

    /* next / prev */
    OK(spacekit_bitmap_find_next_clear(w, n, 0, &out));
    CHECK(out == 70);
    out = 777;
    EXPECT(spacekit_bitmap_find_next_set(w, n, 70, &out), SPACEKIT_NOT_FOUND);
    CHECK(out == 777); /* untouched */
    OK(spacekit_bitmap_set_range(w, n, 200, 1));
    OK(spacekit_bitmap_find_next_set(w, n, 70, &out));
    CHECK(out == 200);
    EXPECT(spacekit_bitmap_find_next_set(w, n, 256, &out), SPACEKIT_NOT_FOUND);
    EXPECT(spacekit_bitmap_find_next_set(w, n, 0, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_bitmap_find_next_clear(NULL, n, 0, &out), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_bitmap_find_prev_set(w, n, 199, &out));
    CHECK(out == 69);
    OK(spacekit_bitmap_find_prev_set(w, n, 255, &out));
    CHECK(out == 200);
    EXPECT(spacekit_bitmap_find_prev_set(w, n, 256, &out), SPACEKIT_NOT_FOUND);
    EXPECT(spacekit_bitmap_find_prev_clear(w, n, 69, &out), SPACEKIT_NOT_FOUND);
    OK(spacekit_bitmap_find_prev_clear(w, n, 255, &out));
    CHECK(out == 255);
    OK(spacekit_bitmap_find_prev_clear(w, n, 200, &out));
    CHECK(out == 199);
    EXPECT(spacekit_bitmap_find_prev_clear(w, n, 0, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_bitmap_find_prev_set(NULL, n, 0, &out), SPACEKIT_ERROR_NULL_POINTER);

    /* find_clear_area, as bitmap_find_next_zero_area_off */
    OK(spacekit_bitmap_find_clear_area(w, n, 0, 10, 0, 0, &out));
    CHECK(out == 70);
    OK(spacekit_bitmap_find_clear_area(w, n, 0, 10, 15, 0, &out));
    CHECK(out == 80);
    /* aligned on absolute numbers: bit 0 is block 1000, 1000 % 16 == 8 */
    OK(spacekit_bitmap_find_clear_area(w, n, 0, 10, 15, 1000, &out));
    CHECK(out == 72);
    OK(spacekit_bitmap_find_clear_area(w, n, 190, 9, 7, 0, &out));
    CHECK(out == 208);
    EXPECT(spacekit_bitmap_find_clear_area(w, n, 0, 200, 0, 0, &out), SPACEKIT_NOT_FOUND);
    EXPECT(spacekit_bitmap_find_clear_area(w, n, 0, 10, 11, 0, &out),
           SPACEKIT_ERROR_BAD_ALIGNMENT);
    EXPECT(spacekit_bitmap_find_clear_area(w, n, 0, 10, 0, 0, NULL),
           SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_bitmap_find_clear_area(NULL, n, 0, 10, 0, 0, &out),
           SPACEKIT_ERROR_NULL_POINTER);

    /* flip / clear / count */
    OK(spacekit_bitmap_flip_range(w, n, 64, 8));
    CHECK(w[1] == 0xc0);
    OK(spacekit_bitmap_count_set(w, n, 0, n, &out));
    CHECK(out == 64 + 2 + 1);
    OK(spacekit_bitmap_count_set(w, n, 60, 10, &out));
    CHECK(out == 4);
    EXPECT(spacekit_bitmap_count_set(w, n, 250, 7, &out), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_bitmap_count_set(w, n, 0, 1, NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_bitmap_clear_range(w, n, 0, n));
    OK(spacekit_bitmap_count_set(w, n, 0, n, &out));
    CHECK(out == 0);
}

/* Word arrays must be aligned for uint64_t: a misaligned one is refused
 * before any word is read or written. */
static void test_misaligned(void) {
    uint64_t w[3] = {0, 0, 0};
    uint64_t *odd = (uint64_t *)(void *)((char *)w + 4);
    size_t out = 7;
    bool b = false;
    EXPECT(spacekit_bitmap_set_range(odd, 128, 0, 128), SPACEKIT_ERROR_INVALID_ARGUMENT);
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 0);
    EXPECT(spacekit_bitmap_test(odd, 128, 0, &b), SPACEKIT_ERROR_INVALID_ARGUMENT);
    EXPECT(spacekit_bitmap_find_next_clear(odd, 128, 0, &out), SPACEKIT_ERROR_INVALID_ARGUMENT);
    CHECK(out == 7);
    /* no words at all: any pointer, never read */
    OK(spacekit_bitmap_set_range(odd, 0, 0, 0));
}

/* Bits past nbits in the last word are neither read nor written. */
static void test_partial_word(void) {
    uint64_t w[2] = {0, (uint64_t)1 << 63};
    const size_t n = 100;
    size_t out;
    OK(spacekit_bitmap_set_range(w, n, 90, 10));
    CHECK(w[1] == (((uint64_t)1 << 63) | (((uint64_t)1 << 10) - 1) << 26));
    EXPECT(spacekit_bitmap_find_next_set(w, n, 100, &out), SPACEKIT_NOT_FOUND);
    OK(spacekit_bitmap_find_next_set(w, n, 0, &out));
    CHECK(out == 90);
    OK(spacekit_bitmap_clear_range(w, n, 0, n));
    CHECK(w[1] == (uint64_t)1 << 63);
    OK(spacekit_bitmap_count_set(w, n, 0, n, &out));
    CHECK(out == 0);
}

static void test_freespace(void) {
    enum { NBITS = 8192 };
    static uint64_t map[NBITS / 64];
    spacekit_freespace *fs = NULL;
    uint64_t s = 0, len = 0;

    EXPECT(spacekit_freespace_new(map, NBITS, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_freespace_new(NULL, NBITS, &fs), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_freespace_new(map, (uint64_t)1 << 32, &fs), SPACEKIT_ERROR_TOO_LARGE);
    CHECK(fs == NULL);
    OK(spacekit_freespace_new(map, NBITS, &fs));
    CHECK(fs != NULL);

    OK(spacekit_freespace_first_fit(fs, map, NBITS, 16, 8, 0, 0, &s));
    CHECK(s == 0);
    OK(spacekit_bitmap_set_range(map, NBITS, 0, 100));
    OK(spacekit_freespace_update(fs, map, NBITS, 0, 100));
    OK(spacekit_freespace_first_fit(fs, map, NBITS, 16, 8, 0, 0, &s));
    CHECK(s == 104);
    OK(spacekit_freespace_first_fit(fs, map, NBITS, 16, 8, 3, 0, &s));
    CHECK(s == 101 && (s + 3) % 8 == 0);
    OK(spacekit_freespace_first_fit(fs, map, NBITS, 16, 1, 0, 5000, &s));
    CHECK(s == 5000);
    /* a hole of 20 at 3000..3019 is the best fit for 16 */
    OK(spacekit_bitmap_set_range(map, NBITS, 2000, 1000));
    OK(spacekit_bitmap_set_range(map, NBITS, 3020, 1000));
    OK(spacekit_freespace_update(fs, map, NBITS, 2000, 2020));
    OK(spacekit_freespace_best_fit(fs, map, NBITS, 16, 1, 0, &s));
    CHECK(s == 3000);
    OK(spacekit_freespace_largest_free(fs, map, NBITS, &s, &len));
    CHECK(s == 4020 && len == NBITS - 4020);

    EXPECT(spacekit_freespace_first_fit(fs, map, NBITS, 0, 1, 0, 0, &s),
           SPACEKIT_ERROR_ZERO_LENGTH);
    EXPECT(spacekit_freespace_first_fit(fs, map, NBITS, 4, 3, 0, 0, &s),
           SPACEKIT_ERROR_BAD_ALIGNMENT);
    EXPECT(spacekit_freespace_first_fit(fs, map, NBITS, 4, 1, 0, NBITS + 1, &s),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_freespace_first_fit(fs, map, 64, 4, 1, 0, 0, &s),
           SPACEKIT_ERROR_LENGTH_MISMATCH);
    EXPECT(spacekit_freespace_first_fit(fs, map, NBITS, 4, 1, 0, 0, NULL),
           SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_freespace_first_fit(NULL, map, NBITS, 4, 1, 0, 0, &s),
           SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_freespace_best_fit(fs, map, NBITS, 0, 1, 0, &s), SPACEKIT_ERROR_ZERO_LENGTH);
    EXPECT(spacekit_freespace_best_fit(fs, map, NBITS, 1, 6, 0, &s),
           SPACEKIT_ERROR_BAD_ALIGNMENT);
    EXPECT(spacekit_freespace_update(fs, map, NBITS, NBITS - 1, 2), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_freespace_update(fs, map, 10, 0, 1), SPACEKIT_ERROR_LENGTH_MISMATCH);
    EXPECT(spacekit_freespace_update(NULL, map, NBITS, 0, 1), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_freespace_largest_free(fs, map, NBITS, NULL, &len),
           SPACEKIT_ERROR_NULL_POINTER);

    /* full: nothing fits */
    OK(spacekit_bitmap_set_range(map, NBITS, 0, NBITS));
    OK(spacekit_freespace_update(fs, map, NBITS, 0, NBITS));
    EXPECT(spacekit_freespace_first_fit(fs, map, NBITS, 1, 1, 0, 0, &s), SPACEKIT_NOT_FOUND);
    EXPECT(spacekit_freespace_best_fit(fs, map, NBITS, 1, 1, 0, &s), SPACEKIT_NOT_FOUND);
    EXPECT(spacekit_freespace_largest_free(fs, map, NBITS, &s, &len), SPACEKIT_NOT_FOUND);

    OK(spacekit_freespace_free(fs));
    OK(spacekit_freespace_free(NULL));
}

int main(void) {
    test_strerror();
    test_bitmap();
    test_partial_word();
    test_misaligned();
    test_freespace();
    printf("bitmap: ok\n");
    return 0;
}
