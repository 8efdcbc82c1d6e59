/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The demo's C service (tests/demo.sh): callbacks run through libcmwq-client
 * on CPU 0, under cmwqd's concurrency management together with the exec
 * items the demo submits there.  Each callback logs its span as the probe
 * does ("TAG start NS CPU", "TAG end NS CPU"), so the demo draws them on the
 * same timeline.
 *
 *   demo-callbacks LOG PROBE BLOCKING SPINNING
 *
 * queues BLOCKING callbacks that sleep 300 ms, then SPINNING callbacks that
 * compute for 4 ms, each after an exec item "PROBE spin 4 LOG execN" that
 * computes as long, all on CPU 0 of a bound queue of its own; then waits for
 * all of them and exits.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmwq/cmwq.h>

#define DEMO_MAX 16

struct demo_work {
        struct cmwq_work work;
        char tag[16];
        bool blocks;
};

static const char *log_path;

static int64_t now_ns(clockid_t clock) {
        struct timespec ts;

        clock_gettime(clock, &ts);
        return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void log_line(const char *tag, const char *what) {
        char line[128];
        int fd, n;

        n = snprintf(line, sizeof(line), "%s %s %lld %d\n", tag, what, (long long) now_ns(CLOCK_MONOTONIC),
                     sched_getcpu());
        fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0 || write(fd, line, (size_t) n) != n) {
                perror(log_path);
                exit(2);
        }
        close(fd);
}

static void demo_fn(struct cmwq_work *w) {
        struct demo_work *d = cmwq_container_of(w, struct demo_work, work);

        log_line(d->tag, "start");
        if (d->blocks) {
                struct timespec t = { 0, 300 * 1000000L };

                nanosleep(&t, NULL);
        } else {
                int64_t until = now_ns(CLOCK_THREAD_CPUTIME_ID) + 4 * 1000000;

                while (now_ns(CLOCK_THREAD_CPUTIME_ID) < until)
                        ;
        }
        log_line(d->tag, "end");
}

int main(int argc, char **argv) {
        static struct demo_work works[DEMO_MAX];
        uint64_t exec_ids[DEMO_MAX];
        struct cmwq_workqueue *wq;
        struct cmwq *c;
        int blocking, spinning, r = 0;

        if (argc != 5 || (blocking = atoi(argv[3])) < 0 || (spinning = atoi(argv[4])) < 0 ||
            blocking + spinning > DEMO_MAX) {
                fprintf(stderr, "usage: %s LOG PROBE BLOCKING SPINNING (at most %d in all)\n", argv[0], DEMO_MAX);
                return 2;
        }
        log_path = argv[1];

        c = cmwq_connect(NULL);
        if (!c) {
                fprintf(stderr, "demo-callbacks: %s\n", cmwq_last_error());
                return 1;
        }
        wq = cmwq_alloc_workqueue(c, "demo-callbacks", 0, 0);
        if (!wq) {
                fprintf(stderr, "demo-callbacks: %s\n", cmwq_last_error());
                cmwq_disconnect(c);
                return 1;
        }
        for (int i = 0; i < blocking + spinning; i++) {
                struct demo_work *d = &works[i];

                d->blocks = i < blocking;
                if (!d->blocks) {
                        char tag[16];
                        const char *args[] = { argv[2], "spin", "4", log_path, tag, NULL };
                        struct cmwq_exec_args exec = { .argv = args, .pin_cpu = true, .cpu = 0 };

                        snprintf(tag, sizeof(tag), "exec%d", i - blocking + 1);
                        if (cmwq_exec(wq, &exec, &exec_ids[i]) < 0) {
                                fprintf(stderr, "demo-callbacks: %s\n", cmwq_last_error());
                                r = 1;
                                break;
                        }
                }
                snprintf(d->tag, sizeof(d->tag), d->blocks ? "cb-blk%d" : "cb-cpu%d",
                         d->blocks ? i + 1 : i - blocking + 1);
                CMWQ_WORK_INIT(&d->work, demo_fn);
                cmwq_queue_work_on(0, wq, &d->work);
        }
        for (int i = blocking; r == 0 && i < blocking + spinning; i++) {
                struct cmwq_exec_result *res = NULL;

                if (cmwq_exec_wait(c, exec_ids[i], &res) < 0) {
                        fprintf(stderr, "demo-callbacks: %s\n", cmwq_last_error());
                        r = 1;
                }
                cmwq_exec_result_free(res);
        }
        if (cmwq_flush_workqueue(wq) < 0 || cmwq_destroy_workqueue(wq) < 0) {
                fprintf(stderr, "demo-callbacks: %s\n", cmwq_last_error());
                r = 1;
        }
        cmwq_disconnect(c);
        return r;
}
