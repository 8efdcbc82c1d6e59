/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libcmwq-client under GLib's main loop: a few callbacks and an exec item,
 * waited for through the loop.  Usage: glib [SOCKET] (default: as
 * cmwq_connect(NULL) finds cmwqd).  Exits 0 when everything completed as
 * expected.
 *
 *   cc glib.c $(pkg-config --cflags --libs libcmwq-client glib-2.0)
 *
 * The connection's fd (cmwq_get_fd()) is a g_unix_fd_add() source, readable
 * when cmwq_process() has completions to deliver.  The callbacks run on the
 * library's worker threads; each hands its result to the loop with
 * g_idle_add(), which may be called from any thread.
 */
#include <cmwq/cmwq.h>
#include <glib-unix.h>
#include <glib.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define N_JOBS 4

struct state {
        struct cmwq *c;
        GMainLoop *loop;
        unsigned jobs_done;
        int exec_ok;                    /* -1: not yet, 0: failed, 1: as expected */
        int status;                     /* the exit status */
};

struct job {
        struct cmwq_work work;
        unsigned n;
        uint64_t sum;                   /* of 1..n, computed by the callback */
        struct state *st;
};

static void check_done(struct state *st) {
        if (st->jobs_done == N_JOBS && st->exec_ok >= 0) {
                st->status = st->exec_ok ? 0 : 1;
                g_main_loop_quit(st->loop);
        }
}

/* In the loop's thread. */
static gboolean job_done(gpointer userdata) {
        struct job *j = userdata;

        j->st->jobs_done++;
        check_done(j->st);
        return G_SOURCE_REMOVE;
}

/* On a worker thread of the library. */
static void job_fn(struct cmwq_work *w) {
        struct job *j = cmwq_container_of(w, struct job, work);

        for (uint64_t k = 1; k <= j->n; k++)
                j->sum += k;
        g_idle_add(job_done, j);
}

static void exec_done(struct cmwq *c, uint64_t id, int error, const struct cmwq_exec_result *r, void *userdata) {
        struct state *st = userdata;

        st->exec_ok = error == 0 && r->state == CMWQ_EXEC_FINISHED && r->exited && r->exit_status == 0 &&
                      strcmp(r->out, "hello from an exec item\n") == 0;
        printf("exec item %" PRIu64 ": %s", id, error == 0 ? r->out : "lost\n");
}

static gboolean on_cmwq(gint fd, GIOCondition condition, gpointer userdata) {
        struct state *st = userdata;

        if (cmwq_process(st->c) < 0) {
                fprintf(stderr, "lost cmwqd: %s\n", cmwq_last_error());
                g_main_loop_quit(st->loop);
                return G_SOURCE_REMOVE;
        }
        check_done(st);
        return G_SOURCE_CONTINUE;
}

static gboolean on_timeout(gpointer userdata) {
        struct state *st = userdata;

        fprintf(stderr, "timed out waiting for the work\n");
        g_main_loop_quit(st->loop);
        return G_SOURCE_REMOVE;
}

int main(int argc, char *argv[]) {
        struct state st = { .exec_ok = -1, .status = 1 };
        struct job jobs[N_JOBS];
        struct cmwq_workqueue *wq;
        char name[CMWQ_NAME_MAX];

        st.c = cmwq_connect(argc > 1 ? argv[1] : NULL);
        if (!st.c) {
                fprintf(stderr, "cmwq_connect: %s\n", cmwq_last_error());
                return 1;
        }
        /* A queue of this connection: cmwqd destroys it when we go. */
        snprintf(name, sizeof(name), "example-glib-%d", (int) getpid());
        wq = cmwq_alloc_workqueue(st.c, name, CMWQ_WQ_UNBOUND, 0);
        if (!wq) {
                fprintf(stderr, "cmwq_alloc_workqueue: %s\n", cmwq_last_error());
                return 1;
        }
        st.loop = g_main_loop_new(NULL, FALSE);
        g_unix_fd_add(cmwq_get_fd(st.c), G_IO_IN, on_cmwq, &st);
        g_timeout_add_seconds(60, on_timeout, &st);

        for (unsigned k = 0; k < N_JOBS; k++) {
                jobs[k] = (struct job) { .n = 1000 * (k + 1), .st = &st };
                CMWQ_WORK_INIT(&jobs[k].work, job_fn);
                cmwq_queue_work(wq, &jobs[k].work);
        }
        const char *const echo[] = { "/bin/echo", "hello from an exec item", NULL };
        if (cmwq_exec_async(wq, &(struct cmwq_exec_args) { .argv = echo }, exec_done, &st, NULL) < 0) {
                fprintf(stderr, "cmwq_exec_async: %s\n", cmwq_last_error());
                return 1;
        }

        g_main_loop_run(st.loop);
        cmwq_disconnect(st.c);  /* waits for running callbacks: before we read them */
        for (unsigned k = 0; k < N_JOBS; k++) {
                uint64_t want = (uint64_t) jobs[k].n * (jobs[k].n + 1) / 2;

                printf("callback %u: sum 1..%u = %" PRIu64 "\n", k, jobs[k].n, jobs[k].sum);
                if (jobs[k].sum != want)
                        st.status = 1;
        }
        g_main_loop_unref(st.loop);
        return st.status;
}
