/* Assertions shared by the C tests: each failure names the file, line and
 * call, and exits 1. */
#ifndef SPACEKIT_TEST_CHECK_H
#define SPACEKIT_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "spacekit.h"

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                   \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define EXPECT(call, code)                                                    \
    do {                                                                      \
        spacekit_status st_ = (call);                                         \
        if (st_ != (code)) {                                                  \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %s\n",      \
                    __FILE__, __LINE__, #call, (int)st_,                      \
                    spacekit_strerror((int)st_), #code);                      \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define OK(call) EXPECT(call, SPACEKIT_OK)

#endif
