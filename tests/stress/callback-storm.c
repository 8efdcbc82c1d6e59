/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * callback-storm SOCKET: a reproducer, not a test.  Two processes hammer
 * cmwqd with callback work at once: one with 16 threads that queue
 * (bound, on CPU 0 or 1), cancel and flush 64 work items at random, the
 * other with 8 threads that do the same with delayed work.  Each ends in a
 * flush of its queue.  It exits 0 once both processes are done, whatever
 * the time; tests/stress/storm.sh runs it again and again and reports the
 * runs that took over 5 s (normally about 1 s): callback work that stalled
 * (tests/stress/README.md).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmwq/cmwq.h>

#define BOUND_THREADS 16
#define BOUND_ITEMS 64
#define BOUND_ROUNDS 20000
#define DELAYED_THREADS 8
#define DELAYED_ITEMS 16
#define DELAYED_ROUNDS 5000

static struct cmwq_workqueue *wq;

struct bound_item {
        struct cmwq_work work;
        atomic_int runs;
};

static struct bound_item bound_items[BOUND_ITEMS];

static void bound_fn(struct cmwq_work *w) {
        struct bound_item *it = cmwq_container_of(w, struct bound_item, work);

        atomic_fetch_add(&it->runs, 1);
        for (volatile int i = 0; i < 200; i++)
                ;
}

static void *bound_thread(void *arg) {
        unsigned seed = (unsigned) (uintptr_t) arg;

        for (int i = 0; i < BOUND_ROUNDS; i++) {
                struct cmwq_work *w = &bound_items[rand_r(&seed) % BOUND_ITEMS].work;
                int op = rand_r(&seed) % 10;

                if (op < 7)
                        (void) cmwq_queue_work_on(rand_r(&seed) % 2, wq, w);
                else if (op < 9)
                        (void) cmwq_cancel_work(w);
                else
                        (void) cmwq_flush_work(w);
        }
        return NULL;
}

struct delayed_item {
        struct cmwq_delayed_work dw;
};

static struct delayed_item delayed_items[DELAYED_ITEMS];

static void delayed_fn(struct cmwq_work *w) {
        (void) w;
        if (rand() % 50 == 0)
                usleep(500);
}

static void *delayed_thread(void *arg) {
        unsigned seed = (unsigned) (uintptr_t) arg;

        for (int i = 0; i < DELAYED_ROUNDS; i++) {
                struct cmwq_delayed_work *dw = &delayed_items[rand_r(&seed) % DELAYED_ITEMS].dw;

                switch (rand_r(&seed) % 12) {
                case 0: case 1: case 2:
                        (void) cmwq_queue_delayed_work(wq, dw, rand_r(&seed) % 3000);
                        break;
                case 3: case 4:
                        (void) cmwq_mod_delayed_work(wq, dw, rand_r(&seed) % 3000);
                        break;
                case 5:
                        (void) cmwq_queue_work(wq, &dw->work);
                        break;
                case 6:
                        (void) cmwq_cancel_delayed_work(dw);
                        break;
                case 7:
                        (void) cmwq_cancel_delayed_work_sync(dw);
                        break;
                case 8:
                        (void) cmwq_flush_delayed_work(dw);
                        break;
                case 9:
                        (void) cmwq_flush_work(&dw->work);
                        break;
                case 10:
                        (void) cmwq_queue_work_on(rand_r(&seed) % 2, wq, &dw->work);
                        break;
                default:
                        (void) cmwq_delayed_work_pending(dw);
                        break;
                }
        }
        return NULL;
}

/* One process's part: 0 or 1 (it could not connect or make its queue). */
static int storm(const char *socket, bool delayed) {
        pthread_t threads[BOUND_THREADS];
        int n = delayed ? DELAYED_THREADS : BOUND_THREADS;
        struct cmwq *c = cmwq_connect(socket);

        if (!c) {
                fprintf(stderr, "callback-storm: connect: %s\n", cmwq_last_error());
                return 1;
        }
        wq = cmwq_alloc_workqueue(c, delayed ? "storm-delayed" : "storm-bound", 0, 0);
        if (!wq) {
                fprintf(stderr, "callback-storm: alloc: %s\n", cmwq_last_error());
                return 1;
        }
        for (int i = 0; i < BOUND_ITEMS; i++)
                CMWQ_WORK_INIT(&bound_items[i].work, bound_fn);
        for (int i = 0; i < DELAYED_ITEMS; i++)
                CMWQ_DELAYED_WORK_INIT(&delayed_items[i].dw, delayed_fn);
        for (int i = 0; i < n; i++)
                pthread_create(&threads[i], NULL, delayed ? delayed_thread : bound_thread, (void *) (uintptr_t) (i + 1));
        for (int i = 0; i < n; i++)
                pthread_join(threads[i], NULL);
        if (delayed)
                for (int i = 0; i < DELAYED_ITEMS; i++)
                        (void) cmwq_flush_delayed_work(&delayed_items[i].dw);
        (void) cmwq_flush_workqueue(wq);
        (void) cmwq_destroy_workqueue(wq);
        cmwq_disconnect(c);
        return 0;
}

int main(int argc, char **argv) {
        int status, failed = 0;
        pid_t kid;

        if (argc != 2) {
                fprintf(stderr, "usage: callback-storm SOCKET\n");
                return 2;
        }
        kid = fork();
        if (kid < 0)
                return 1;
        if (kid == 0)
                _exit(storm(argv[1], true));
        failed |= storm(argv[1], false);
        if (waitpid(kid, &status, 0) != kid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                failed = 1;
        return failed;
}
