/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libcmwq-client callbacks against the thread pools a C service would link
 * instead: libuv's uv_queue_work() (its default pool) and GLib's GThreadPool
 * (max threads = CPUs).  The peers are compiled in when configure found them
 * (HAVE_LIBUV, HAVE_GLIB); "make bench" runs this from tests/bench/run.sh.
 *
 *   lib-bench empty SOCKET N   N empty items queued back to back from one
 *                              thread: items/s (first queueing to last start)
 *                              and queue-to-start latency, median and p99
 *   lib-bench mix SOCKET N     N items that each block 1 ms (nanosleep) and
 *                              then compute 100 us: makespan, threads that ran
 *                              items, and the most items blocked at once
 *
 * Prints figures, asserts no timing; exits non-zero only if something does
 * not work (an item that never runs).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmwq/cmwq.h>

#ifdef HAVE_LIBUV
#include <uv.h>
#endif
#ifdef HAVE_GLIB
#include <glib.h>
#endif

static int64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void spin_cpu_ns(int64_t ns) {
        struct timespec a, b;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        do
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        while ((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec) < ns);
}

/* ---- what every runner shares --------------------------------------------- */

enum kind { EMPTY, MIX };

struct item {
        int64_t queued_ns;
        int64_t latency_ns;
};

static enum kind kind;
static bool serial;             /* one item at a time: wait for each to start */
static struct item *items;
static size_t n_items;
static atomic_size_t n_done;
static atomic_llong last_done_ns;
static atomic_int threads_seen;
static atomic_int blocked_now, blocked_max;
static __thread int thread_counted;
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;

static void reset(void) {
        memset(items, 0, n_items * sizeof(*items));
        atomic_store(&n_done, 0);
        atomic_store(&last_done_ns, 0);
        atomic_store(&threads_seen, 0);
        atomic_store(&blocked_now, 0);
        atomic_store(&blocked_max, 0);
}

/* The body of every item, whatever runs it. */
static void item_run(struct item *it) {
        int64_t start = now_ns();

        if (serial) {
                it->latency_ns = start - it->queued_ns;
                atomic_fetch_add(&n_done, 1);
                atomic_store(&last_done_ns, start);
                return;
        }

        it->latency_ns = start - it->queued_ns;
        if (!thread_counted) {
                /* Per runner: a thread of one pool never runs another's items. */
                thread_counted = 1;
                atomic_fetch_add(&threads_seen, 1);
        }
        if (kind == MIX) {
                struct timespec ms = { 0, 1000000 };
                int b = atomic_fetch_add(&blocked_now, 1) + 1, m = atomic_load(&blocked_max);

                while (b > m && !atomic_compare_exchange_weak(&blocked_max, &m, b))
                        ;
                nanosleep(&ms, NULL);
                atomic_fetch_sub(&blocked_now, 1);
                spin_cpu_ns(100000);
        }
        if (atomic_fetch_add(&n_done, 1) + 1 == n_items) {
                atomic_store(&last_done_ns, now_ns());
                pthread_mutex_lock(&done_lock);
                pthread_cond_broadcast(&done_cond);
                pthread_mutex_unlock(&done_lock);
        }
}

static int wait_all(int seconds) {
        struct timespec until;
        int r = 0;

        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += seconds;
        pthread_mutex_lock(&done_lock);
        while (atomic_load(&n_done) < n_items && r == 0)
                r = pthread_cond_timedwait(&done_cond, &done_lock, &until);
        pthread_mutex_unlock(&done_lock);
        return atomic_load(&n_done) == n_items ? 0 : -ETIMEDOUT;
}

/* In serial mode: waits (spinning briefly, then yielding) for item @i. */
static void wait_serial(size_t i) {
        for (unsigned k = 0; atomic_load(&n_done) <= i; k++)
                if (k > 1000)
                        sched_yield();
}

static int cmp_i64(const void *a, const void *b) {
        int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;

        return x < y ? -1 : x > y;
}

static void report(const char *name, int64_t first_ns) {
        int64_t *lat = malloc(n_items * sizeof(*lat));
        double secs = (atomic_load(&last_done_ns) - first_ns) / 1e9;

        if (!lat)
                abort();
        for (size_t i = 0; i < n_items; i++)
                lat[i] = items[i].latency_ns;
        qsort(lat, n_items, sizeof(*lat), cmp_i64);
        if (kind == EMPTY && serial)
                printf("  %-36s %12.0f %12.1f %12.1f %8s\n", name, n_items / secs, lat[n_items / 2] / 1e3,
                       lat[(n_items * 99) / 100] / 1e3, "");
        else if (kind == EMPTY)
                printf("  %-36s %12.0f %12.1f %12.1f %8d\n", name, n_items / secs, lat[n_items / 2] / 1e3,
                       lat[(n_items * 99) / 100] / 1e3, atomic_load(&threads_seen));
        else
                printf("  %-36s %12.3f %8d %12d %12.1f\n", name, secs, atomic_load(&threads_seen),
                       atomic_load(&blocked_max), lat[n_items / 2] / 1e3);
        fflush(stdout);
        free(lat);
}

/* ---- libcmwq-client ----------------------------------------------------- */

struct cmwq_item {
        struct cmwq_work work;
        struct item *it;
};

static void cmwq_fn(struct cmwq_work *w) {
        item_run(cmwq_container_of(w, struct cmwq_item, work)->it);
}

static void warm_fn(struct cmwq_work *w) {
        (void) w;
}

static int run_cmwq(const char *socket, enum cmwq_system_queue which, bool spread, const char *name) {
        struct cmwq *c = cmwq_connect(socket);
        struct cmwq_workqueue *wq;
        struct cmwq_item *w;
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        int64_t first;

        if (!c) {
                fprintf(stderr, "lib-bench: %s\n", cmwq_last_error());
                return -1;
        }
        wq = cmwq_system_workqueue(c, which);
        w = calloc(n_items, sizeof(*w));
        if (!w)
                abort();
        /* Warm up: the library starts its threads on first use. */
        for (long cpu = 0; cpu < ncpu; cpu++) {
                struct cmwq_work warm;

                CMWQ_WORK_INIT(&warm, warm_fn);
                cmwq_queue_work_on((int) cpu, wq, &warm);
                cmwq_flush_work(&warm);
        }
        reset();
        first = now_ns();
        for (size_t i = 0; i < n_items; i++) {
                w[i].it = &items[i];
                CMWQ_WORK_INIT(&w[i].work, cmwq_fn);
                items[i].queued_ns = now_ns();
                if (spread)
                        cmwq_queue_work_on((int) (i % (size_t) ncpu), wq, &w[i].work);
                else
                        cmwq_queue_work(wq, &w[i].work);
                if (serial)
                        wait_serial(i);
        }
        if (wait_all(300) < 0) {
                fprintf(stderr, "lib-bench: %s: only %zu of %zu items ran\n", name, atomic_load(&n_done), n_items);
                return -1;
        }
        report(name, first);
        cmwq_flush_workqueue(wq);
        cmwq_disconnect(c);
        free(w);
        return 0;
}

/* ---- libuv -------------------------------------------------------------- */

#ifdef HAVE_LIBUV
static void uv_work_fn(uv_work_t *req) {
        item_run(req->data);
}

static void uv_after_fn(uv_work_t *req, int status) {
        (void) req;
        (void) status;
}

static int run_libuv(void) {
        uv_loop_t loop;
        uv_work_t *reqs = calloc(n_items, sizeof(*reqs));
        int64_t first;

        if (!reqs || uv_loop_init(&loop) < 0)
                abort();
        reset();
        first = now_ns();
        for (size_t i = 0; i < n_items; i++) {
                reqs[i].data = &items[i];
                items[i].queued_ns = now_ns();
                uv_queue_work(&loop, &reqs[i], uv_work_fn, uv_after_fn);
                if (serial) {
                        wait_serial(i);
                        uv_run(&loop, UV_RUN_NOWAIT);
                }
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        if (wait_all(300) < 0)
                return -1;
        report("libuv uv_queue_work (default pool)", first);
        uv_loop_close(&loop);
        free(reqs);
        return 0;
}
#endif

/* ---- GLib ------------------------------------------------------------------ */

#ifdef HAVE_GLIB
static void glib_fn(gpointer data, gpointer user_data) {
        (void) user_data;
        item_run(data);
}

static int run_glib(void) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        GThreadPool *pool = g_thread_pool_new(glib_fn, NULL, (gint) ncpu, FALSE, NULL);
        char name[64];
        int64_t first;

        reset();
        first = now_ns();
        for (size_t i = 0; i < n_items; i++) {
                items[i].queued_ns = now_ns();
                g_thread_pool_push(pool, &items[i], NULL);
                if (serial)
                        wait_serial(i);
        }
        if (wait_all(300) < 0)
                return -1;
        snprintf(name, sizeof(name), "GLib GThreadPool (max %ld threads)", ncpu);
        report(name, first);
        g_thread_pool_free(pool, FALSE, TRUE);
        return 0;
}
#endif

int main(int argc, char **argv) {
        const char *socket;
        int r = 0;

        if (argc != 4 || (strcmp(argv[1], "empty") && strcmp(argv[1], "mix"))) {
                fprintf(stderr, "usage: lib-bench empty|mix SOCKET N\n");
                return 2;
        }
        kind = strcmp(argv[1], "empty") == 0 ? EMPTY : MIX;
        socket = argv[2];
        n_items = strtoul(argv[3], NULL, 10);
        if (n_items == 0)
                return 2;
        items = calloc(n_items, sizeof(*items));
        if (!items)
                return 1;

        for (int pass = 0; pass < (kind == EMPTY ? 2 : 1); pass++) {
        serial = pass == 1;
        if (kind == EMPTY && !serial)
                printf("  %zu items queued back to back from one thread (latency includes the wait behind earlier ones)\n"
                       "  %-36s %12s %12s %12s %8s\n", n_items, "", "items/s", "median us", "p99 us", "threads");
        else if (kind == EMPTY)
                printf("  the same items one at a time: queue, wait until it started, queue the next\n"
                       "  %-36s %12s %12s %12s\n", "", "items/s", "median us", "p99 us");
        else
                printf("  %-36s %12s %8s %12s %12s\n", "", "makespan s", "threads", "max blocked", "q->start us");

#ifdef HAVE_LIBUV
        r |= run_libuv();
#else
        printf("  %-36s (not built: configure found no libuv)\n", "libuv uv_queue_work");
#endif
#ifdef HAVE_GLIB
        r |= run_glib();
#else
        printf("  %-36s (not built: configure found no glib-2.0)\n", "GLib GThreadPool");
#endif
        if (kind == EMPTY) {
                r |= run_cmwq(socket, CMWQ_SYSTEM, false, "cmwq system (bound, this CPU)");
                r |= run_cmwq(socket, CMWQ_SYSTEM, true, "cmwq system (bound, every CPU)");
                r |= run_cmwq(socket, CMWQ_SYSTEM_UNBOUND, false, "cmwq system_unbound");
        } else {
                r |= run_cmwq(socket, CMWQ_SYSTEM, true, "cmwq system (bound, every CPU)");
                r |= run_cmwq(socket, CMWQ_SYSTEM_UNBOUND, false, "cmwq system_unbound");
        }
        }
        free(items);
        return r ? 1 : 0;
}
