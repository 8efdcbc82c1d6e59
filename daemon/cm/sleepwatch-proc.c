/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * The /proc sampler of cm/sleepwatch.h, and the CPU time /proc and the
 * cgroup tell: the detector where perf is refused (--sleep-detector proc,
 * or a target past perf's locked-memory budget), and what the perf detector
 * falls back on when records were lost.  Apart from sleepwatch.c because
 * it knows /proc's and cgroupfs's files and nothing of perf.
 *
 * The proc sampler's latency is one interval plus one pass (median 0.9 ms
 * at 1 ms) -- provided the event_base uses EVENT_BASE_FLAG_PRECISE_TIMER:
 * by default libevent 2.1 reads CLOCK_MONOTONIC_COARSE, which advances per
 * jiffy, and a 1 ms timer then fires every ~6.5 ms (measured, HZ=250).
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm/sleepwatch-internal.h"
#include "util.h"

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

/* Reads the state letter of /proc/<dir_fd>/<path>; -ENOENT/-ESRCH when the
 * task is gone. */
int sleepwatch_proc_read_state(int dir_fd, const char *path, char *ret_state) {
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

bool sleepwatch_thread_runnable(pid_t pid, pid_t tid) {
        char path[64], state;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int) pid, (int) tid);
        return sleepwatch_proc_read_state(AT_FDCWD, path, &state) == 0 && state == 'R';
}

int sleepwatch_proc_parse_tid(const char *s, pid_t *ret) {
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
        ssize_t n;

        fd = openat(dir_fd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        n = read_full(fd, buf, size - 1);
        if (n < 0)
                return (int) n;
        buf[n] = 0;
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
                if (sleepwatch_proc_read_state(AT_FDCWD, path, &state) >= 0 && state == 'R')
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
                return sleepwatch_proc_read_state(dirfd(d), path, &state) >= 0 && state == 'R';
        }

        /* A process that is gone (reaped) makes readdir() fail: no thread
         * runs, so it is blocked. */
        rewinddir(d);
        while ((de = readdir(d))) {
                char path[64];
                char state;
                pid_t tid;

                if (sleepwatch_proc_parse_tid(de->d_name, &tid) < 0)
                        continue;       /* "." and ".." */
                snprintf(path, sizeof(path), "%d/stat", (int) tid);
                if (sleepwatch_proc_read_state(dirfd(d), path, &state) < 0)
                        continue;       /* the thread just went: not running */
                if (state == 'R')
                        return true;
        }
        return false;
}

void sleepwatch_proc_timer_cb(evutil_socket_t fd, short what, void *userdata) {
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
int sleepwatch_proc_threads_cpu_usec(pid_t pid, pid_t only_tid, uint64_t *ret) {
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

                if (sleepwatch_proc_parse_tid(de->d_name, &tid) < 0)
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
int sleepwatch_proc_raw_cpu_usec(const struct sleepwatch_target *t, uint64_t *ret) {
        if (t->cgroup_fd >= 0 && t->only_tid <= 0 && cgroup_cpu_usec(t->cgroup_fd, ret) >= 0)
                return 0;
        return sleepwatch_proc_threads_cpu_usec(t->pid, t->only_tid, ret);
}

int sleepwatch_proc_watch(struct sleepwatch_target *t) {
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d/task", (int) t->pid);
        t->task_dir = opendir(path);
        if (!t->task_dir)
                return errno == ENOENT ? -ESRCH : -errno;
        t->sampled_running = true;
        return 0;
}
