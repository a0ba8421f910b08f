/* The C suites' check: counts a pass or prints the failed condition with the library's last
 * error. Each suite defines `static int passed, failed;` before including it. */
#ifndef VELVET_ROPE_TEST_CHECK_H
#define VELVET_ROPE_TEST_CHECK_H

#include <stdio.h>

#include "velvet_rope.h"

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            passed++;                                                                \
        } else {                                                                     \
            failed++;                                                                \
            char msg_[512];                                                          \
            vr_last_error(msg_, sizeof msg_);                                        \
            fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, \
                    #cond, msg_);                                                    \
        }                                                                            \
    } while (0)

/* The suites' clock: milliseconds since the Unix epoch, on a minute boundary. */
#define T0 1800000000000ULL

#endif
