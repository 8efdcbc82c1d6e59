/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Blocking detection for processes the daemon started: the user-space
 * equivalent of the kernel's wq_worker_sleeping()/wq_worker_running() hooks.
 *
 * A target is one exec item's process and the processes and threads it
 * creates.  The target is "running" while at least one of its tasks is
 * runnable (running or preempted) and "blocked" once every task has gone to
 * sleep (S or D state) or exited.  Each transition is reported through the
 * target's callback, from the event loop.  A new target starts out running.
 *
 * Detectors:
 *   perf - perf_event_open(PERF_COUNT_SW_DUMMY, context_switch = 1,
 *          inherit = 1, enable_on_exec = 1, exclude_kernel = 1) on the child,
 *          watermark = 1 / wakeup_watermark = 1 so that every switch record
 *          wakes the loop; PERF_RECORD_MISC_SWITCH_OUT_PREEMPT tells a
 *          preemption from a block.  Event-driven; no polling.
 *   proc - samples /proc/TID/stat of the target's tasks at a short
 *          interval, only while at least one target exists, so an idle
 *          daemon has no timer armed: every task of the item's cgroup
 *          (cgroup.threads) where it has one (sleepwatch_target_use_cgroup()),
 *          else every thread of the main process (its children are not
 *          seen).  State R counts as running; S, D and everything else as
 *          blocked.
 *
 * When perf cannot be used for one target (perf_event_open or mmap refused,
 * e.g. the perf_event_mlock_kb budget of an unprivileged daemon is spent),
 * that target silently falls back to proc sampling.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct event_base;
struct sleepwatch;
struct sleepwatch_target;

enum sleepwatch_mode {
        SLEEPWATCH_PERF,
        SLEEPWATCH_PROC,
};

/* Called on every running <-> blocked transition of @t. */
typedef void (*sleepwatch_cb)(struct sleepwatch_target *t, bool running, void *userdata);
/* Called once for every batch of switch records (or /proc sample) read,
 * before the transitions it brings are reported, whether it brings any or
 * not: a task that blocked and woke up again within one batch shows no
 * transition, but it did switch. */
typedef void (*sleepwatch_batch_fn)(void *userdata);

/* Parses "perf" / "proc"; -EINVAL otherwise. */
int sleepwatch_mode_from_string(const char *s, enum sleepwatch_mode *ret);
const char *sleepwatch_mode_to_string(enum sleepwatch_mode mode);

/*
 * Creates the detector.  With SLEEPWATCH_PERF, probes perf_event_open on the
 * calling process first; if the kernel refuses, returns -EOPNOTSUPP (the
 * caller decides whether to fall back and logs that).
 */
/* SLEEPWATCH_SENTINELS (perf only): records wake nobody; the rings are read
 * when a busy CPU is about to idle (cm/sentinel.h), every few ms while a CPU
 * is busy (sleepwatch_cpu_busy()), and when half full.  Watched threads and
 * the daemon pay less for each context switch; a block on a CPU that is not
 * busy, and every wake-up, is seen only then. */
enum {
        SLEEPWATCH_SENTINELS = 1u << 0,
};

int sleepwatch_new(struct event_base *base, enum sleepwatch_mode mode, unsigned flags, struct sleepwatch **ret);
struct sleepwatch *sleepwatch_free(struct sleepwatch *sw);
enum sleepwatch_mode sleepwatch_get_mode(const struct sleepwatch *sw);
/* Whether the sentinels run (asked for, perf, and they could be made). */
bool sleepwatch_has_sentinels(const struct sleepwatch *sw);

/*
 * Starts watching @pid, a child that was forked but has not yet called
 * execve(): with perf, records start at its execve() (enable_on_exec), so
 * whatever the child does before exec is never reported.  The caller must
 * not let the child exec before this returns.
 */
int sleepwatch_watch(struct sleepwatch *sw, pid_t pid, sleepwatch_cb cb, void *userdata,
                     struct sleepwatch_target **ret);

/*
 * Starts watching one thread @tid of the running process @pid (a client's
 * callback worker), from now on: the target is running while that thread
 * is runnable.  Threads it creates are not followed.
 */
int sleepwatch_watch_thread(struct sleepwatch *sw, pid_t pid, pid_t tid, sleepwatch_cb cb, void *userdata,
                            struct sleepwatch_target **ret);

/* Stops watching and frees; no callback is made after this.  NULL is fine. */
struct sleepwatch_target *sleepwatch_target_free(struct sleepwatch_target *t);

bool sleepwatch_target_is_running(const struct sleepwatch_target *t);

/* Sets the batch hook (NULL: none). */
void sleepwatch_set_batch_hook(struct sleepwatch *sw, sleepwatch_batch_fn fn, void *userdata);

/* A pool on @cpu has a worker counted running or work pending (@busy), or
 * no longer (calls are counted: one false per true).  While a CPU is busy,
 * a block on it must be seen at once; otherwise nothing needs to be.
 * Returns whether that changed sleepwatch_cpu_watched() for @cpu. */
bool sleepwatch_cpu_busy(struct sleepwatch *sw, int cpu, bool busy);
/* Whether a switch on @cpu is read within a few ms, unasked: perf records,
 * and with SLEEPWATCH_SENTINELS only while @cpu is busy.  What a thread
 * leaves for cmwqd to find at its next switch is found in time only then. */
bool sleepwatch_cpu_watched(const struct sleepwatch *sw, int cpu);

/*
 * Brings every target's state up to date now, reporting what changed, where
 * records wait unread (with SLEEPWATCH_SENTINELS a wake-up on a busy CPU, or
 * anything on a CPU that is not busy, is otherwise seen only later).  For the
 * event loop's entry points, before they decide or answer from who runs: a
 * submission, a client's doorbell, a question about the pools.  Reports
 * re-enter the pools, so never from inside a pool operation; a no-op inside
 * a report, and without sentinels.  NULL is fine.
 */
void sleepwatch_catch_up(struct sleepwatch *sw);

/*
 * Looks at the target's tasks in /proc now and reports it blocked if none
 * that counts as running really is: for a target taken as running
 * (sleepwatch_target_assume_running()) that may never have woken, since a
 * task that stays asleep writes no switch record.  A task that /proc shows
 * runnable stays running.  Reports re-enter the caller's pools, as for
 * sleepwatch_catch_up(); @t may be freed by them.  NULL is fine.
 */
void sleepwatch_target_recheck(struct sleepwatch_target *t);

/* Whether @t is watched through perf (its switches are seen within
 * microseconds) rather than sampled from /proc. */
bool sleepwatch_target_is_perf(const struct sleepwatch_target *t);

/*
 * Takes the target as running from now on, without a report: what it did
 * before (records not yet read included) no longer counts.  For a thread
 * that is being woken to run (a callback worker granted its CPU): its last
 * switch-out must not be read later as the work blocking.
 */
void sleepwatch_target_assume_running(struct sleepwatch_target *t);

/*
 * When the thread of a target passed to sleepwatch_target_waking() ended
 * its wait (CLOCK_MONOTONIC ns), or UINT64_MAX if it has not yet.  Called
 * with the target's userdata while records are read: no reports, no
 * freeing.
 */
typedef uint64_t (*sleepwatch_wait_end_fn)(struct sleepwatch_target *t, void *userdata);

/*
 * After sleepwatch_target_assume_running() on a thread target: the caller
 * has just woken the thread from a wait that it may have entered only
 * after that call (a callback worker that demanded its CPU and waits for
 * the grant, which came at once).  Its switch-out into that wait is no
 * block: until the next sleepwatch_target_assume_running() (or a look at
 * /proc: sleepwatch_target_recheck(), lost records), a blocking switch-out
 * stamped before @fn says the wait ended is taken as that wait.
 * The /proc sampler needs no word (a woken thread shows runnable); neither
 * does a target that is no thread target.  NULL is fine.
 */
void sleepwatch_target_waking(struct sleepwatch_target *t, sleepwatch_wait_end_fn fn);

/*
 * Tells that the target's child has called execve() (the caller sees its
 * close-on-exec error pipe close).  A proc-mode target is not sampled before:
 * sleeps of the child's own set-up are not the item blocking.  Perf targets
 * need not be told (their events are enabled on exec).
 */
void sleepwatch_target_exec_seen(struct sleepwatch_target *t);

/*
 * The target's tasks are the tasks of this cgroup v2 directory (the item's
 * own cgroup, which its process was born in): a proc-mode target samples
 * them all, and its CPU time is the cgroup's.  @cgroup_dir_fd is duplicated.
 * Before sleepwatch_target_exec_seen() only.
 */
int sleepwatch_target_use_cgroup(struct sleepwatch_target *t, int cgroup_dir_fd);

/*
 * CPU time (µs, user + system) the target's tasks have used since its
 * execve() -- the same tasks whose blocking is reported, so that an item
 * whose main process waits while a child computes is seen computing: a perf
 * target counts with a task-clock event inherited like its switch events;
 * otherwise the item's cgroup (cpu.stat) tells, or, without one, the
 * scheduler's run time of the main process's live threads.  0 before
 * execve(), UINT64_MAX when it cannot be told.  Never decreases.
 * A perf thread target (sleepwatch_watch_thread()) is timed from its own
 * switch records, since it was watched, with no system call: a switch-out
 * not read yet makes it count up to that much more for a moment, and after
 * lost records /proc tells, carried on from the last figure.
 */
uint64_t sleepwatch_target_cpu_usec(struct sleepwatch_target *t);

/* Whether /proc shows thread @tid of process @pid runnable ('R') now;
 * false if it cannot be read. */
bool sleepwatch_thread_runnable(pid_t pid, pid_t tid);

/* The state letter of a /proc/PID/stat line ("R", "S", "D", ...), found
 * after the last ')' so that any command name parses; -EINVAL if malformed.
 * Exposed for the unit test. */
int sleepwatch_parse_proc_state(const char *stat_line, char *ret_state);
