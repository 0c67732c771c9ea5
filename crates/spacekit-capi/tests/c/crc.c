/* CRC-32C and the checksummed bitmap. */
#include <stdint.h>
#include <string.h>

#include "check.h"

static uint32_t raw(uint32_t seed, const uint8_t *buf, size_t len) {
    uint32_t c = 0;
    OK(spacekit_crc32c_raw(seed, buf, len, &c));
    return c;
}

static void test_crc(void) {
    const uint8_t *digits = (const uint8_t *)"123456789";
    const uint8_t *hello = (const uint8_t *)"hello, world";
    static uint8_t buf[4096];
    uint8_t old[10], fresh[10];
    uint32_t c = 0, a = 0, b = 0, whole = 0;
    const uint32_t seed = 0x5EED;
    size_t i;

    OK(spacekit_crc32c(digits, 9, &c));
    CHECK(c == 0xE3069283u);
    CHECK(raw(~0u, digits, 9) == ~c);
    CHECK(raw(42, NULL, 0) == 42);
    EXPECT(spacekit_crc32c_raw(0, NULL, 5, &c), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_crc32c_raw(0, digits, 9, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_crc32c(NULL, 1, &c), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_crc32c(digits, 9, NULL), SPACEKIT_ERROR_NULL_POINTER);
    /* a length no object can have is refused before anything is read */
    EXPECT(spacekit_crc32c(digits, SIZE_MAX, &c), SPACEKIT_ERROR_TOO_LARGE);
    EXPECT(spacekit_crc32c_raw(0, digits, (SIZE_MAX >> 1) + 1, &c), SPACEKIT_ERROR_TOO_LARGE);

    /* shift: the CRC after zero bytes */
    OK(spacekit_crc32c_shift(raw(7, (const uint8_t *)"abc", 3), 5, &c));
    CHECK(c == raw(7, (const uint8_t *)"abc\0\0\0\0\0", 8));
    EXPECT(spacekit_crc32c_shift(1, 1, NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* combine: standard and raw */
    OK(spacekit_crc32c(hello, 7, &a));
    OK(spacekit_crc32c(hello + 7, 5, &b));
    OK(spacekit_crc32c(hello, 12, &whole));
    OK(spacekit_crc32c_combine(a, b, 5, &c));
    CHECK(c == whole);
    OK(spacekit_crc32c_combine(raw(7, hello, 7), raw(0, hello + 7, 5), 5, &c));
    CHECK(c == raw(7, hello, 12));
    EXPECT(spacekit_crc32c_combine(a, b, 5, NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* flip_range: bits 100..139 set in a zero buffer */
    memset(buf, 0, sizeof buf);
    a = raw(seed, buf, sizeof buf);
    for (i = 100; i < 140; i++)
        buf[i / 8] |= (uint8_t)(1u << (i % 8));
    OK(spacekit_crc32c_flip_range(a, sizeof buf, 100, 40, &c));
    CHECK(c == raw(seed, buf, sizeof buf));
    OK(spacekit_crc32c_flip_range(a, sizeof buf, 5, 0, &c));
    CHECK(c == a);
    EXPECT(spacekit_crc32c_flip_range(a, sizeof buf, sizeof buf * 8 - 10, 20, &c),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_crc32c_flip_range(a, UINT64_MAX, 0, 1, &c), SPACEKIT_ERROR_TOO_LARGE);
    EXPECT(spacekit_crc32c_flip_range(a, sizeof buf, 0, 1, NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* splice: bytes 10..19 rewritten */
    a = raw(seed, buf, sizeof buf);
    memcpy(old, buf + 10, 10);
    for (i = 0; i < 10; i++)
        fresh[i] = (uint8_t)(0xA0 + i);
    memcpy(buf + 10, fresh, 10);
    OK(spacekit_crc32c_splice(a, sizeof buf, 10, old, fresh, 10, &c));
    CHECK(c == raw(seed, buf, sizeof buf));
    OK(spacekit_crc32c_splice(a, sizeof buf, 0, NULL, NULL, 0, &c));
    CHECK(c == a);
    EXPECT(spacekit_crc32c_splice(a, sizeof buf, 4090, old, fresh, 10, &c),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_crc32c_splice(a, sizeof buf, 0, NULL, fresh, 10, &c),
           SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_crc32c_splice(a, sizeof buf, 0, old, fresh, 10, NULL),
           SPACEKIT_ERROR_NULL_POINTER);
}

static void test_checked_bitmap(void) {
    static uint8_t block[4096];
    static uint8_t back[4096];
    const uint32_t seed = 0xDEADBEEF;
    spacekit_checked_bitmap *m = NULL;
    uint32_t c = 0;
    size_t nbits = 0, changed = 0, s = 0, len = 0;
    bool ok = false, bit = false;

    memset(block, 0, sizeof block);
    EXPECT(spacekit_checked_bitmap_new(block, sizeof block, seed, sizeof block + 1, &m),
           SPACEKIT_ERROR_LENGTH_MISMATCH);
    EXPECT(spacekit_checked_bitmap_new(NULL, sizeof block, seed, 0, &m),
           SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_checked_bitmap_new(block, sizeof block, seed, 4096, NULL),
           SPACEKIT_ERROR_NULL_POINTER);
    CHECK(m == NULL);
    OK(spacekit_checked_bitmap_new(block, sizeof block, seed, sizeof block, &m));

    OK(spacekit_checked_bitmap_checksum(m, &c, &nbits));
    CHECK(nbits == 32768 && c == raw(seed, block, sizeof block));
    OK(spacekit_checked_bitmap_checksum(m, NULL, NULL));
    EXPECT(spacekit_checked_bitmap_checksum(NULL, &c, NULL), SPACEKIT_ERROR_NULL_POINTER);

    OK(spacekit_checked_bitmap_set_range(m, 100, 40, &changed)); /* all clear: flip_range */
    CHECK(changed == 40);
    OK(spacekit_checked_bitmap_set_range(m, 120, 80, &changed)); /* partly set: splice */
    CHECK(changed == 60);
    OK(spacekit_checked_bitmap_clear_range(m, 130, 1, &changed));
    CHECK(changed == 1);
    OK(spacekit_checked_bitmap_flip_range(m, 0, 8, NULL));
    OK(spacekit_checked_bitmap_test(m, 130, &bit));
    CHECK(!bit);
    OK(spacekit_checked_bitmap_test(m, 131, &bit));
    CHECK(bit);
    EXPECT(spacekit_checked_bitmap_test(m, 32768, &bit), SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_checked_bitmap_test(m, 0, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_checked_bitmap_set_range(m, 32760, 9, NULL), SPACEKIT_ERROR_OUT_OF_RANGE);
    OK(spacekit_checked_bitmap_test(m, 32767, &bit));
    CHECK(!bit); /* refused: nothing set */
    EXPECT(spacekit_checked_bitmap_clear_range(m, SIZE_MAX, 2, NULL),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_checked_bitmap_flip_range(NULL, 0, 1, NULL), SPACEKIT_ERROR_NULL_POINTER);

    OK(spacekit_checked_bitmap_verify(m, &ok));
    CHECK(ok);
    EXPECT(spacekit_checked_bitmap_verify(m, NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_checked_bitmap_store_bytes(m, back, sizeof back));
    OK(spacekit_checked_bitmap_checksum(m, &c, NULL));
    CHECK(c == raw(seed, back, sizeof back));
    CHECK(back[0] == 0xff && back[12] == 0xf0);
    EXPECT(spacekit_checked_bitmap_store_bytes(m, back, 100), SPACEKIT_ERROR_LENGTH_MISMATCH);
    EXPECT(spacekit_checked_bitmap_store_bytes(m, NULL, sizeof back),
           SPACEKIT_ERROR_NULL_POINTER);

    /* searches: a scan without an index, O(log n) with one, same answers */
    OK(spacekit_checked_bitmap_first_fit(m, 64, 64, 32769 % 64, 0, &s));
    CHECK(s == 255 && (s + 32769) % 64 == 0);
    EXPECT(spacekit_checked_bitmap_build_index(m, 40000), SPACEKIT_ERROR_OUT_OF_RANGE);
    OK(spacekit_checked_bitmap_build_index(m, 32768));
    OK(spacekit_checked_bitmap_first_fit(m, 64, 64, 32769 % 64, 0, &len));
    CHECK(len == s);
    OK(spacekit_checked_bitmap_set_range(m, s, 64, NULL));
    OK(spacekit_checked_bitmap_largest_free(m, &s, &len));
    CHECK(s == 319 && s + len == 32768);
    OK(spacekit_checked_bitmap_best_fit(m, 8, 1, 0, &s));
    /* free runs: 8..99 (class 64), 130 (too short), 200..254 (class 32) */
    CHECK(s == 200);
    EXPECT(spacekit_checked_bitmap_first_fit(m, 0, 1, 0, 0, &s), SPACEKIT_ERROR_ZERO_LENGTH);
    EXPECT(spacekit_checked_bitmap_first_fit(m, 1, 3, 0, 0, &s), SPACEKIT_ERROR_BAD_ALIGNMENT);
    EXPECT(spacekit_checked_bitmap_first_fit(m, 1, 1, 0, 40000, &s),
           SPACEKIT_ERROR_OUT_OF_RANGE);
    EXPECT(spacekit_checked_bitmap_first_fit(m, 1, 1, 0, 0, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_checked_bitmap_best_fit(m, 0, 1, 0, &s), SPACEKIT_ERROR_ZERO_LENGTH);
    EXPECT(spacekit_checked_bitmap_best_fit(m, 1, 0, 0, &s), SPACEKIT_ERROR_BAD_ALIGNMENT);
    EXPECT(spacekit_checked_bitmap_largest_free(m, &s, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_checked_bitmap_build_index(NULL, 1), SPACEKIT_ERROR_NULL_POINTER);

    /* full */
    OK(spacekit_checked_bitmap_set_range(m, 0, 32768, NULL));
    EXPECT(spacekit_checked_bitmap_first_fit(m, 1, 1, 0, 0, &s), SPACEKIT_NOT_FOUND);
    EXPECT(spacekit_checked_bitmap_best_fit(m, 1, 1, 0, &s), SPACEKIT_NOT_FOUND);
    EXPECT(spacekit_checked_bitmap_largest_free(m, &s, &len), SPACEKIT_NOT_FOUND);
    OK(spacekit_checked_bitmap_verify(m, &ok));
    CHECK(ok);

    OK(spacekit_checked_bitmap_free(m));
    OK(spacekit_checked_bitmap_free(NULL));
}

int main(void) {
    test_crc();
    test_checked_bitmap();
    printf("crc: ok\n");
    return 0;
}
