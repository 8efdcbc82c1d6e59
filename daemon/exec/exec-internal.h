/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Inside daemon/exec/: what the four files that run one exec item share.
 *
 * exec.c (an item's process from exec_prepare() to its reaping),
 * exec-child.c (the child between fork and execve()), spawner.c (the
 * helper processes that make the child: the spawner and the rescuers) and
 * output.c (the captured stdout and stderr).  Only they include this
 * header; the rest of the daemon knows them through exec/exec.h.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "exec/exec.h"

/* What a failed child exits with, as a shell does for "command not found". */
#define EXEC_CHILD_FAILED 127

/* What the daemon tells a child on its go socket, one byte each, in this
 * order: the sleep detector is attached (the child may drop privileges now);
 * run the item (the child execs at once). */
#define EXEC_MSG_ATTACHED 'a'
#define EXEC_MSG_GO 'g'

struct exec_stream {
        int fd;                         /* read end of the child's stdout/stderr pipe */
        struct event ev;
        bool ev_assigned;
        char *buf;
        size_t len;
        size_t cap;
        size_t limit;
        bool truncated;
};

/* Everything the child needs, prepared by the parent before fork(). */
struct exec_child {
        const char *program;
        bool absolute;
        char *const *argv;
        char *const *envp;
        const char *cwd;
        uid_t uid;
        bool drop;                      /* not the daemon's uid: look up and drop */
        int cpu;
        int nice;
        int stdin_fd;
        int stdout_fd;
        int stderr_fd;
        int go_fd;
        int error_fd;
        int cgroup_fd;                  /* the item cgroup's cgroup.procs, or -1 */
        bool signals_default;           /* every disposition SIG_DFL, mask empty
                                         * already (the spawner's child, a rescuer) */
};

/* ---- output.c: the captured output ---------------------------------------- */

void exec_stream_init(struct exec_stream *s, size_t limit);
/* Closes @s and frees what it holds. */
void exec_stream_done(struct exec_stream *s);
/* Hands the captured bytes out, trimmed to what was read: the daemon keeps
 * results of thousands of finished items, most of which printed nothing. */
char *exec_stream_take(struct exec_stream *s);
/* What is still in the pipe once the process has ended, in a few reads. */
void exec_stream_drain(struct exec_stream *s);
/* The stream's event: one read per wake-up. */
void exec_stream_on_read(evutil_socket_t fd, short what, void *userdata);

/* ---- exec-child.c: the child between fork and execve() -------------------- */

/* Sets the child up as @c says and execs; never returns. */
_Noreturn void exec_child(const struct exec_child *c);
/* Tells the daemon @error through @error_fd and exits EXEC_CHILD_FAILED. */
_Noreturn void exec_child_fail(int error_fd, int error);
/* Closes every fd from 3 up, except @a and @b (both >= 3). */
void exec_child_close_all_except(int a, int b);
/* Back to SIG_DFL, also a signal glibc reserves. */
void exec_child_reset_signal(int sig);

/* ---- spawner.c: the spawner and the rescuers ------------------------------ */

/* Asks the spawner for the child.  Returns its pid; -EAGAIN/-ENOMEM when it
 * could not be created; -ENOTCONN (or another errno) when the spawner is not
 * usable, and the caller forks itself. */
int exec_spawner_spawn(const struct exec_child *c, int cgroup_dirfd);
/* The same without waiting (exec_prepare() with spec->ahead): sends the
 * request, whose reply comes on exec_spawner_fd() after those of the
 * requests sent before it.  Returns 0, or -EAGAIN/-ENOMEM or -ENOTCONN as
 * above when nothing was sent.  exec_spawner_receive() reads the next
 * reply: the pid, -EAGAIN/-ENOMEM; -EPROTO for a reply that says the
 * spawner cannot serve (it is not used again); -ENOTCONN when it is gone;
 * or, unless @wait, -EINPROGRESS when the reply has not come yet.  After
 * -EPROTO or -ENOTCONN, the caller calls exec_spawner_stop(). */
int exec_spawner_send(const struct exec_child *c, int cgroup_dirfd);
int exec_spawner_fd(void);
int exec_spawner_receive(bool wait);
/* Kills and reaps the spawner (one this process started), then lets
 * exec_spawn_lost() read what it had written. */
void exec_spawner_stop(void);

/* ---- exec.c, for spawner.c ----------------------------------------------- */

/* The spawner is gone (killed and reaped, its socket still open): the
 * replies it wrote are read, the processes whose replies will not come are
 * failed with -EAGAIN (the pool tries again).  Their children, if the
 * spawner made them, end when their go socket closes. */
void exec_spawn_lost(void);
/* Inherited through fork(): the requests are our parent's; forgotten
 * without touching them. */
void exec_spawn_forget(void);
/* Reads every reply still due, waiting for them. */
void exec_spawn_settle(void);
/* Runs @c in @r, which is used up.  Returns the pid, or -errno. */
int exec_rescuer_spawn(struct exec_rescuer *r, const struct exec_child *c, int cgroup_dirfd);
