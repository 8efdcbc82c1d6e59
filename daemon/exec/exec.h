/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Running one exec work item: a child process started as the submitting user,
 * its output captured, reaped through a pidfd.
 *
 * The child, before execve(), in this order:
 *   - signal dispositions and mask reset (a process of the spawner or a
 *     rescuer has them so from spawn_helper_setup() already),
 *   - joins its own cgroup first, when spec->cgroups is given (see exec/cgroup.h),
 *   - gets a session of its own (setsid()), so it has no controlling
 *     terminal (nothing of the terminal cmwqd may have been started from),
 *     and so its own process group, so that killing the item kills its
 *     whole process tree (with a cgroup, also what left the group with a
 *     setsid() of its own),
 *   - stdin from a memfd holding the payload (or /dev/null), stdout and
 *     stderr to pipes the daemon reads, all other fds closed,
 *   - is pinned to @cpu when cpu >= 0 (sched_setaffinity),
 *   - gets nice @nice (only lowered below 0 while still privileged),
 *   - gets the kernel's default RLIMIT_NOFILE soft limit (1024) back, no
 *     resource limit above PID 1's, and a new, empty session keyring:
 *     nothing of the daemon's,
 *   - unless the daemon already runs as @uid: looks up @uid's primary group
 *     and supplementary groups in the user database (getpwuid_r(),
 *     getgrouplist(), as su, cron and systemd's User= do); a uid with no
 *     entry fails with EXEC_ERRNO_NO_USER,
 *   - waits until the daemon has attached the sleep detector,
 *   - drops to the submitter: setgroups(), setresgid(), setresuid()
 *     (skipped when the daemon already runs as @uid: it keeps the daemon's
 *     groups then),
 *   - chdir(cwd) as that user,
 *   - waits for "go" (exec_go()), then at once
 *     execve(): an absolute program path directly; a bare name with
 *     execvpe() on the PATH of @envp.
 * An execve() failure is reported to the daemon through a close-on-exec pipe
 * and recorded as exec_errno (the child exits 127).
 *
 * When the main process exits, whatever is left in its process group and
 * in its cgroup is killed (SIGKILL), remaining output is read, and @done is
 * called once.  The cgroup is removed as soon as it is empty (from the event
 * loop, if killed processes take a moment to die).
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cm/sleepwatch.h"

struct cgroup_root;
struct pids_root;
struct event_base;
struct exec_proc;
struct exec_rescuer;

/* Default bound of captured bytes per stream; more is read and discarded and
 * the stream is flagged truncated. */
#define EXEC_OUTPUT_LIMIT_DEFAULT (64u * 1024u)

struct exec_spec {
        const char *program;            /* absolute path, or a bare name */
        char *const *argv;              /* NULL-terminated, argv[0] as given */
        char *const *envp;              /* NULL-terminated */
        const char *cwd;                /* absolute; NULL: "/" */
        const void *payload;            /* stdin; NULL: /dev/null */
        size_t payload_len;
        uid_t uid;                      /* gid and groups: from the user database */
        int cpu;                        /* -1: not pinned */
        int nice;
        uint64_t timeout_usec;          /* 0: none */
        size_t output_limit;            /* 0: EXEC_OUTPUT_LIMIT_DEFAULT */
        struct cgroup_root *cgroups;    /* NULL: process group only */
        struct pids_root *pids;         /* task limits in a pids cgroup (exec/pids.h); NULL: by
                                         *   RLIMIT_NPROC = user_tasks for uid != 0 */
        uint64_t item_tasks;            /* 0: no limit */
        uint64_t user_tasks;            /* 0: no limit; never for uid 0 */
        struct exec_rescuer **rescuer;  /* may run the item when no process can be
                                         *   created; then used up: set to NULL */
        bool ahead;                     /* exec_prepare() for later: it does not wait
                                         *   for the spawner to tell the pid */
};

/* The exec_errno of an item whose uid has no entry in the user database:
 * cmwqd cannot tell its groups, so it runs nothing as it.  No step of the
 * child fails with ESRCH otherwise.  exec_strerror() says so. */
#define EXEC_ERRNO_NO_USER ESRCH

/* Or'ed into the errno of an item whose process could not enter its
 * working directory (as its user), rather than run its program. */
#define EXEC_ERRNO_IN_CWD 0x10000

/* What an item's exec_errno means, for a person (without the step). */
const char *exec_strerror(int exec_errno);

struct exec_result {
        int exit_status;                /* valid when signal == 0 */
        int signal;                     /* the terminating signal, or 0 */
        int exec_errno;                 /* execve() (or setup) failed with this errno, or 0 */
        uint64_t cpu_usec;              /* user + system time of the process tree: the
                                         *   cgroup's, or the main process's and the
                                         *   children it waited for */
        uint64_t started_usec;          /* CLOCK_REALTIME */
        uint64_t finished_usec;
        bool timed_out;                 /* killed because timeout_usec expired */
        bool killed;                    /* killed by exec_proc_kill() */
        char *out;                      /* captured stdout (not NUL-terminated); */
        size_t out_len;                 /*   the callback may take it: set out = NULL */
        bool out_truncated;
        char *err;
        size_t err_len;
        bool err_truncated;
};

/* Called once, from the event loop, when the item's process has ended.  The
 * exec_proc is freed by exec after this returns. */
typedef void (*exec_done_cb)(struct exec_proc *p, struct exec_result *r, void *userdata);

/*
 * Starts the item (its process is made by the spawner, or forked, or is
 * spec->rescuer when neither can be created).  @sw (may be NULL in tests) watches it for
 * blocking; transitions go to @sleep_cb.  Returns a negative errno when the
 * process could not be created (fork refused: -EAGAIN/-ENOMEM; or its cgroup:
 * e.g. -EAGAIN at cgroup.max.descendants), in which case neither callback is
 * ever made.
 */
int exec_start(struct event_base *base, struct sleepwatch *sw, const struct exec_spec *spec,
               exec_done_cb done, sleepwatch_cb sleep_cb, void *userdata,
               struct exec_proc **ret);

/*
 * exec_start() in two steps, so that an item waiting for its turn can be
 * made ready ahead (the kernel's pools keep an idle worker for the same
 * reason): exec_prepare() creates the process, puts it in its cgroup, pins
 * it, attaches @sw and lets it become the submitter and enter @cwd; it then
 * waits, before execve(), for exec_go().  Nothing runs of the item's, no
 * callback is made and no timeout counts until exec_go(), which only
 * registers with the loop and releases the child: its execve() follows at
 * once.  A failure of the set-up (e.g. a @cwd the user may not enter)
 * shows after exec_go(), as exec_errno, the same as with exec_start().
 *
 * A prepared process that is not to run is given back with
 * exec_proc_discard() (killed and reaped there: it is quick, the child has
 * not exec'd).  exec_go() fails with -EINVAL (not prepared) or -ENOMEM
 * (the loop refused an event); the process must then be discarded.
 *
 * With spec->ahead, exec_prepare() only sends the spawner its request and
 * returns: the rest of the set-up (the pidfd, task limits, @sw) is done when
 * the spawner's reply comes, from the loop.  exec_go() waits for that reply
 * if it has not come, and then also fails with what the spawn failed with
 * (-EAGAIN, -ENOMEM), as exec_proc_ready() tells before: the caller makes
 * the process the ordinary way then.
 */
int exec_prepare(struct event_base *base, struct sleepwatch *sw, const struct exec_spec *spec,
                 exec_done_cb done, sleepwatch_cb sleep_cb, void *userdata,
                 struct exec_proc **ret);
int exec_go(struct exec_proc *p);
struct exec_proc *exec_proc_discard(struct exec_proc *p);
/* A process made ahead: waits for the spawner's reply if it has not come;
 * 0 if the process is made, else why not (then discard it). */
int exec_proc_ready(struct exec_proc *p);

/* When exec_go() released it (CLOCK_REALTIME, µs); 0 before. */
uint64_t exec_proc_started_usec(const struct exec_proc *p);

/*
 * Starts the spawner, the small helper process that creates the items'
 * processes (see exec/spawner.c), now: best called early, while the caller's heap is
 * small, since it is a fork() of the caller.  Optional: exec_start() starts
 * it when needed, and forks items itself if it cannot.  Idempotent.
 */
int exec_spawner_start(void);
/* Reads the spawner's replies still due (the processes made ahead and
 * given back are killed and reaped then), then stops the spawner and reaps
 * it, so that no zombie outlives the daemon.  After the last item is gone,
 * before its cgroup root (exec_spec.cgroups) is freed. */
void exec_spawner_shutdown(void);

/* SIGKILLs the item's process group and cgroup.  @done still follows, with
 * killed set. */
void exec_proc_kill(struct exec_proc *p);

pid_t exec_proc_pid(const struct exec_proc *p);

/* CPU time (µs) the item has used since its execve(), over the tasks its
 * blocking is watched on (sleepwatch_target_cpu_usec(): its whole tree where
 * perf or its cgroup can tell; the main process alone without a sleep
 * detector): 0 before, UINT64_MAX when it cannot be read.  What the child
 * spent setting itself up as the daemon's fork (page faults, leaving the
 * daemon's memory at exec) is not the item's. */
uint64_t exec_proc_cpu_usec(const struct exec_proc *p);

/* For shutdown: kills the process group and cgroup and frees without calling
 * @done.  The cgroup is removed when empty, at the latest by
 * cgroup_root_free(). */
struct exec_proc *exec_proc_abandon(struct exec_proc *p);

/*
 * Finds @name among the plugin directories.  Absolute paths are returned as
 * they are; a name with a '/' that is not absolute is -EINVAL; a bare name is
 * looked up in each of @plugin_dirs (NULL-terminated) for a regular file; if
 * none has it, *ret_path is set to NULL and 0 returned (the child then looks
 * it up in PATH).  *ret_path is malloc()ed.
 */
int exec_resolve_program(const char *name, char *const *plugin_dirs, char **ret_path);

/*
 * A rescuer: a process made now, that waits to become one item whose own
 * process cannot be created (fork refused: RLIMIT_NPROC, a cgroup's
 * pids.max, no memory), as the kernel's rescuer thread of a WQ_MEM_RECLAIM
 * workqueue.  Give it to exec_start() in spec->rescuer.  See exec/spawner.c.
 */
struct exec_rescuer;
int exec_rescuer_new(struct exec_rescuer **ret);
/* Ends an unused rescuer (killed and reaped). */
struct exec_rescuer *exec_rescuer_free(struct exec_rescuer *r);
