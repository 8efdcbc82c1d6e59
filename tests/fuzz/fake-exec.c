/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A stand-in for daemon/exec/exec.c in the dispatch fuzzer, linked in place of it with
 * -Wl,--wrap: items "run" without a process, so that every input can submit,
 * run, block, finish, requeue, cancel and freeze items through the real core
 * and pools at the speed of a function call, and no input forks anything.
 *
 * What an item does is chosen by the basename of its program, so that the
 * fuzzer can find each behaviour from the seeds:
 *   hang      runs until killed (cancel, timeout-free freeze holders, drain)
 *   nofork    its process cannot be created: -EAGAIN, as a refused fork
 *             (mayday, retry), unless the queue's rescuer takes it
 *   sleeper   blocks (a concurrency-management wake-up), wakes up, then ends
 *   tempfail  exits 75: requeued with back-off
 *   false     exits 1
 *   anything else exits 0, echoing its stdin payload (cut at 64 bytes)
 * An item ends on the next turn of the event loop after it was released
 * (exec_go(); exec_start() is exec_prepare() and exec_go()).
 */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/exec.h"
#include "fake-exec.h"
#include "util.h"

struct exec_proc {
        struct event *ev;
        exec_done_cb done;
        sleepwatch_cb sleep_cb;
        void *userdata;
        bool hang;
        bool sleeper;
        unsigned turns;
        bool killed;
        int exit_status;
        uint64_t started_usec;          /* 0: prepared, not released */
        char *out;
        size_t out_len;
};

static unsigned nr_procs;

unsigned fake_exec_nr_procs(void) {
        return nr_procs;
}

static void fake_proc_free(struct exec_proc *p) {
        if (p->ev)
                event_free(p->ev);
        free(p->out);
        free(p);
        nr_procs--;
}

static void fake_proc_end(evutil_socket_t fd, short what, void *userdata) {
        struct exec_proc *p = userdata;
        uint64_t now = now_usec(CLOCK_REALTIME);
        struct exec_result r = {
                .exit_status = p->killed ? 0 : p->exit_status,
                .signal = p->killed ? 9 : 0,
                .cpu_usec = 1,
                .started_usec = now,
                .finished_usec = now,
                .killed = p->killed,
                .out = TAKE_PTR(p->out),
                .out_len = p->out_len,
        };

        /* A sleeper blocks on its first turn, wakes up on the second and
         * ends on the third, as the sleep detector would report it. */
        if (p->sleeper && !p->killed && p->turns < 2) {
                p->sleep_cb(NULL, p->turns == 1, p->userdata);
                p->turns++;
                p->out = TAKE_PTR(r.out);
                event_active(p->ev, 0, 0);
                return;
        }
        p->done(p, &r, p->userdata);
        free(r.out);
        fake_proc_free(p);
}

/* exec_prepare(): the item's "process" exists and waits for exec_go(). */
int __wrap_exec_prepare(struct event_base *base, struct sleepwatch *sw, const struct exec_spec *spec,
                        exec_done_cb done, sleepwatch_cb sleep_cb, void *userdata, struct exec_proc **ret);
int __wrap_exec_prepare(struct event_base *base, struct sleepwatch *sw, const struct exec_spec *spec,
                        exec_done_cb done, sleepwatch_cb sleep_cb, void *userdata, struct exec_proc **ret) {
        const char *name = strrchr(spec->program, '/');
        struct exec_proc *p;

        name = name ? name + 1 : spec->program;
        if (strcmp(name, "nofork") == 0) {
                if (!spec->rescuer || !*spec->rescuer)
                        return -EAGAIN;
                free(*spec->rescuer);
                *spec->rescuer = NULL;
        }

        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        nr_procs++;
        p->done = done;
        p->sleep_cb = sleep_cb;
        p->userdata = userdata;
        p->hang = strcmp(name, "hang") == 0;
        p->sleeper = strcmp(name, "sleeper") == 0;
        p->exit_status = strcmp(name, "tempfail") == 0 ? 75 : strcmp(name, "false") == 0 ? 1 : 0;
        p->ev = event_new(base, -1, 0, fake_proc_end, p);
        if (spec->payload_len > 0) {
                p->out_len = spec->payload_len < 64 ? spec->payload_len : 64;
                p->out = malloc(p->out_len);
                if (p->out)
                        memcpy(p->out, spec->payload, p->out_len);
                else
                        p->out_len = 0;
        }
        if (!p->ev) {
                fake_proc_free(p);
                return -ENOMEM;
        }
        *ret = p;
        return 0;
}

int __wrap_exec_go(struct exec_proc *p);
int __wrap_exec_go(struct exec_proc *p) {
        if (p->started_usec)
                return -EINVAL;
        p->started_usec = now_usec(CLOCK_REALTIME);
        /* The exec callbacks come from the event loop, never from in here. */
        if (!p->hang)
                event_active(p->ev, 0, 0);
        return 0;
}

int __wrap_exec_start(struct event_base *base, struct sleepwatch *sw, const struct exec_spec *spec,
                      exec_done_cb done, sleepwatch_cb sleep_cb, void *userdata, struct exec_proc **ret);
int __wrap_exec_start(struct event_base *base, struct sleepwatch *sw, const struct exec_spec *spec,
                      exec_done_cb done, sleepwatch_cb sleep_cb, void *userdata, struct exec_proc **ret) {
        int r = __wrap_exec_prepare(base, sw, spec, done, sleep_cb, userdata, ret);

        return r < 0 ? r : __wrap_exec_go(*ret);
}

struct exec_proc *__wrap_exec_proc_discard(struct exec_proc *p);
struct exec_proc *__wrap_exec_proc_discard(struct exec_proc *p) {
        if (p)
                fake_proc_free(p);
        return NULL;
}

/* A fake "process" is made at once. */
int __wrap_exec_proc_ready(struct exec_proc *p);
int __wrap_exec_proc_ready(struct exec_proc *p) {
        return p ? 0 : -EINVAL;
}

uint64_t __wrap_exec_proc_started_usec(const struct exec_proc *p);
uint64_t __wrap_exec_proc_started_usec(const struct exec_proc *p) {
        return p ? p->started_usec : 0;
}

void __wrap_exec_proc_kill(struct exec_proc *p);
void __wrap_exec_proc_kill(struct exec_proc *p) {
        p->killed = true;
        event_active(p->ev, 0, 0);
}

struct exec_proc *__wrap_exec_proc_abandon(struct exec_proc *p);
struct exec_proc *__wrap_exec_proc_abandon(struct exec_proc *p) {
        if (p)
                fake_proc_free(p);
        return NULL;
}

pid_t __wrap_exec_proc_pid(const struct exec_proc *p);
pid_t __wrap_exec_proc_pid(const struct exec_proc *p) {
        return 1;
}

uint64_t __wrap_exec_proc_cpu_usec(const struct exec_proc *p);
uint64_t __wrap_exec_proc_cpu_usec(const struct exec_proc *p) {
        return 1;
}

/* Nothing in the daemon may fork under the fuzzer: should daemon/exec/exec.c gain an
 * entry point that daemon/core/item.c calls and that is not wrapped above, the real one
 * would fork an item per input.  Stop at once and say which. */
pid_t __wrap_fork(void);
pid_t __wrap_fork(void) {
        fprintf(stderr, "fake-exec: the daemon called fork(): a daemon/exec/exec.c entry point it uses is not "
                        "replaced by tests/fuzz/fake-exec.c (add it there and to FAKE_EXEC_WRAP)\n");
        abort();
}

struct exec_rescuer {
        int unused;
};

int __wrap_exec_rescuer_new(struct exec_rescuer **ret);
int __wrap_exec_rescuer_new(struct exec_rescuer **ret) {
        *ret = calloc(1, sizeof(**ret));
        return *ret ? 0 : -ENOMEM;
}

struct exec_rescuer *__wrap_exec_rescuer_free(struct exec_rescuer *r);
struct exec_rescuer *__wrap_exec_rescuer_free(struct exec_rescuer *r) {
        free(r);
        return NULL;
}

int __wrap_exec_spawner_start(void);
int __wrap_exec_spawner_start(void) {
        return 0;
}
