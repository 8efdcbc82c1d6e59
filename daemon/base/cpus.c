/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cmwqd's CPUs as it started, see base/cpus.h.
 */
#include <stdbool.h>

#include "base/cpus.h"

static cpu_set_t noted;
static bool noted_known, noted_tried;

void daemon_cpus_note(void) {
        if (noted_tried)
                return;
        noted_tried = true;
        noted_known = sched_getaffinity(0, sizeof(noted), &noted) == 0 && CPU_COUNT(&noted) > 0;
}

const cpu_set_t *daemon_cpus(void) {
        return noted_known ? &noted : NULL;
}

void daemon_cpus_restore(void) {
        if (noted_known)
                (void) sched_setaffinity(0, sizeof(noted), &noted);
}
