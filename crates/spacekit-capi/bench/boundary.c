/* The C half of the boundary benchmark (bench/run drives it): the same
 * loops as bench/boundary.rs, through libspacekit's C ABI. Prints
 * "check <name> <hex>" (results, compared with Rust's) and
 * "ns <name> <ns per call>" (the fastest of 21 timed loops). */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "spacekit.h"

#define BLOCK_BYTES 32768u
#define NBITS ((size_t)BLOCK_BYTES * 8)
#define ROUNDS 21

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t words[NBITS / 64];

static uint64_t run_flip(uint64_t n) {
    uint32_t crc = 0x5EED;
    uint64_t i;
    for (i = 0; i < n; i++) {
        uint64_t first = i * 4093 % ((uint64_t)BLOCK_BYTES * 8 - 64);
        if (spacekit_crc32c_flip_range(crc, BLOCK_BYTES, first, 64, &crc) != SPACEKIT_OK)
            abort();
    }
    return crc;
}

static uint64_t run_area(uint64_t n) {
    uint64_t sum = 0, i;
    for (i = 0; i < n; i++) {
        size_t start = (size_t)(i * 7919 % NBITS), at = 0;
        spacekit_status st = spacekit_bitmap_find_clear_area(words, NBITS, start, 16, 7, 0, &at);
        if (st == SPACEKIT_NOT_FOUND)
            at = NBITS;
        else if (st != SPACEKIT_OK)
            abort();
        sum += at;
    }
    return sum;
}

static void bench(const char *name, uint64_t iters, uint64_t (*f)(uint64_t)) {
    double ns[ROUNDS];
    uint64_t check = 0;
    int r;
    for (r = 0; r < ROUNDS; r++) {
        double t = now_ns();
        check = f(iters);
        ns[r] = (now_ns() - t) / (double)iters;
    }
    qsort(ns, ROUNDS, sizeof ns[0], cmp_double);
    printf("check %s %llx\n", name, (unsigned long long)check);
    printf("ns %s %.2f\n", name, ns[0]); /* the fastest loop */
}

int main(int argc, char **argv) {
    uint64_t iters = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000;
    size_t pos = 0;

    /* a half-full bitmap: alternating used and free runs of 1..64 bits */
    while (pos < NBITS) {
        size_t used = (size_t)(rng_next() % 64 + 1);
        size_t freed = (size_t)(rng_next() % 64 + 1);
        size_t len = pos + used > NBITS ? NBITS - pos : used;
        if (spacekit_bitmap_set_range(words, NBITS, pos, len) != SPACEKIT_OK)
            abort();
        pos += used + freed;
    }
    bench("flip_range", iters, run_flip);
    bench("find_clear_area", iters, run_area);
    return 0;
}
