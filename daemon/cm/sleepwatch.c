/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * Blocking detection, see cm/sleepwatch.h.
 *
 * This file is the detector's common part: its life, the targets (watching,
 * freeing, their CPU time) and the reports of their transitions.  The two
 * ways of seeing a task block are files of their own, sharing
 * cm/sleepwatch-internal.h: sleepwatch-perf.c (perf switch records, the
 * default, with its measurements) and sleepwatch-proc.c (sampling /proc,
 * the fallback).
 */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/log.h"
#include "cm/sleepwatch-internal.h"
#include "util.h"

static const char *const mode_table[] = {
        [SLEEPWATCH_PERF] = "perf",
        [SLEEPWATCH_PROC] = "proc",
};

int sleepwatch_mode_from_string(const char *s, enum sleepwatch_mode *ret) {
        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(mode_table); i++)
                if (strcmp(s, mode_table[i]) == 0) {
                        *ret = (enum sleepwatch_mode) i;
                        return 0;
                }
        return -EINVAL;
}

const char *sleepwatch_mode_to_string(enum sleepwatch_mode mode) {
        if ((size_t) mode >= ELEMENTSOF(mode_table))
                return NULL;
        return mode_table[mode];
}

enum sleepwatch_mode sleepwatch_get_mode(const struct sleepwatch *sw) {
        return sw->mode;
}

bool sleepwatch_has_sentinels(const struct sleepwatch *sw) {
        return sw->sentinel;
}

bool sleepwatch_target_is_running(const struct sleepwatch_target *t) {
        return t->running;
}

void sleepwatch_set_batch_hook(struct sleepwatch *sw, sleepwatch_batch_fn fn, void *userdata) {
        sw->batch = fn;
        sw->batch_userdata = userdata;
}

bool sleepwatch_target_is_perf(const struct sleepwatch_target *t) {
        return t->mode == SLEEPWATCH_PERF;
}

void sleepwatch_target_assume_running(struct sleepwatch_target *t) {
        uint64_t now = now_nsec();

        if (!t)
                return;
        t->running = true;
        t->sampled_running = true;
        t->wait_end = NULL;
        /* As a resync does: records older than now are ignored from here on,
         * so a switch-out from before this moment, read late, cannot say
         * the target blocked. */
        for (size_t i = 0; i < t->n_tasks; i++)
                if (t->tasks[i].state != SW_TASK_GONE) {
                        t->tasks[i].state = SW_TASK_RUNNING;
                        t->tasks[i].time = now;
                }
}

void sleepwatch_target_waking(struct sleepwatch_target *t, sleepwatch_wait_end_fn fn) {
        /* /proc shows a woken task runnable: the sampler needs no word. */
        if (t && t->mode == SLEEPWATCH_PERF && t->only_tid > 0)
                t->wait_end = fn;
}

uint64_t sleepwatch_target_cpu_usec(struct sleepwatch_target *t) {
        uint64_t raw, v;

        if (!t)
                return UINT64_MAX;
        if (t->oncpu_since) {
                uint64_t ns = t->oncpu_ns, since = 0, now;

                /* On a CPU since its latest switch-in, unless a switch-out
                 * not read yet says other: then this counts a little more
                 * than it ran, until that record is read. */
                for (size_t i = 0; i < t->n_fds; i++)
                        if (t->oncpu_since[i] > since)
                                since = t->oncpu_since[i];
                if (since && (now = now_nsec()) > since)
                        ns += now - since;
                v = ns / 1000;
        } else {
                if (t->clock_fd >= 0) {
                        uint64_t ns;

                        if (read(t->clock_fd, &ns, sizeof(ns)) == (ssize_t) sizeof(ns))
                                return ns / 1000;
                }
                if (!t->exec_seen)
                        return 0;
                if (t->cpu_base_usec == UINT64_MAX || sleepwatch_proc_raw_cpu_usec(t, &raw) < 0)
                        return UINT64_MAX;
                v = raw > t->cpu_base_usec ? raw - t->cpu_base_usec : 0;
        }
        /* Threads that exited take their time out of a /proc sum, and an
         * estimate from the records may have run ahead: never report less
         * than before. */
        if (v < t->cpu_last_usec)
                v = t->cpu_last_usec;
        t->cpu_last_usec = v;
        return v;
}

/* Evaluates dirty targets and reports transitions.  A callback may free any
 * target or watch new ones: each target leaves the dirty list before its
 * callback runs, and sleepwatch_target_free() takes a target off it. */
void sleepwatch_dispatch(struct sleepwatch *sw) {
        if (sw->batch)
                sw->batch(sw->batch_userdata);
        while (!list_empty(&sw->dirty)) {
                struct sleepwatch_target *t = list_first_entry(&sw->dirty, struct sleepwatch_target, dirty_link);
                bool running;

                list_del_init(&t->dirty_link);
                running = t->mode == SLEEPWATCH_PERF ? sleepwatch_perf_evaluate(t) : t->sampled_running;
                if (running == t->running)
                        continue;
                t->running = running;
                t->cb(t, running, t->userdata);
        }
}

void sleepwatch_target_recheck(struct sleepwatch_target *t) {
        struct sleepwatch *sw;

        /* The proc sampler looks every millisecond anyway. */
        if (!t || t->mode != SLEEPWATCH_PERF || !t->sw)
                return;
        sw = t->sw;
        sleepwatch_catch_up(sw);
        sleepwatch_perf_recheck(t);
        if (!sw->reading)
                sleepwatch_dispatch(sw);
}

void sleepwatch_catch_up(struct sleepwatch *sw) {
        if (sw && sw->mode == SLEEPWATCH_PERF)
                sleepwatch_perf_catch_up(sw);
}

/* ---- the detector -------------------------------------------------------- */

static void sleepwatch_freep(struct sleepwatch **sw) {
        sleepwatch_free(*sw);
}

int sleepwatch_new(struct event_base *base, enum sleepwatch_mode mode, unsigned flags, struct sleepwatch **ret) {
        _cleanup_(sleepwatch_freep) struct sleepwatch *sw = NULL;
        int r;

        if (!base || !ret || !sleepwatch_mode_to_string(mode))
                return -EINVAL;

        sw = calloc(1, sizeof(*sw));
        if (!sw)
                return -ENOMEM;
        sw->base = base;
        sw->mode = mode;
        sw->flags = flags;
        list_init(&sw->perf_targets);
        list_init(&sw->proc_targets);
        list_init(&sw->dirty);

        sw->proc_timer = event_new(base, -1, EV_PERSIST, sleepwatch_proc_timer_cb, sw);
        if (!sw->proc_timer)
                return -ENOMEM;

        if (mode == SLEEPWATCH_PERF) {
                r = sleepwatch_perf_setup(sw);
                if (r < 0)
                        return r;
        }

        *ret = TAKE_PTR(sw);
        return 0;
}

static void target_release(struct sleepwatch_target *t);

/* Targets still watched are detached: they stop reporting and keep only
 * their last state; sleepwatch_target_free() still frees them. */
struct sleepwatch *sleepwatch_free(struct sleepwatch *sw) {
        struct sleepwatch_target *t, *n;

        if (!sw)
                return NULL;

        list_for_each_entry_safe(t, n, &sw->perf_targets, link)
                target_release(t);
        list_for_each_entry_safe(t, n, &sw->proc_targets, link)
                target_release(t);
        if (sw->proc_timer)
                event_free(sw->proc_timer);
        sleepwatch_perf_free_rings(sw);
        free(sw);
        return NULL;
}

/* Gives back everything the target holds in the kernel and in @sw; the
 * target keeps its last state. */
static void target_release(struct sleepwatch_target *t) {
        struct sleepwatch *sw = t->sw;

        if (!sw)
                return;

        list_del_init(&t->dirty_link);
        list_del_init(&t->link);
        if (sw->last_hit == t)
                sw->last_hit = NULL;
        sleepwatch_perf_close(t);
        if (t->task_dir) {
                closedir(t->task_dir);
                t->task_dir = NULL;
        }
        t->cgroup_fd = safe_close(t->cgroup_fd);
        if (t->mode == SLEEPWATCH_PROC && list_empty(&sw->proc_targets))
                event_del(sw->proc_timer);
        t->sw = NULL;
}

struct sleepwatch_target *sleepwatch_target_free(struct sleepwatch_target *t) {
        if (!t)
                return NULL;
        target_release(t);
        free(t);
        return NULL;
}

static void sleepwatch_target_freep(struct sleepwatch_target **t) {
        sleepwatch_target_free(*t);
}

static int sleepwatch_watch_full(struct sleepwatch *sw, pid_t pid, pid_t tid, sleepwatch_cb cb, void *userdata,
                                 struct sleepwatch_target **ret);

int sleepwatch_watch(struct sleepwatch *sw, pid_t pid, sleepwatch_cb cb, void *userdata,
                     struct sleepwatch_target **ret) {
        return sleepwatch_watch_full(sw, pid, 0, cb, userdata, ret);
}

int sleepwatch_watch_thread(struct sleepwatch *sw, pid_t pid, pid_t tid, sleepwatch_cb cb, void *userdata,
                            struct sleepwatch_target **ret) {
        if (tid <= 0)
                return -EINVAL;
        return sleepwatch_watch_full(sw, pid, tid, cb, userdata, ret);
}

static int sleepwatch_watch_full(struct sleepwatch *sw, pid_t pid, pid_t tid, sleepwatch_cb cb, void *userdata,
                                 struct sleepwatch_target **ret) {
        _cleanup_(sleepwatch_target_freep) struct sleepwatch_target *t = NULL;
        int r;

        if (!sw || pid <= 0 || !cb || !ret)
                return -EINVAL;

        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->pid = pid;
        t->only_tid = tid;
        /* A running thread has long exec'd: watch it from now on. */
        t->exec_seen = tid > 0;
        t->cb = cb;
        t->userdata = userdata;
        t->running = true;
        t->mode = sw->mode;
        t->clock_fd = -1;
        t->cgroup_fd = -1;
        list_init(&t->link);
        list_init(&t->dirty_link);

        /* Linked to @sw only once complete; until then freeing @t must not
         * touch @sw's lists. */
        t->sw = sw;
        if (t->mode == SLEEPWATCH_PERF) {
                r = sleepwatch_perf_watch(t);
                if (r == -ENOMEM)
                        return r;
                if (r < 0) {
                        log_debug_errno(r, "sleepwatch: perf refused for PID %d, sampling /proc instead: %m",
                                        (int) pid);
                        sleepwatch_perf_close(t);
                        t->mode = SLEEPWATCH_PROC;
                }
        }
        if (t->mode == SLEEPWATCH_PROC) {
                r = sleepwatch_proc_watch(t);
                if (r < 0)
                        return r;
        }

        if (t->mode == SLEEPWATCH_PERF)
                list_add_tail(&t->link, &sw->perf_targets);
        else {
                if (list_empty(&sw->proc_targets)) {
                        struct timeval tv = timeval_from_usec(SLEEPWATCH_PROC_INTERVAL_USEC);

                        if (event_add(sw->proc_timer, &tv) < 0)
                                return -ENOMEM;
                }
                list_add_tail(&t->link, &sw->proc_targets);
        }

        *ret = TAKE_PTR(t);
        return 0;
}

void sleepwatch_target_exec_seen(struct sleepwatch_target *t) {
        /* perf targets need no word: their events are enabled on exec. */
        if (!t || t->exec_seen)
                return;
        t->exec_seen = true;
        if (t->clock_fd < 0 && sleepwatch_proc_raw_cpu_usec(t, &t->cpu_base_usec) < 0)
                t->cpu_base_usec = UINT64_MAX;
}

int sleepwatch_target_use_cgroup(struct sleepwatch_target *t, int cgroup_dir_fd) {
        int fd;

        if (!t || cgroup_dir_fd < 0 || t->only_tid > 0)
                return -EINVAL;
        if (t->exec_seen)
                return -EBUSY;
        fd = fcntl(cgroup_dir_fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        t->cgroup_fd = safe_close(t->cgroup_fd);
        t->cgroup_fd = fd;
        return 0;
}
