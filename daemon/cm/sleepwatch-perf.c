/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * The perf detector of cm/sleepwatch.h: a target's tasks seen switching out
 * and in through perf's switch records, read from one ring per CPU.  Apart
 * from sleepwatch.c because it is the whole of what perf is to the daemon
 * (the events, the rings, the records and the task tables they update);
 * the /proc fallback is in sleepwatch-proc.c.
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
 * Caveats: CPUs that come online after sleepwatch_new() have no ring, so a
 * task that runs there is not seen.  An execve() of a set-user-ID or
 * file-capability program detaches perf from that task (the kernel emits
 * PERF_RECORD_EXIT for it at that execve(), verified with mount(8)): it
 * then counts as gone, i.e. not running, and its children are not seen.
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/log.h"
#include "cm/sentinel.h"
#include "cm/sleepwatch-internal.h"
#include "util.h"

/* Data pages of each per-CPU ring: 32 KiB (with 4 KiB pages), ~1000 switch
 * records of 32 bytes.  The loop is woken for every record, so the ring only
 * needs to absorb what arrives while the loop is busy elsewhere.  Smaller
 * rings are tried when the mlock budget refuses this. */
#define SLEEPWATCH_RING_DATA_PAGES 8u

/* With sentinels: how often the loop reads the rings while a CPU is busy
 * (the loop's timers are coarse with the perf detector: a few ms). */
#define SLEEPWATCH_FALLBACK_USEC 2000

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

/* What a switch record at @time says of its task: out blocking, unless the
 * thread was still on its way into the wait its waker has ended
 * (sleepwatch_target_waking()); in, or out by preemption, running. */
static enum sleepwatch_task_state target_switch_state(struct sleepwatch_target *t, uint16_t misc, uint64_t time) {
        if (!(misc & PERF_RECORD_MISC_SWITCH_OUT) || (misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT))
                return SW_TASK_RUNNING;
        if (t->wait_end && time < t->wait_end(t, t->userdata))
                return SW_TASK_RUNNING;
        return SW_TASK_BLOCKED;
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
                if (sleepwatch_proc_threads_cpu_usec(t->pid, t->only_tid, &raw) < 0)
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
                if (sleepwatch_proc_read_state(AT_FDCWD, path, &state) < 0 || state == 'Z' || state == 'X') {
                        k->state = SW_TASK_GONE;
                        k->gone_pass = t->sw->pass;
                } else
                        k->state = state == 'R' ? SW_TASK_RUNNING : SW_TASK_BLOCKED;
                k->time = now;
        }
        t->wait_end = NULL;

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

                        if (sleepwatch_proc_parse_tid(de->d_name, &tid) < 0 || target_find_task(t, tid))
                                continue;
                        snprintf(path, sizeof(path), "%d/stat", (int) tid);
                        if (sleepwatch_proc_read_state(dirfd(d), path, &state) < 0)
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

void sleepwatch_perf_recheck(struct sleepwatch_target *t) {
        uint64_t now = now_nsec();
        bool changed = false;
        char path[64];

        for (size_t i = 0; i < t->n_tasks; i++) {
                struct sleepwatch_task *k = &t->tasks[i];
                char state;

                if (k->state != SW_TASK_RUNNING)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/stat", (int) k->tid);
                if (sleepwatch_proc_read_state(AT_FDCWD, path, &state) < 0 || state == 'Z' || state == 'X') {
                        k->state = SW_TASK_GONE;
                        k->gone_pass = t->sw->pass;
                } else if (state != 'R')
                        k->state = SW_TASK_BLOCKED;
                else
                        continue;
                /* Records of what it did before now are ignored from here on. */
                k->time = now;
                t->wait_end = NULL;
                changed = true;
        }
        if (changed)
                target_mark_dirty(t);
}

/* Whether any task runs; drops tombstones that have outlived a full pass. */
bool sleepwatch_perf_evaluate(struct sleepwatch_target *t) {
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
                        *ret_ring = i;  /* sleepwatch_perf_watch() opened fds[i] on rings[i] */
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
                target_update_task(t, (pid_t) sid.tid, target_switch_state(t, h->misc, sid.time), sid.time);
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

static void sleepwatch_read_rings(struct sleepwatch *sw) {
        struct sleepwatch_target *t;

        /* All rings: a task's switch-out may be in one ring and its switch-in
         * in another, and a target is judged on all of them. */
        sw->reading = true;
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
        sentinel_looked(sw->sentinel);
        sw->reading = false;
}

static void ring_cb(evutil_socket_t fd, short what, void *userdata) {
        struct sleepwatch_ring *ring = userdata;

        sleepwatch_read_rings(ring->sw);
}

static void fallback_timer_cb(evutil_socket_t fd, short what, void *userdata) {
        sleepwatch_read_rings(userdata);
}

/* On a sentinel's thread: records not read yet in the ring. */
static bool ring_has_news(size_t idx, void *userdata) {
        struct sleepwatch *sw = userdata;
        struct perf_event_mmap_page *meta = sw->rings[idx].map;

        return __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE) !=
               __atomic_load_n(&meta->data_tail, __ATOMIC_ACQUIRE);
}

static void sentinel_kicked(void *userdata) {
        sleepwatch_read_rings(userdata);
}

void sleepwatch_perf_catch_up(struct sleepwatch *sw) {
        /* Inside a read, the reports being made are the news. */
        if (!sw->sentinel || sw->reading)
                return;
        sentinel_let_go_of_loop(sw->sentinel);
        for (size_t i = 0; i < sw->n_rings; i++)
                if (ring_has_news(i, sw)) {
                        sleepwatch_read_rings(sw);
                        return;
                }
}

bool sleepwatch_cpu_busy(struct sleepwatch *sw, int cpu, bool busy) {
        size_t i;

        if (!sw || !sw->sentinel)
                return false;
        for (i = 0; i < sw->n_rings && sw->rings[i].cpu != cpu; i++)
                ;
        if (i == sw->n_rings)
                return false;
        if (busy && sw->cpu_busy[i]++ == 0) {
                sentinel_arm(sw->sentinel, i, true);
                if (sw->nr_busy++ == 0) {
                        struct timeval tv = { 0, SLEEPWATCH_FALLBACK_USEC };

                        event_add(sw->fallback_timer, &tv);
                }
                return true;
        }
        if (!busy && sw->cpu_busy[i] > 0 && --sw->cpu_busy[i] == 0) {
                sentinel_arm(sw->sentinel, i, false);
                if (--sw->nr_busy == 0)
                        event_del(sw->fallback_timer);
                return true;
        }
        return false;
}

bool sleepwatch_cpu_watched(const struct sleepwatch *sw, int cpu) {
        if (!sw || sw->mode != SLEEPWATCH_PERF)
                return false;
        for (size_t i = 0; i < sw->n_rings; i++)
                if (sw->rings[i].cpu == cpu)
                        /* Without sentinels every record wakes the loop. */
                        return !sw->sentinel || sw->cpu_busy[i] > 0;
        return false;
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
static void anchor_attr(struct perf_event_attr *attr, bool lazy) {
        *attr = (struct perf_event_attr) {
                .size = sizeof(*attr),
                .type = PERF_TYPE_SOFTWARE,
                .config = PERF_COUNT_SW_DUMMY,
                .sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_IDENTIFIER,
                .disabled = 1,
                .exclude_kernel = 1,
                .exclude_hv = 1,
                .watermark = 1,
                .wakeup_watermark = lazy ? 0 : 1,      /* the ring's: every byte, or (0) half full */
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

        anchor_attr(&attr, sw->sentinel);
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

int sleepwatch_perf_setup(struct sleepwatch *sw) {
        _cleanup_(freep) int *cpus = NULL;
        _cleanup_(closep) int probe = -1;
        struct perf_event_attr attr;
        size_t n_cpus;
        int r;

        r = online_cpus(&cpus, &n_cpus);
        if (r < 0)
                return r;

        sw->rings = calloc(n_cpus, sizeof(*sw->rings));
        sw->cpu_busy = calloc(n_cpus, sizeof(*sw->cpu_busy));
        if (!sw->rings || !sw->cpu_busy)
                return -ENOMEM;

        /* Without sentinels every record wakes the loop: it sees every
         * block and wake-up at once, and costs every watched switch a
         * wake-up (a self-IPI). */
        if (sw->flags & SLEEPWATCH_SENTINELS) {
                sw->fallback_timer = event_new(sw->base, -1, EV_PERSIST, fallback_timer_cb, sw);
                if (!sw->fallback_timer)
                        return -ENOMEM;
                r = sentinel_new(sw->base, cpus, n_cpus, ring_has_news, sentinel_kicked, sw, &sw->sentinel);
                if (r < 0)
                        log_debug_errno(r, "sleepwatch: no sentinels, records wake the loop one by one: %m");
        }

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

void sleepwatch_perf_free_rings(struct sleepwatch *sw) {
        /* Its threads read the rings. */
        sw->sentinel = sentinel_free(sw->sentinel);
        if (sw->fallback_timer)
                event_free(sw->fallback_timer);
        for (size_t i = 0; i < sw->n_rings; i++)
                ring_done(&sw->rings[i]);
        free(sw->rings);
        free(sw->cpu_busy);
}

int sleepwatch_perf_watch(struct sleepwatch_target *t) {
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

void sleepwatch_perf_close(struct sleepwatch_target *t) {
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
