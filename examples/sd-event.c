/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libcmwq-client under sd-event: a few callbacks and an exec item, waited
 * for through the loop.  Usage: sd-event [SOCKET] (default: as
 * cmwq_connect(NULL) finds cmwqd).  Exits 0 when everything completed as
 * expected.
 *
 *   cc sd-event.c $(pkg-config --cflags --libs libcmwq-client libsystemd)
 *
 * Two sources feed the loop: the connection's fd (cmwq_get_fd()), readable
 * when cmwq_process() has completions to deliver, and an eventfd that the
 * callbacks write once they are done: they run on the library's worker
 * threads, and sd-event is not thread-safe.
 */
#include <cmwq/cmwq.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#define N_JOBS 4

struct job {
        struct cmwq_work work;
        unsigned n;
        uint64_t sum;                   /* of 1..n, computed by the callback */
        int efd;
};

struct state {
        struct cmwq *c;
        unsigned jobs_done;
        int exec_ok;                    /* -1: not yet, 0: failed, 1: as expected */
};

static void job_fn(struct cmwq_work *w) {
        struct job *j = cmwq_container_of(w, struct job, work);

        for (uint64_t k = 1; k <= j->n; k++)
                j->sum += k;
        eventfd_write(j->efd, 1);       /* tell the loop, from this worker thread */
}

static void check_done(sd_event *e, struct state *st) {
        if (st->jobs_done == N_JOBS && st->exec_ok >= 0)
                sd_event_exit(e, st->exec_ok ? 0 : 1);
}

static void exec_done(struct cmwq *c, uint64_t id, int error, const struct cmwq_exec_result *r, void *userdata) {
        struct state *st = userdata;

        st->exec_ok = error == 0 && r->state == CMWQ_EXEC_FINISHED && r->exited && r->exit_status == 0 &&
                      strcmp(r->out, "hello from an exec item\n") == 0;
        printf("exec item %" PRIu64 ": %s", id, error == 0 ? r->out : "lost\n");
}

static int on_cmwq(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        struct state *st = userdata;

        if (cmwq_process(st->c) < 0) {
                fprintf(stderr, "lost cmwqd: %s\n", cmwq_last_error());
                return sd_event_exit(sd_event_source_get_event(s), 1);
        }
        check_done(sd_event_source_get_event(s), st);
        return 0;
}

static int on_jobs(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        struct state *st = userdata;
        eventfd_t n;

        if (eventfd_read(fd, &n) == 0)
                st->jobs_done += (unsigned) n;
        check_done(sd_event_source_get_event(s), st);
        return 0;
}

static int on_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        fprintf(stderr, "timed out waiting for the work\n");
        return sd_event_exit(sd_event_source_get_event(s), 1);
}

int main(int argc, char *argv[]) {
        struct state st = { .exec_ok = -1 };
        struct job jobs[N_JOBS];
        struct cmwq_workqueue *wq;
        sd_event *e = NULL;
        char name[CMWQ_NAME_MAX];
        uint64_t now;
        int efd, r;

        st.c = cmwq_connect(argc > 1 ? argv[1] : NULL);
        if (!st.c) {
                fprintf(stderr, "cmwq_connect: %s\n", cmwq_last_error());
                return 1;
        }
        /* A queue of this connection: cmwqd destroys it when we go. */
        snprintf(name, sizeof(name), "example-sd-event-%d", (int) getpid());
        wq = cmwq_alloc_workqueue(st.c, name, CMWQ_WQ_UNBOUND, 0);
        if (!wq) {
                fprintf(stderr, "cmwq_alloc_workqueue: %s\n", cmwq_last_error());
                return 1;
        }
        efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (efd < 0 || sd_event_default(&e) < 0)
                return 1;
        if (sd_event_add_io(e, NULL, cmwq_get_fd(st.c), EPOLLIN, on_cmwq, &st) < 0 ||
            sd_event_add_io(e, NULL, efd, EPOLLIN, on_jobs, &st) < 0 || sd_event_now(e, CLOCK_MONOTONIC, &now) < 0 ||
            sd_event_add_time(e, NULL, CLOCK_MONOTONIC, now + 60 * 1000000ULL, 0, on_timeout, NULL) < 0)
                return 1;

        for (unsigned k = 0; k < N_JOBS; k++) {
                jobs[k] = (struct job) { .n = 1000 * (k + 1), .efd = efd };
                CMWQ_WORK_INIT(&jobs[k].work, job_fn);
                cmwq_queue_work(wq, &jobs[k].work);
        }
        const char *const echo[] = { "/bin/echo", "hello from an exec item", NULL };
        if (cmwq_exec_async(wq, &(struct cmwq_exec_args) { .argv = echo }, exec_done, &st, NULL) < 0) {
                fprintf(stderr, "cmwq_exec_async: %s\n", cmwq_last_error());
                return 1;
        }

        r = sd_event_loop(e);
        cmwq_disconnect(st.c);  /* waits for running callbacks: before we read them */
        for (unsigned k = 0; k < N_JOBS; k++) {
                uint64_t want = (uint64_t) jobs[k].n * (jobs[k].n + 1) / 2;

                printf("callback %u: sum 1..%u = %" PRIu64 "\n", k, jobs[k].n, jobs[k].sum);
                if (r == 0 && jobs[k].sum != want)
                        r = 1;
        }
        sd_event_unref(e);
        close(efd);
        return r == 0 ? 0 : 1;
}
