/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the libcmwq-client tests (test-client*.c) share. */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <cmwq/cmwq.h>

#include "harness.h"

/* cmwq_connect() to @d's socket; fails the test if it cannot. */
struct cmwq *connect_ok(const struct cmwqd *d);

int nr_cpus(void);

/* Waits (up to 60 s, else fails the test) for *@v to reach @at_least. */
void wait_until(atomic_int *v, int at_least);

/* Busy workers in all of @d's pools (cmwqctl --json pools). */
long pools_busy(const struct cmwqd *d);

/* A work item that waits at a gate, so that the test controls "running". */
struct gated_work {
        struct cmwq_work work;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool open;
        atomic_int started;
        atomic_int finished;
};

void gated_fn(struct cmwq_work *w);
void gate_init(struct gated_work *g);   /* closed, its work set to gated_fn */
void gate_open(struct gated_work *g);
