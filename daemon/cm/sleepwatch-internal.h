/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Inside the blocking detector: what its three files share.
 *
 * sleepwatch.c (targets, their reports and CPU time, the detector's life),
 * sleepwatch-perf.c (the perf detector) and sleepwatch-proc.c (the /proc
 * sampler) work on one struct sleepwatch and its targets, in the daemon's
 * loop: the structures below and the calls each part makes into another.
 * Only those three files include this header; the rest of the daemon knows
 * the detector through cm/sleepwatch.h.
 */

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "cm/sleepwatch.h"
#include "list.h"

/*
 * The proc sampler's period.  1 ms: sampling costs 4-5 us per thread of a
 * sampled process (rewinddir + getdents on /proc/PID/task, then
 * open/read/close of each thread's stat; measured), i.e. ~0.5% of a CPU per
 * sampled thread, while the delay with which a block is noticed -- the time
 * a CPU may idle with work pending -- stays below one scheduler tick
 * (4 ms at HZ=250).  2 ms would halve the cost and double that idle time;
 * much shorter would make the daemon a CPU load of its own.  This is the
 * fallback; perf is the fast path.
 */
#define SLEEPWATCH_PROC_INTERVAL_USEC 1000u

enum sleepwatch_task_state {
        SW_TASK_RUNNING,
        SW_TASK_BLOCKED,
        SW_TASK_GONE,
};

struct sleepwatch_task {
        pid_t tid;
        enum sleepwatch_task_state state;
        uint64_t time;          /* ns, CLOCK_MONOTONIC, of what set state */
        uint64_t gone_pass;     /* the pass that saw it exit */
};

struct sleepwatch_ring {
        struct sleepwatch *sw;
        int cpu;
        int fd;                 /* the anchor: on the daemon, never enabled */
        void *map;
        size_t map_size;
        char *data;
        uint64_t data_size;     /* a power of two */
        struct event *ev;
};

struct sleepwatch_target {
        struct sleepwatch *sw;  /* NULL once the sleepwatch is gone */
        pid_t pid;
        enum sleepwatch_mode mode;
        sleepwatch_cb cb;
        void *userdata;
        bool running;           /* as last reported */
        struct list_head link;          /* on sw->perf_targets or sw->proc_targets */
        struct list_head dirty_link;    /* on sw->dirty when it may have changed */

        /* perf */
        int *fds;               /* one per ring */
        uint64_t *ids;
        size_t n_fds;
        uint64_t id_min, id_max;
        struct sleepwatch_task *tasks;
        size_t n_tasks, n_tasks_allocated;

        int clock_fd;           /* task-clock counter, inherited like the events; -1: none */
        /* A thread target's CPU time, from its own switch records: the
         * on-CPU intervals between a switch-in and the next switch-out on
         * the same CPU (ring), so no read() of a counter, which costs a
         * system call and, while the thread runs on another CPU, an IPI
         * there.  Per ring, since the rings are read in no time order, but
         * each ring holds one CPU's records in order. */
        uint64_t *oncpu_since;  /* per ring: its switch-in there not yet followed by a switch-out, 0: none;
                                 * NULL: not timed so (not a thread, or records were lost) */
        uint64_t oncpu_ns;      /* the intervals closed so far */
        /* sleepwatch_target_waking(): a thread target's blocking switch-out
         * stamped before this says its wait ended is that wait; NULL: none. */
        sleepwatch_wait_end_fn wait_end;

        /* proc */
        DIR *task_dir;          /* /proc/PID/task, pins the process */
        int cgroup_fd;          /* the item's cgroup directory: its tasks are the target's; -1: none */
        uint64_t cpu_base_usec; /* proc_cpu_usec() at execve() */
        uint64_t cpu_last_usec; /* highest CPU time reported (no going back) */
        pid_t only_tid;         /* a thread target: sample this thread alone */
        bool sampled_running;
        bool exec_seen;         /* sampled only from its execve() on */
};

struct sleepwatch {
        struct event_base *base;
        enum sleepwatch_mode mode;
        unsigned flags;                 /* SLEEPWATCH_SENTINELS */

        struct sleepwatch_ring *rings;
        size_t n_rings;
        uint64_t pass;
        bool need_resync;
        struct sleepwatch_target *last_hit;

        struct list_head perf_targets;  /* in the order watched, so by id */
        struct list_head proc_targets;
        struct list_head dirty;
        struct event *proc_timer;       /* pending only while proc_targets is not empty */
        sleepwatch_batch_fn batch;      /* before each batch's transitions are reported */
        void *batch_userdata;

        /* Lazy rings (sleepwatch-perf.c, "Sentinels"): records wake nobody
         * until a ring is half full; the CPU's sentinel kicks the loop when
         * the CPU is about to idle while busy, and the fallback timer reads
         * the rings while any CPU is busy. */
        struct sentinel *sentinel;
        unsigned *cpu_busy;             /* per ring: sleepwatch_cpu_busy() count */
        unsigned nr_busy;               /* rings with cpu_busy > 0 */
        struct event *fallback_timer;
        bool reading;                   /* in sleepwatch_read_rings(): caught up */
};

static inline int safe_close(int fd) {
        if (fd >= 0)
                close(fd);
        return -1;
}

/* ---- sleepwatch.c ---------------------------------------------------------- */

/* Evaluates dirty targets and reports transitions.  A callback may free any
 * target or watch new ones: each target leaves the dirty list before its
 * callback runs, and sleepwatch_target_free() takes a target off it. */
void sleepwatch_dispatch(struct sleepwatch *sw);

/* ---- sleepwatch-perf.c: the perf detector ---------------------------------- */

/* The per-CPU rings, and the probe that tells perf works for us. */
int sleepwatch_perf_setup(struct sleepwatch *sw);
void sleepwatch_perf_free_rings(struct sleepwatch *sw);
/* Opens @t's events on every ring; on failure sleepwatch_perf_close()
 * undoes what was opened. */
int sleepwatch_perf_watch(struct sleepwatch_target *t);
void sleepwatch_perf_close(struct sleepwatch_target *t);
/* Whether any task of @t runs. */
bool sleepwatch_perf_evaluate(struct sleepwatch_target *t);
/* Tasks taken as running that /proc shows asleep or gone are set so, as of
 * now, and the target is marked dirty (sleepwatch_target_recheck()). */
void sleepwatch_perf_recheck(struct sleepwatch_target *t);
/* With sentinels: reads the rings now if they hold records not read yet. */
void sleepwatch_perf_catch_up(struct sleepwatch *sw);

/* ---- sleepwatch-proc.c: the /proc sampler ---------------------------------- */

void sleepwatch_proc_timer_cb(evutil_socket_t fd, short what, void *userdata);
int sleepwatch_proc_watch(struct sleepwatch_target *t);
int sleepwatch_proc_read_state(int dir_fd, const char *path, char *ret_state);
int sleepwatch_proc_parse_tid(const char *s, pid_t *ret);
int sleepwatch_proc_threads_cpu_usec(pid_t pid, pid_t only_tid, uint64_t *ret);
int sleepwatch_proc_raw_cpu_usec(const struct sleepwatch_target *t, uint64_t *ret);
