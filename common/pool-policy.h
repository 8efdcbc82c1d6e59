/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The kernel's worker pool policy (kernel/workqueue.c), defined once for
 * both kinds of pools that follow it: cmwqd's (daemon/cm/pool.c) and the
 * thread pools of a libcmwq-client process (client/lib/client-work.c).
 */

#include <stdbool.h>

#include "util.h"

/* Idle workers beyond a pool's first POOL_POLICY_IDLE_KEEP end after
 * POOL_POLICY_IDLE_TIMEOUT_USEC idle (the kernel's IDLE_WORKER_TIMEOUT), while
 * there are more than one per POOL_POLICY_IDLE_RATIO busy ones
 * (MAX_IDLE_WORKERS_RATIO). */
#define POOL_POLICY_IDLE_KEEP 2u
#define POOL_POLICY_IDLE_RATIO 4u
#define POOL_POLICY_IDLE_TIMEOUT_USEC (300 * USEC_PER_SEC)

/* A high-priority pool's workers run at the kernel's HIGHPRI_NICE_LEVEL. */
#define POOL_POLICY_HIGHPRI_NICE (-20)

/* The back-off after a worker could not be made: doubled from the first to
 * the last, then kept. */
#define POOL_POLICY_RETRY_MIN_MS 10u
#define POOL_POLICY_RETRY_MAX_MS 1000u

/* Too many idle workers for what the pool runs (the kernel's
 * too_many_workers()). */
static inline bool pool_policy_too_many_idle(unsigned nr_idle, unsigned nr_busy) {
        return nr_idle > POOL_POLICY_IDLE_KEEP && (nr_idle - POOL_POLICY_IDLE_KEEP) * POOL_POLICY_IDLE_RATIO >= nr_busy;
}
