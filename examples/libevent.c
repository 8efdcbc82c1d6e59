/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libcmwq-client under libevent: a few callbacks and an exec item, waited
 * for through the loop.  Usage: libevent [SOCKET] (default: as
 * cmwq_connect(NULL) finds cmwqd).  Exits 0 when everything completed as
 * expected.
 *
 *   cc libevent.c $(pkg-config --cflags --libs libcmwq-client libevent)
 *
 * Two events feed the loop: the connection's fd (cmwq_get_fd()), readable
 * when cmwq_process() has completions to deliver, and an eventfd that the
 * callbacks write once they are done: they run on the library's worker
 * threads, and an event_base is not theirs to touch.
 */
#include <cmwq/cmwq.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
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
        struct event_base *base;
        unsigned jobs_done;
        int exec_ok;                    /* -1: not yet, 0: failed, 1: as expected */
        int status;                     /* the exit status */
};

static void job_fn(struct cmwq_work *w) {
        struct job *j = cmwq_container_of(w, struct job, work);

        for (uint64_t k = 1; k <= j->n; k++)
                j->sum += k;
        eventfd_write(j->efd, 1);       /* tell the loop, from this worker thread */
}

static void check_done(struct state *st) {
        if (st->jobs_done == N_JOBS && st->exec_ok >= 0) {
                st->status = st->exec_ok ? 0 : 1;
                event_base_loopbreak(st->base);
        }
}

static void exec_done(struct cmwq *c, uint64_t id, int error, const struct cmwq_exec_result *r, void *userdata) {
        struct state *st = userdata;

        st->exec_ok = error == 0 && r->state == CMWQ_EXEC_FINISHED && r->exited && r->exit_status == 0 &&
                      strcmp(r->out, "hello from an exec item\n") == 0;
        printf("exec item %" PRIu64 ": %s", id, error == 0 ? r->out : "lost\n");
}

static void on_cmwq(evutil_socket_t fd, short what, void *userdata) {
        struct state *st = userdata;

        if (cmwq_process(st->c) < 0) {
                fprintf(stderr, "lost cmwqd: %s\n", cmwq_last_error());
                event_base_loopbreak(st->base);
                return;
        }
        check_done(st);
}

static void on_jobs(evutil_socket_t fd, short what, void *userdata) {
        struct state *st = userdata;
        eventfd_t n;

        if (eventfd_read(fd, &n) == 0)
                st->jobs_done += (unsigned) n;
        check_done(st);
}

static void on_timeout(evutil_socket_t fd, short what, void *userdata) {
        struct state *st = userdata;

        fprintf(stderr, "timed out waiting for the work\n");
        event_base_loopbreak(st->base);
}

int main(int argc, char *argv[]) {
        struct state st = { .exec_ok = -1, .status = 1 };
        struct event *cmwq_ev, *jobs_ev, *timeout_ev;
        struct timeval timeout = { .tv_sec = 60 };
        struct job jobs[N_JOBS];
        struct cmwq_workqueue *wq;
        char name[CMWQ_NAME_MAX];
        int efd;

        st.c = cmwq_connect(argc > 1 ? argv[1] : NULL);
        if (!st.c) {
                fprintf(stderr, "cmwq_connect: %s\n", cmwq_last_error());
                return 1;
        }
        /* A queue of this connection: cmwqd destroys it when we go. */
        snprintf(name, sizeof(name), "example-libevent-%d", (int) getpid());
        wq = cmwq_alloc_workqueue(st.c, name, CMWQ_WQ_UNBOUND, 0);
        if (!wq) {
                fprintf(stderr, "cmwq_alloc_workqueue: %s\n", cmwq_last_error());
                return 1;
        }
        efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        st.base = event_base_new();
        if (efd < 0 || !st.base)
                return 1;
        cmwq_ev = event_new(st.base, cmwq_get_fd(st.c), EV_READ | EV_PERSIST, on_cmwq, &st);
        jobs_ev = event_new(st.base, efd, EV_READ | EV_PERSIST, on_jobs, &st);
        timeout_ev = evtimer_new(st.base, on_timeout, &st);
        if (!cmwq_ev || !jobs_ev || !timeout_ev || event_add(cmwq_ev, NULL) < 0 || event_add(jobs_ev, NULL) < 0 ||
            evtimer_add(timeout_ev, &timeout) < 0)
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

        event_base_dispatch(st.base);
        cmwq_disconnect(st.c);  /* waits for running callbacks: before we read them */
        for (unsigned k = 0; k < N_JOBS; k++) {
                uint64_t want = (uint64_t) jobs[k].n * (jobs[k].n + 1) / 2;

                printf("callback %u: sum 1..%u = %" PRIu64 "\n", k, jobs[k].n, jobs[k].sum);
                if (jobs[k].sum != want)
                        st.status = 1;
        }
        event_free(cmwq_ev);
        event_free(jobs_ev);
        event_free(timeout_ev);
        event_base_free(st.base);
        close(efd);
        return st.status;
}
