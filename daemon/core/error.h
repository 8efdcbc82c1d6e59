/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * How the core says why it refused: a negative errno and a human message.
 * The front ends turn the errno into the protocol's error at their edge
 * (core/errno-map.h) and pass the message on.
 */

struct core_error {
        int error;              /* negative errno, 0 when fine */
        char message[256];
        const char *limit;      /* -EDQUOT: the name of the limit (core/user-limits.h), else NULL */
};

/* Sets @e (may be NULL) and returns @error, for "return core_error_set(...)". */
int core_error_set(struct core_error *e, int error, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
