/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The fixed limits of what a request may carry (cmwqd(8), LIMITS, "Fixed
 * limits"), shared by cmwqd, which enforces them, and cmwqctl, which judges
 * a command line by them before it connects (a value outside its
 * documented range is a usage error, cmwqctl(1), EXIT STATUS).
 */

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* A workqueue's name: 1-64 characters of A-Z a-z 0-9 _ - . : @ (the public
 * header's CMWQ_NAME_MAX). */
#define CMWQ_WORKQUEUE_NAME_MAX 64u
/* A work key: 1-256 bytes. */
#define CMWQ_WORK_KEY_MAX 256u
/* An item's delay, and its timeout: at most 30 days. */
#define CMWQ_DELAY_MAX_USEC (UINT64_C(30) * 24 * 3600 * 1000000)
/* How long a freeze request waits for running items: the same. */
#define CMWQ_FREEZE_TIMEOUT_MAX_USEC CMWQ_DELAY_MAX_USEC

static inline bool cmwq_workqueue_name_valid(const char *name) {
        size_t n = strlen(name);

        if (n == 0 || n > CMWQ_WORKQUEUE_NAME_MAX)
                return false;
        for (const char *p = name; *p; p++)
                if (!isalnum((unsigned char) *p) && !strchr("_-.:@", *p))
                        return false;
        return true;
}
