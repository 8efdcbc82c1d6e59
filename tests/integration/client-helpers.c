/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client-helpers.h"

struct cmwq *connect_ok(const struct cmwqd *d) {
        struct cmwq *c = cmwq_connect(d->socket);

        ck_assert_msg(c, "cmwq_connect(%s): %s", d->socket, cmwq_last_error());
        return c;
}

int nr_cpus(void) {
        return (int) sysconf(_SC_NPROCESSORS_ONLN);
}

void wait_until(atomic_int *v, int at_least) {
        for (int64_t deadline = mono_ns() + 60 * 1000000000LL; atomic_load(v) < at_least;) {
                ck_assert_msg(mono_ns() < deadline, "waited 60 s for %d (at %d)", at_least, atomic_load(v));
                usleep(1000);
        }
}

long pools_busy(const struct cmwqd *d) {
        char *out = CTL_OK(d, "--json", "pools");
        long n = json_sum(out, "busy");

        ck_assert_msg(strstr(out, "\"busy\":"), "pools: %s", out);
        free(out);
        return n;
}

void gated_fn(struct cmwq_work *w) {
        struct gated_work *g = cmwq_container_of(w, struct gated_work, work);

        atomic_fetch_add(&g->started, 1);
        pthread_mutex_lock(&g->lock);
        while (!g->open)
                pthread_cond_wait(&g->cond, &g->lock);
        pthread_mutex_unlock(&g->lock);
        atomic_fetch_add(&g->finished, 1);
}

void gate_init(struct gated_work *g) {
        memset(g, 0, sizeof(*g));
        pthread_mutex_init(&g->lock, NULL);
        pthread_cond_init(&g->cond, NULL);
        CMWQ_WORK_INIT(&g->work, gated_fn);
}

void gate_open(struct gated_work *g) {
        pthread_mutex_lock(&g->lock);
        g->open = true;
        pthread_cond_broadcast(&g->cond);
        pthread_mutex_unlock(&g->lock);
}
