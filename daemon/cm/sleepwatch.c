/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * Blocking detection, see cm/sleepwatch.h.
 *
 * perf: how records reach us
 * --------------------------
 * The obvious shape -- one event per target with pid = child, cpu = -1,
 * inherit = 1, and its own mmap ring -- does not work: the kernel refuses
 * mmap() of an inherited per-task event (perf_mmap(): "cpu == -1 &&
 * attr.inherit" -> EINVAL; verified on 6.18, as root and unprivileged).
 * Without inherit, forked children and threads of the item would be
 * invisible, and following them through PERF_RECORD_FORK by opening new
 * events from the daemon races with the child running and blocking.
 *
 * What works, and is what "perf record -- cmd" does: per-CPU events that
 * are per-task at the same time (pid = child, cpu = c, inherit = 1).  The
 * kernel allows mmap() of those, and records of inherited copies (children,
 * threads, grandchildren) are written into the ring of the original event,
 * carrying its id as PERF_SAMPLE_IDENTIFIER.  Verified: a shell's forked
 * children's SWITCH/FORK/EXIT records arrive, tagged with the id of the
 * event we opened on the shell.
 *
 * Rather than one ring per target and CPU, the sleepwatch owns one ring per
 * online CPU: a never-enabled "anchor" event on the daemon itself (pid = 0,
 * cpu = c) is mmap()ed, and every target's event for CPU c is redirected
 * into it with PERF_EVENT_IOC_SET_OUTPUT (allowed across tasks as long as
 * the CPU and the clock match).  So a target costs one fd per CPU and no
 * locked memory; the locked memory is (1 + SLEEPWATCH_RING_DATA_PAGES) pages
 * per CPU for the whole daemon.  The unprivileged budget is
 * perf_event_mlock_kb (516 KiB) times the number of online CPUs per user
 * (measured: 1032 KiB on 2 CPUs), and past it RLIMIT_MEMLOCK.  Records are
 * mapped to targets by PERF_SAMPLE_IDENTIFIER (inherited copies report the
 * id of their original).
 *
 * A task's records may sit in different rings (it migrated), so the rings
 * are read in no particular time order.  Every record carries a timestamp
 * (use_clockid = CLOCK_MONOTONIC, so they compare across CPUs), and a
 * task's state is taken from its newest record only; older records that
 * are read later are ignored.  An exited task stays as a tombstone for one
 * more pass over all rings, so that a late, older record cannot revive it.
 * All rings are drained before any target is evaluated, and a target is
 * reported only when its state differs from what was last reported.
 *
 * A ring that overflows drops new records and only reports PERF_RECORD_LOST
 * with the next record that fits -- the record telling that the last task
 * went to sleep may be the one lost, and nothing follows it.  So besides
 * PERF_RECORD_LOST, a ring found with less free space than the largest
 * record we ask for counts as overflowed too.  Either way every perf target
 * is resynchronised from /proc (the LOST record names whichever event wrote
 * next, not the one that lost).
 *
 * PERF_RECORD_SWITCH is not a sample, so wakeup_events never fires for it;
 * watermark = 1 with wakeup_watermark = 1 wakes the loop for every record.
 *
 * Latency, measured on the 2-CPU development VM (kernel 6.18, HZ=250, busy
 * with other builds): from a worker's last instruction before a blocking
 * nanosleep() to the "blocked" callback in the daemon's loop, median 43-65 us
 * over runs of 300-400 blocks (p90 70-200 us), the ~50 us that
 * doc/design.md §3.5 states; the tail reaches a few ms when no CPU is free
 * for the daemon.  The raw ring alone (poll + read, no libevent) shows a
 * median of ~30-50 us.
 *
 * Scheduling matters more than this code (measured with a worker that
 * spins 2 ms and sleeps 5 ms, and with two CPU-bound items pinned to the
 * two CPUs):
 *  - At SCHED_OTHER, a record wakes the daemon on the CPU where it was
 *    written, EEVDF lets it preempt the watched worker there, and that
 *    preemption writes the next two records: a self-sustaining ping-pong.
 *    Two watched CPU-bound items took 20-70% longer and the daemon used
 *    ~25-30% of a CPU.  The wake-up (switch-in) of a worker is also often
 *    seen only ~2 ms late (p90), so short run phases merge.
 *  - At SCHED_BATCH (no wake-up preemption) the daemon's own ping-pong is
 *    gone (in quiet runs 10 ms of daemon CPU instead of ~250 ms, and no
 *    slowdown; preemptions by other tasks still wake it); blocks are
 *    still seen in ~45 us since the blocking CPU is free, but a wake-up is
 *    seen only when the daemon next runs -- harmless for concurrency
 *    management, as the kernel's wq_worker_running() triggers nothing.
 *  - At SCHED_FIFO the daemon preempts its workers on every record and
 *    (with watched workers on every CPU) live-locks.  Do not.
 *
 * The proc sampler's latency is one interval plus one pass (median 0.9 ms
 * at 1 ms) -- provided the event_base uses EVENT_BASE_FLAG_PRECISE_TIMER:
 * by default libevent 2.1 reads CLOCK_MONOTONIC_COARSE, which advances per
 * jiffy, and a 1 ms timer then fires every ~6.5 ms (measured, HZ=250).
 *
 * Caveats: CPUs that come online after sleepwatch_new() have no ring, so a
 * task that runs there is not seen.  An execve() of a set-user-ID or
 * file-capability program detaches perf from that task (the kernel emits
 * PERF_RECORD_EXIT for it at that execve(), verified with mount(8)): it
 * then counts as gone, i.e. not running, and its children are not seen.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/log.h"
#include "cm/sleepwatch.h"
#include "list.h"
#include "util.h"

/* Data pages of each per-CPU ring: 32 KiB (with 4 KiB pages), ~1000 switch
 * records of 32 bytes.  The loop is woken for every record, so the ring only
 * needs to absorb what arrives while the loop is busy elsewhere.  Smaller
 * rings are tried when the mlock budget refuses this. */
#define SLEEPWATCH_RING_DATA_PAGES 8u

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

/* Large enough for every record type we parse (the largest, FORK/EXIT with
 * our sample_id, is 56 bytes); bigger records are skipped, not parsed. */
#define SLEEPWATCH_RECORD_MAX 128u

/* sample_id trailer of every non-sample record, given our sample_type
 * (PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_IDENTIFIER). */
struct sleepwatch_sample_id {
        uint32_t pid, tid;
        uint64_t time;
        uint64_t id;
};

/* Body of PERF_RECORD_FORK and PERF_RECORD_EXIT. */
struct sleepwatch_task_record {
        uint32_t pid, ppid;
        uint32_t tid, ptid;
        uint64_t time;
};

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
};

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

static uint64_t now_nsec(void);

static int safe_close(int fd) {
        if (fd >= 0)
                close(fd);
        return -1;
}

void sleepwatch_target_assume_running(struct sleepwatch_target *t) {
        uint64_t now = now_nsec();

        if (!t)
                return;
        t->running = true;
        t->sampled_running = true;
        /* As a resync does: records older than now are ignored from here on,
         * so a switch-out from before this moment, read late, cannot say
         * the target blocked. */
        for (size_t i = 0; i < t->n_tasks; i++)
                if (t->tasks[i].state != SW_TASK_GONE) {
                        t->tasks[i].state = SW_TASK_RUNNING;
                        t->tasks[i].time = now;
                }
}

int sleepwatch_parse_proc_state(const char *stat_line, char *ret_state) {
        const char *p;

        /* "PID (COMM) S ...": COMM may hold anything, ')' and spaces
         * included, but nothing after it can hold a ')'. */
        p = strrchr(stat_line, ')');
        if (!p || p[1] != ' ')
                return -EINVAL;
        if (!((p[2] >= 'A' && p[2] <= 'Z') || (p[2] >= 'a' && p[2] <= 'z')))
                return -EINVAL;
        *ret_state = p[2];
        return 0;
}

static uint64_t now_nsec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * UINT64_C(1000000000) + (uint64_t) ts.tv_nsec;
}

/* Reads the state letter of /proc/<dir_fd>/<path>; -ENOENT/-ESRCH when the
 * task is gone. */
static int read_proc_state(int dir_fd, const char *path, char *ret_state) {
        _cleanup_(closep) int fd = -1;
        char buf[2048];
        ssize_t n;

        fd = openat(dir_fd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        n = read(fd, buf, sizeof(buf) - 1);
        if (n < 0)
                return -errno;
        buf[n] = 0;
        return sleepwatch_parse_proc_state(buf, ret_state);
}

/* ---- proc sampling ----------------------------------------------------- */

static int parse_tid(const char *s, pid_t *ret) {
        char *end;
        long v;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno != 0 || *end || v <= 0 || v > INT32_MAX)
                return -EINVAL;
        *ret = (pid_t) v;
        return 0;
}

/* Reads a small file of @dir_fd into @buf (NUL-terminated, truncated to
 * @size - 1 bytes); -errno on failure. */
static int read_small_file(int dir_fd, const char *path, char *buf, size_t size) {
        _cleanup_(closep) int fd = -1;
        size_t len = 0;

        fd = openat(dir_fd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        while (len < size - 1) {
                ssize_t n = read(fd, buf + len, size - 1 - len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                len += (size_t) n;
        }
        buf[len] = 0;
        return 0;
}

/* Whether any thread of the cgroup (its cgroup.threads: every task of the
 * item, children and threads alike) is runnable.  A cgroup with more threads
 * than fit the buffer is judged on those listed first. */
static bool proc_sample_cgroup(int cgroup_fd) {
        char buf[16384];
        char *p, *end;

        if (read_small_file(cgroup_fd, "cgroup.threads", buf, sizeof(buf)) < 0)
                return false;
        for (p = buf; *p; p = end) {
                char path[64];
                char state;
                long tid;

                errno = 0;
                tid = strtol(p, &end, 10);
                if (end == p || errno != 0)
                        break;
                while (*end == '\n')
                        end++;
                if (tid <= 0 || tid > INT32_MAX)
                        continue;
                snprintf(path, sizeof(path), "/proc/%ld/stat", tid);
                if (read_proc_state(AT_FDCWD, path, &state) >= 0 && state == 'R')
                        return true;
        }
        return false;
}

/* A decimal number at the start of @s, up to a space or newline. */
static int parse_u64(const char *s, uint64_t *ret) {
        unsigned long long v;
        char *end;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || (*end && *end != ' ' && *end != '\n'))
                return -EINVAL;
        *ret = v;
        return 0;
}

static bool proc_sample(DIR *d, pid_t only_tid, int cgroup_fd) {
        struct dirent *de;

        if (cgroup_fd >= 0)
                return proc_sample_cgroup(cgroup_fd);

        if (only_tid > 0) {
                char path[64];
                char state;

                snprintf(path, sizeof(path), "%d/stat", (int) only_tid);
                return read_proc_state(dirfd(d), path, &state) >= 0 && state == 'R';
        }

        /* A process that is gone (reaped) makes readdir() fail: no thread
         * runs, so it is blocked. */
        rewinddir(d);
        while ((de = readdir(d))) {
                char path[64];
                char state;
                pid_t tid;

                if (parse_tid(de->d_name, &tid) < 0)
                        continue;       /* "." and ".." */
                snprintf(path, sizeof(path), "%d/stat", (int) tid);
                if (read_proc_state(dirfd(d), path, &state) < 0)
                        continue;       /* the thread just went: not running */
                if (state == 'R')
                        return true;
        }
        return false;
}

static void sleepwatch_dispatch(struct sleepwatch *sw);

static void proc_timer_cb(evutil_socket_t fd, short what, void *userdata) {
        struct sleepwatch *sw = userdata;
        struct sleepwatch_target *t;

        list_for_each_entry(t, &sw->proc_targets, link) {
                /* Before execve() the child is still setting itself up: like
                 * perf's enable_on_exec, what it does then is not the item. */
                if (!t->exec_seen)
                        continue;
                t->sampled_running = proc_sample(t->task_dir, t->only_tid, t->cgroup_fd);
                if (t->sampled_running != t->running && !list_linked(&t->dirty_link))
                        list_add_tail(&t->dirty_link, &sw->dirty);
        }
        sleepwatch_dispatch(sw);
}

/* ---- CPU time ----------------------------------------------------------- */

/* usage_usec of a cgroup's cpu.stat: every task that was ever in it (the
 * cgroup core keeps it without the cpu controller). */
static int cgroup_cpu_usec(int cgroup_fd, uint64_t *ret) {
        char buf[1024];
        const char *p;
        int r;

        r = read_small_file(cgroup_fd, "cpu.stat", buf, sizeof(buf));
        if (r < 0)
                return r;
        p = strstr(buf, "usage_usec ");
        if (!p || (p != buf && p[-1] != '\n'))
                return -EINVAL;
        return parse_u64(p + strlen("usage_usec "), ret);
}

/* Sum of the scheduler's run time (the first field of schedstat, in ns) of
 * the threads of @pid now alive, or of thread @only_tid alone. */
static int proc_threads_cpu_usec(pid_t pid, pid_t only_tid, uint64_t *ret) {
        char path[64], buf[128];
        uint64_t sum = 0, ns;
        struct dirent *de;
        DIR *d;

        if (only_tid > 0) {
                snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int) pid, (int) only_tid);
                if (read_small_file(AT_FDCWD, path, buf, sizeof(buf)) < 0 || parse_u64(buf, &ns) < 0)
                        return -ESRCH;
                *ret = ns / 1000;
                return 0;
        }

        snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);
        d = opendir(path);
        if (!d)
                return -ESRCH;
        while ((de = readdir(d))) {
                pid_t tid;

                if (parse_tid(de->d_name, &tid) < 0)
                        continue;
                snprintf(path, sizeof(path), "%d/schedstat", (int) tid);
                if (read_small_file(dirfd(d), path, buf, sizeof(buf)) < 0 || parse_u64(buf, &ns) < 0)
                        continue;       /* the thread just went */
                sum += ns;
        }
        closedir(d);
        *ret = sum / 1000;
        return 0;
}

/* CPU time of the target's tasks as /proc and the cgroup tell, from some
 * arbitrary origin. */
static int target_raw_cpu_usec(const struct sleepwatch_target *t, uint64_t *ret) {
        if (t->cgroup_fd >= 0 && t->only_tid <= 0 && cgroup_cpu_usec(t->cgroup_fd, ret) >= 0)
                return 0;
        return proc_threads_cpu_usec(t->pid, t->only_tid, ret);
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
                if (t->cpu_base_usec == UINT64_MAX || target_raw_cpu_usec(t, &raw) < 0)
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

/* ---- perf: per-target task table --------------------------------------- */

static struct sleepwatch_task *target_find_task(struct sleepwatch_target *t, pid_t tid) {
        for (size_t i = 0; i < t->n_tasks; i++)
                if (t->tasks[i].tid == tid)
                        return &t->tasks[i];
        return NULL;
}

static int target_add_task(struct sleepwatch_target *t, pid_t tid, struct sleepwatch_task **ret) {
        if (t->n_tasks == t->n_tasks_allocated) {
                size_t n = t->n_tasks_allocated ? t->n_tasks_allocated * 2 : 4;
                struct sleepwatch_task *p;

                p = reallocarray(t->tasks, n, sizeof(*p));
                if (!p)
                        return -ENOMEM;
                t->tasks = p;
                t->n_tasks_allocated = n;
        }
        t->tasks[t->n_tasks] = (struct sleepwatch_task) { .tid = tid };
        *ret = &t->tasks[t->n_tasks++];
        return 0;
}

static void target_mark_dirty(struct sleepwatch_target *t) {
        if (!list_linked(&t->dirty_link))
                list_add_tail(&t->dirty_link, &t->sw->dirty);
}

/* Applies what a record says about @tid at @time, unless a newer record
 * already spoke for it. */
static void target_update_task(struct sleepwatch_target *t, pid_t tid,
                               enum sleepwatch_task_state state, uint64_t time) {
        struct sleepwatch_task *k;

        /* A watched thread's events also report the threads it creates
         * (FORK records): those are the client's business, not part of
         * this target, and counting them as running would hide its block. */
        if (t->only_tid > 0 && tid != t->only_tid)
                return;

        k = target_find_task(t, tid);
        if (!k) {
                if (target_add_task(t, tid, &k) < 0) {
                        /* Out of memory: forget the details, ask /proc later. */
                        t->sw->need_resync = true;
                        return;
                }
        } else if (time < k->time)
                return;

        k->state = state;
        k->time = time;
        if (state == SW_TASK_GONE)
                k->gone_pass = t->sw->pass;
        target_mark_dirty(t);
}

/* Sets every task we know of (and the main process's threads) from /proc,
 * as of now; records older than this are ignored afterwards. */
static void target_resync(struct sleepwatch_target *t) {
        uint64_t now = now_nsec(), raw;
        char path[64];
        DIR *d;

        if (t->oncpu_since) {
                /* An interval's end may be among the lost records: from
                 * here on /proc tells, carried on from what we said last. */
                free(t->oncpu_since);
                t->oncpu_since = NULL;
                if (proc_threads_cpu_usec(t->pid, t->only_tid, &raw) < 0)
                        t->cpu_base_usec = UINT64_MAX;
                else
                        t->cpu_base_usec = raw > t->cpu_last_usec ? raw - t->cpu_last_usec : 0;
        }

        for (size_t i = 0; i < t->n_tasks; i++) {
                struct sleepwatch_task *k = &t->tasks[i];
                char state;

                if (k->state == SW_TASK_GONE)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/stat", (int) k->tid);
                if (read_proc_state(AT_FDCWD, path, &state) < 0 || state == 'Z' || state == 'X') {
                        k->state = SW_TASK_GONE;
                        k->gone_pass = t->sw->pass;
                } else
                        k->state = state == 'R' ? SW_TASK_RUNNING : SW_TASK_BLOCKED;
                k->time = now;
        }

        /* Threads of the main process that started while records were lost
         * (a thread target follows no other thread). */
        snprintf(path, sizeof(path), "/proc/%d/task", (int) t->pid);
        d = t->only_tid > 0 ? NULL : opendir(path);
        if (d) {
                struct dirent *de;

                while ((de = readdir(d))) {
                        struct sleepwatch_task *k;
                        char state;
                        pid_t tid;

                        if (parse_tid(de->d_name, &tid) < 0 || target_find_task(t, tid))
                                continue;
                        snprintf(path, sizeof(path), "%d/stat", (int) tid);
                        if (read_proc_state(dirfd(d), path, &state) < 0)
                                continue;
                        if (target_add_task(t, tid, &k) < 0)
                                break;
                        k->state = state == 'R' ? SW_TASK_RUNNING : SW_TASK_BLOCKED;
                        k->time = now;
                }
                closedir(d);
        }
        target_mark_dirty(t);
}

/* Whether any task runs; drops tombstones that have outlived a full pass. */
static bool target_evaluate_perf(struct sleepwatch_target *t) {
        bool running = false;
        size_t j = 0;

        for (size_t i = 0; i < t->n_tasks; i++) {
                struct sleepwatch_task *k = &t->tasks[i];

                if (k->state == SW_TASK_GONE && k->gone_pass < t->sw->pass)
                        continue;
                if (k->state == SW_TASK_RUNNING)
                        running = true;
                t->tasks[j++] = *k;
        }
        t->n_tasks = j;
        return running;
}

/* ---- perf: rings -------------------------------------------------------- */

static struct sleepwatch_target *sleepwatch_find_target(struct sleepwatch *sw, uint64_t id, size_t *ret_ring) {
        struct sleepwatch_target *t;

        if (sw->last_hit && id >= sw->last_hit->id_min && id <= sw->last_hit->id_max)
                t = sw->last_hit;
        else {
                bool found = false;

                list_for_each_entry(t, &sw->perf_targets, link)
                        if (id >= t->id_min && id <= t->id_max) {
                                found = true;
                                break;
                        }
                if (!found)
                        return NULL;    /* a target freed since */
        }
        for (size_t i = 0; i < t->n_fds; i++)
                if (t->ids[i] == id) {
                        sw->last_hit = t;
                        *ret_ring = i;  /* target_watch_perf() opened fds[i] on rings[i] */
                        return t;
                }
        return NULL;
}

/* A thread target's switch on ring @ring at @time: closes or opens an
 * on-CPU interval.  Records of one ring come in time order. */
static void target_account_switch(struct sleepwatch_target *t, size_t ring, bool out, uint64_t time) {
        uint64_t *since = &t->oncpu_since[ring];

        if (!out) {
                *since = time;
                return;
        }
        if (*since && time > *since)
                t->oncpu_ns += time - *since;
        *since = 0;
}

static void sleepwatch_handle_record(struct sleepwatch *sw, const void *rec, size_t size) {
        const struct perf_event_header *h = rec;
        const struct sleepwatch_task_record *body = (const void *) (h + 1);
        struct sleepwatch_sample_id sid;
        struct sleepwatch_target *t;
        size_t ring;

        if (h->type == PERF_RECORD_LOST) {
                sw->need_resync = true;
                return;
        }
        if (h->type != PERF_RECORD_SWITCH && h->type != PERF_RECORD_FORK && h->type != PERF_RECORD_EXIT)
                return;
        if (size < sizeof(*h) + sizeof(sid))
                return;
        memcpy(&sid, (const char *) rec + size - sizeof(sid), sizeof(sid));
        t = sleepwatch_find_target(sw, sid.id, &ring);
        if (!t)
                return;

        switch (h->type) {
        case PERF_RECORD_SWITCH:
                if (t->oncpu_since && (pid_t) sid.tid == t->only_tid)
                        target_account_switch(t, ring, h->misc & PERF_RECORD_MISC_SWITCH_OUT, sid.time);
                if (!(h->misc & PERF_RECORD_MISC_SWITCH_OUT))
                        target_update_task(t, (pid_t) sid.tid, SW_TASK_RUNNING, sid.time);
                else if (h->misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT)
                        target_update_task(t, (pid_t) sid.tid, SW_TASK_RUNNING, sid.time);
                else
                        target_update_task(t, (pid_t) sid.tid, SW_TASK_BLOCKED, sid.time);
                break;
        case PERF_RECORD_FORK:
        case PERF_RECORD_EXIT:
                if (size < sizeof(*h) + sizeof(*body) + sizeof(sid))
                        return;
                target_update_task(t, (pid_t) body->tid,
                                   h->type == PERF_RECORD_FORK ? SW_TASK_RUNNING : SW_TASK_GONE,
                                   sid.time);
                break;
        }
}

static void ring_drain(struct sleepwatch_ring *r) {
        struct perf_event_mmap_page *meta = r->map;
        uint64_t head, tail;

        head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
        tail = meta->data_tail;         /* only we write it */

        /* Too little room left for a record: one may have been dropped, and
         * the kernel tells with PERF_RECORD_LOST only once another fits. */
        if (r->data_size - (head - tail) < SLEEPWATCH_RECORD_MAX)
                r->sw->need_resync = true;

        while (head - tail >= sizeof(struct perf_event_header)) {
                uint64_t off = tail & (r->data_size - 1);
                struct perf_event_header h;
                uint8_t buf[SLEEPWATCH_RECORD_MAX];
                const void *rec;

                /* Records are 8-byte aligned, so a header never wraps. */
                memcpy(&h, r->data + off, sizeof(h));
                if (h.size < sizeof(h) || h.size > head - tail) {
                        /* Cannot happen; do not loop on garbage. */
                        r->sw->need_resync = true;
                        tail = head;
                        break;
                }

                if (off + h.size <= r->data_size)
                        rec = r->data + off;
                else if (h.size <= sizeof(buf)) {
                        size_t first = r->data_size - off;

                        memcpy(buf, r->data + off, first);
                        memcpy(buf + first, r->data, h.size - first);
                        rec = buf;
                } else
                        rec = NULL;     /* not one of ours */

                if (rec)
                        sleepwatch_handle_record(r->sw, rec, h.size);
                tail += h.size;
        }

        /* Our reads of the data must be done before the kernel may reuse it. */
        __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
}

static void ring_cb(evutil_socket_t fd, short what, void *userdata) {
        struct sleepwatch_ring *ring = userdata;
        struct sleepwatch *sw = ring->sw;
        struct sleepwatch_target *t;

        /* All rings: a task's switch-out may be in one ring and its switch-in
         * in another, and a target is judged on all of them. */
        sw->pass++;
        for (size_t i = 0; i < sw->n_rings; i++)
                ring_drain(&sw->rings[i]);

        if (sw->need_resync) {
                sw->need_resync = false;
                log_debug("sleepwatch: perf records lost, resynchronising from /proc");
                list_for_each_entry(t, &sw->perf_targets, link)
                        target_resync(t);
        }

        sleepwatch_dispatch(sw);
}

/* Evaluates dirty targets and reports transitions.  A callback may free any
 * target or watch new ones: each target leaves the dirty list before its
 * callback runs, and sleepwatch_target_free() takes a target off it. */
static void sleepwatch_dispatch(struct sleepwatch *sw) {
        if (sw->batch)
                sw->batch(sw->batch_userdata);
        while (!list_empty(&sw->dirty)) {
                struct sleepwatch_target *t = list_first_entry(&sw->dirty, struct sleepwatch_target, dirty_link);
                bool running;

                list_del_init(&t->dirty_link);
                running = t->mode == SLEEPWATCH_PERF ? target_evaluate_perf(t) : t->sampled_running;
                if (running == t->running)
                        continue;
                t->running = running;
                t->cb(t, running, t->userdata);
        }
}

/* ---- perf: event setup -------------------------------------------------- */

static int perf_open(struct perf_event_attr *attr, pid_t pid, int cpu) {
        long fd;

        fd = syscall(SYS_perf_event_open, attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0)
                return -errno;
        return (int) fd;
}

/* The event watching a target on one CPU. */
static void target_attr(struct perf_event_attr *attr) {
        *attr = (struct perf_event_attr) {
                .size = sizeof(*attr),
                .type = PERF_TYPE_SOFTWARE,
                .config = PERF_COUNT_SW_DUMMY,
                .sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_IDENTIFIER,
                .disabled = 1,
                .inherit = 1,           /* children and threads, into our ring */
                .exclude_kernel = 1,    /* what perf_event_paranoid = 2 allows */
                .exclude_hv = 1,
                .enable_on_exec = 1,    /* nothing before the item's execve() */
                .task = 1,              /* PERF_RECORD_FORK / PERF_RECORD_EXIT */
                .watermark = 1,         /* switch records are no samples: wake */
                .wakeup_watermark = 1,  /* for every byte written */
                .sample_id_all = 1,
                .use_clockid = 1,       /* times that compare across CPUs */
                .clockid = CLOCK_MONOTONIC,
                .context_switch = 1,
        };
}

/* Counts a target's CPU time, over its whole tree from its execve(). */
static void clock_attr(struct perf_event_attr *attr) {
        *attr = (struct perf_event_attr) {
                .size = sizeof(*attr),
                .type = PERF_TYPE_SOFTWARE,
                .config = PERF_COUNT_SW_TASK_CLOCK,
                .disabled = 1,
                .inherit = 1,
                .exclude_kernel = 1,    /* for perf_event_paranoid = 2; task-clock counts all the same */
                .exclude_hv = 1,
                .enable_on_exec = 1,
        };
}

/* Owns a CPU's ring: on ourselves, never enabled, records nothing itself.
 * It must use the same clock as the events redirected into it. */
static void anchor_attr(struct perf_event_attr *attr) {
        *attr = (struct perf_event_attr) {
                .size = sizeof(*attr),
                .type = PERF_TYPE_SOFTWARE,
                .config = PERF_COUNT_SW_DUMMY,
                .sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_IDENTIFIER,
                .disabled = 1,
                .exclude_kernel = 1,
                .exclude_hv = 1,
                .watermark = 1,
                .wakeup_watermark = 1,
                .sample_id_all = 1,
                .use_clockid = 1,
                .clockid = CLOCK_MONOTONIC,
        };
}

static void ring_done(struct sleepwatch_ring *r) {
        if (r->ev)
                event_free(r->ev);
        if (r->map)
                munmap(r->map, r->map_size);
        closep(&r->fd);
        *r = (struct sleepwatch_ring) { .fd = -1 };
}

static int ring_init(struct sleepwatch *sw, struct sleepwatch_ring *r, int cpu) {
        static const unsigned data_pages[] = { SLEEPWATCH_RING_DATA_PAGES, 2, 1 };
        struct perf_event_attr attr;
        struct perf_event_mmap_page *meta;
        size_t page_size = (size_t) sysconf(_SC_PAGESIZE);
        int r_fd;

        *r = (struct sleepwatch_ring) { .sw = sw, .cpu = cpu, .fd = -1 };

        anchor_attr(&attr);
        r_fd = perf_open(&attr, 0, cpu);
        if (r_fd < 0)
                return log_debug_errno(r_fd, "sleepwatch: perf_event_open() on CPU %d refused: %m", cpu),
                       -EOPNOTSUPP;
        r->fd = r_fd;

        for (size_t i = 0; i < ELEMENTSOF(data_pages); i++) {
                r->map_size = (1 + data_pages[i]) * page_size;
                r->map = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
                if (r->map != MAP_FAILED)
                        break;
                r->map = NULL;
                if (errno != EPERM && errno != ENOMEM)
                        break;
        }
        if (!r->map) {
                log_debug_errno(-errno, "sleepwatch: mmap() of the perf ring on CPU %d refused: %m", cpu);
                ring_done(r);
                return -EOPNOTSUPP;
        }

        meta = r->map;
        if (meta->data_size) {
                r->data = (char *) r->map + meta->data_offset;
                r->data_size = meta->data_size;
        } else {
                r->data = (char *) r->map + page_size;
                r->data_size = r->map_size - page_size;
        }

        r->ev = event_new(sw->base, r->fd, EV_READ | EV_PERSIST, ring_cb, r);
        if (!r->ev || event_add(r->ev, NULL) < 0) {
                ring_done(r);
                return -ENOMEM;
        }
        return 0;
}

/* The online CPUs, from "0-3,8,10-11". */
static int online_cpus(int **ret, size_t *ret_n) {
        _cleanup_(freep) int *cpus = NULL;
        size_t n = 0, allocated = 0;
        char buf[4096];
        const char *p;
        FILE *f;

        f = fopen("/sys/devices/system/cpu/online", "re");
        if (f) {
                if (!fgets(buf, sizeof(buf), f))
                        buf[0] = 0;
                fclose(f);
        } else {
                long k = sysconf(_SC_NPROCESSORS_ONLN);
                snprintf(buf, sizeof(buf), "0-%ld", k > 0 ? k - 1 : 0);
        }

        for (p = buf; *p && *p != '\n';) {
                char *end;
                long a, b;

                a = strtol(p, &end, 10);
                if (end == p || a < 0)
                        return -EINVAL;
                b = a;
                p = end;
                if (*p == '-') {
                        b = strtol(p + 1, &end, 10);
                        if (end == p + 1 || b < a)
                                return -EINVAL;
                        p = end;
                }
                for (long c = a; c <= b; c++) {
                        if (n == allocated) {
                                size_t k = allocated ? allocated * 2 : 8;
                                int *q = reallocarray(cpus, k, sizeof(*q));
                                if (!q)
                                        return -ENOMEM;
                                cpus = q;
                                allocated = k;
                        }
                        cpus[n++] = (int) c;
                }
                if (*p == ',')
                        p++;
        }
        if (n == 0)
                return -EINVAL;

        *ret = TAKE_PTR(cpus);
        *ret_n = n;
        return 0;
}

static int sleepwatch_setup_perf(struct sleepwatch *sw) {
        _cleanup_(freep) int *cpus = NULL;
        _cleanup_(closep) int probe = -1;
        struct perf_event_attr attr;
        size_t n_cpus;
        int r;

        r = online_cpus(&cpus, &n_cpus);
        if (r < 0)
                return r;

        sw->rings = calloc(n_cpus, sizeof(*sw->rings));
        if (!sw->rings)
                return -ENOMEM;

        for (size_t i = 0; i < n_cpus; i++) {
                r = ring_init(sw, &sw->rings[i], cpus[i]);
                if (r < 0)
                        return r;
                sw->n_rings++;
        }

        /* The probe: the very event a target gets, on ourselves (it stays
         * disabled -- enable_on_exec, and we do not exec), redirected into a
         * ring the same way. */
        target_attr(&attr);
        r = perf_open(&attr, 0, sw->rings[0].cpu);
        if (r < 0)
                return log_debug_errno(r, "sleepwatch: perf_event_open() refused: %m"), -EOPNOTSUPP;
        probe = r;
        if (ioctl(probe, PERF_EVENT_IOC_SET_OUTPUT, sw->rings[0].fd) < 0)
                return log_debug_errno(-errno, "sleepwatch: PERF_EVENT_IOC_SET_OUTPUT refused: %m"),
                       -EOPNOTSUPP;
        return 0;
}

/* ---- the detector -------------------------------------------------------- */

static void sleepwatch_freep(struct sleepwatch **sw) {
        sleepwatch_free(*sw);
}

int sleepwatch_new(struct event_base *base, enum sleepwatch_mode mode, struct sleepwatch **ret) {
        _cleanup_(sleepwatch_freep) struct sleepwatch *sw = NULL;
        int r;

        if (!base || !ret || !sleepwatch_mode_to_string(mode))
                return -EINVAL;

        sw = calloc(1, sizeof(*sw));
        if (!sw)
                return -ENOMEM;
        sw->base = base;
        sw->mode = mode;
        list_init(&sw->perf_targets);
        list_init(&sw->proc_targets);
        list_init(&sw->dirty);

        sw->proc_timer = event_new(base, -1, EV_PERSIST, proc_timer_cb, sw);
        if (!sw->proc_timer)
                return -ENOMEM;

        if (mode == SLEEPWATCH_PERF) {
                r = sleepwatch_setup_perf(sw);
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
        for (size_t i = 0; i < sw->n_rings; i++)
                ring_done(&sw->rings[i]);
        free(sw->rings);
        free(sw);
        return NULL;
}

static int target_watch_perf(struct sleepwatch_target *t) {
        struct sleepwatch *sw = t->sw;
        struct perf_event_attr attr;
        struct sleepwatch_task *k;
        int r;

        t->fds = malloc(sw->n_rings * sizeof(*t->fds));
        t->ids = malloc(sw->n_rings * sizeof(*t->ids));
        if (!t->fds || !t->ids)
                return -ENOMEM;

        target_attr(&attr);
        if (t->only_tid > 0) {
                /* An existing thread: enabled at once, and only it. */
                attr.disabled = 0;
                attr.enable_on_exec = 0;
                attr.inherit = 0;
        }
        for (size_t i = 0; i < sw->n_rings; i++) {
                r = perf_open(&attr, t->only_tid > 0 ? t->only_tid : t->pid, sw->rings[i].cpu);
                if (r < 0)
                        return r;
                t->fds[t->n_fds++] = r;
                if (ioctl(r, PERF_EVENT_IOC_SET_OUTPUT, sw->rings[i].fd) < 0 ||
                    ioctl(r, PERF_EVENT_IOC_ID, &t->ids[i]) < 0)
                        return -errno;
                /* Event ids are handed out in increasing order, and we open
                 * one target's events before the next one's: ranges of
                 * different targets never overlap. */
                if (i == 0 || t->ids[i] < t->id_min)
                        t->id_min = t->ids[i];
                if (i == 0 || t->ids[i] > t->id_max)
                        t->id_max = t->ids[i];
        }

        if (t->only_tid > 0) {
                /* A client's callback thread, asked at every grant, every
                 * wake-up and every CPU-intensive check: its own switch
                 * records tell its CPU time (struct sleepwatch_target). */
                t->oncpu_since = calloc(sw->n_rings, sizeof(*t->oncpu_since));
                if (!t->oncpu_since)
                        return -ENOMEM;
        } else {
                /* CPU time over the same tasks as the records, from the
                 * same execve(): read() of an inherited counter adds up the
                 * live descendants' counts and those of the ones that
                 * exited.  Without it, /proc or the cgroup tell
                 * (sleepwatch_target_cpu_usec()). */
                clock_attr(&attr);
                r = perf_open(&attr, t->pid, -1);
                if (r < 0)
                        log_debug_errno(r, "sleepwatch: task-clock counter refused for PID %d: %m", (int) t->pid);
                else
                        t->clock_fd = r;
        }

        /* The main process runs (or is about to) until a record says other. */
        r = target_add_task(t, t->only_tid > 0 ? t->only_tid : t->pid, &k);
        if (r < 0)
                return r;
        k->state = SW_TASK_RUNNING;
        return 0;
}

static void target_close_perf(struct sleepwatch_target *t) {
        t->clock_fd = safe_close(t->clock_fd);
        free(t->oncpu_since);
        t->oncpu_since = NULL;
        for (size_t i = 0; i < t->n_fds; i++)
                close(t->fds[i]);
        t->n_fds = 0;
        free(t->fds);
        t->fds = NULL;
        free(t->ids);
        t->ids = NULL;
        free(t->tasks);
        t->tasks = NULL;
        t->n_tasks = t->n_tasks_allocated = 0;
}

static int target_watch_proc(struct sleepwatch_target *t) {
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d/task", (int) t->pid);
        t->task_dir = opendir(path);
        if (!t->task_dir)
                return errno == ENOENT ? -ESRCH : -errno;
        t->sampled_running = true;
        return 0;
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
        target_close_perf(t);
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
                r = target_watch_perf(t);
                if (r == -ENOMEM)
                        return r;
                if (r < 0) {
                        log_debug_errno(r, "sleepwatch: perf refused for PID %d, sampling /proc instead: %m",
                                        (int) pid);
                        target_close_perf(t);
                        t->mode = SLEEPWATCH_PROC;
                }
        }
        if (t->mode == SLEEPWATCH_PROC) {
                r = target_watch_proc(t);
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
        if (t->clock_fd < 0 && target_raw_cpu_usec(t, &t->cpu_base_usec) < 0)
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
