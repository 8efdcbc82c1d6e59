/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * Why fork() and not posix_spawn() or vfork():
 *
 *  - posix_spawn() cannot change the credentials of the child: it has no
 *    attribute for setgroups()/setresgid()/setresuid() (nor for
 *    sched_setaffinity()), and glibc's posix_spawn_file_actions_addchdir_np()
 *    would chdir() with the daemon's privileges, not the user's.  An exec
 *    item must never run with more privilege than its submitter.
 *  - The child must stop between fork and execve() until the daemon has
 *    attached the sleep detector (perf's enable_on_exec only works if the
 *    event exists before the exec).  vfork() suspends the parent until the
 *    child execs, so the parent could never attach anything: a deadlock.
 *
 * Reaping goes through a pidfd registered with the event loop, never through
 * SIGCHLD, so nothing here blocks the loop; the process group of a finished
 * item is killed while its leader is still an unreaped zombie, which pins
 * the pid and therefore the group id against reuse.
 *
 * The child is not forked by the daemon itself but by the spawner, a small
 * helper process (spawner.c), with clone3(CLONE_PARENT), so it
 * is still the daemon's child and everything above holds.  With a cgroup
 * (spec->cgroups), CLONE_INTO_CGROUP creates it inside; where the kernel
 * refuses that (before 5.7), the child joins by writing "0" into its
 * cgroup.procs before anything else, while still privileged.  The process
 * group stays: it is what works where no cgroup can be had, and killpg() is
 * cheap.
 *
 * The child itself is exec-child.c, the spawner and the rescuers
 * spawner.c, the captured output output.c; they share exec-internal.h.
 */

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "base/cpus.h"
#include "exec/cgroup.h"
#include "exec/exec-internal.h"
#include "exec/pids.h"
#include "list.h"
#include "util.h"

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

struct exec_proc {
        struct event_base *base;
        pid_t pid;
        int pidfd;
        int errfd;                      /* read end of the child's error pipe */
        int exec_errno;                 /* what came through it, once read */
        struct event ev_errfd;          /* EOF there: the child has exec'd */
        bool ev_errfd_assigned;
        bool execd;
        uint64_t cpu_at_exec_usec;      /* the child's own set-up, not the item's */
        struct event ev_exit;
        bool ev_exit_assigned;
        struct event ev_timer;
        bool ev_timer_assigned;
        struct exec_stream out;
        struct exec_stream err;
        struct sleepwatch_target *target;
        struct cgroup_item *cgroup;     /* NULL: process group only */
        struct pids_item *pids;         /* its task limit's cgroup; NULL: none */
        exec_done_cb done;
        void *userdata;
        uint64_t started_usec;
        bool reaped;                    /* wait4() collected it: pid may be reused now */
        bool timed_out;
        bool killed;
        bool dispatching;               /* inside the done callback */
        int go_fd;                      /* our end of the child's go socket, until "go" */
        uint64_t timeout_usec;
        uint64_t timeout_at_usec;       /* CLOCK_MONOTONIC: when it times out */
        /* Made ahead (spec->ahead): on exec_spawning until the spawner's
         * reply, which exec_go() waits for if it has not come. */
        struct list_head spawn_entry;
        int spawn_error;                /* the spawn failed: exec_go() says so */
        bool discarded;                 /* given back before the reply: freed with it */
        /* What exec_proc_attach() needs once the pid is known. */
        struct sleepwatch *sw;
        sleepwatch_cb sleep_cb;
        struct pids_root *pids_root;
        uid_t uid;
        uint64_t item_tasks;
        uint64_t user_tasks;
};

/* The processes made ahead whose pid the spawner has yet to tell, in the
 * order of the requests, which is the order of its replies; and the
 * event that reads them as they come. */
static struct list_head exec_spawning = LIST_HEAD_INIT(exec_spawning);
static struct event *exec_spawn_event;

/* At most this many requests without their replies read: a spawner whose
 * replies nobody reads stops reading requests once its socket is full, and
 * the loop would then wait for it forever in a send. */
#define EXEC_SPAWN_AHEAD_MAX 32u

static void exec_proc_kill_group(struct exec_proc *p) {
        /* Only while the leader is unreaped: then the pid, and with it the
         * process group id, cannot belong to anybody else. */
        if (p->pid <= 0 || p->reaped)
                return;
        (void) killpg(p->pid, SIGKILL);
        /* The leader itself, should it have left its group. */
        (void) kill(p->pid, SIGKILL);
}

/* The group, and all of the cgroup, where what left the group still is. */
static void exec_proc_kill_tree(struct exec_proc *p) {
        exec_proc_kill_group(p);
        if (p->cgroup)
                (void) cgroup_item_kill(p->cgroup);
}

static bool exec_proc_has_exited(const struct exec_proc *p) {
        siginfo_t si = {};

        if (p->reaped)
                return true;
        if (waitid(P_PID, p->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
                return false;
        return si.si_pid != 0;
}

/* CPU time of the main process so far, from the scheduler's own accounting
 * (nanoseconds in /proc/PID/schedstat); UINT64_MAX if it cannot be read. */
static uint64_t exec_proc_main_cpu_usec(const struct exec_proc *p) {
        char path[64], buf[128];
        unsigned long long ns;
        ssize_t n;
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/schedstat", (int) p->pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return UINT64_MAX;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return UINT64_MAX;
        buf[n] = 0;
        if (sscanf(buf, "%llu", &ns) != 1)
                return UINT64_MAX;
        return ns / 1000;
}

uint64_t exec_proc_cpu_usec(const struct exec_proc *p) {
        uint64_t now;

        /* Over the tasks whose blocking is watched, not the main process
         * alone: a shell waiting for a computing child computes. */
        if (p->target)
                return sleepwatch_target_cpu_usec(p->target);
        if (!p->execd)
                return 0;
        now = exec_proc_main_cpu_usec(p);
        if (now == UINT64_MAX || p->cpu_at_exec_usec == UINT64_MAX)
                return UINT64_MAX;
        return now > p->cpu_at_exec_usec ? now - p->cpu_at_exec_usec : 0;
}

/* The item's task limits, before it may exec (so before anything of it can
 * fork): its own pids cgroup, or RLIMIT_NPROC for its user.  An item never
 * runs without them. */
static int exec_proc_limit_tasks(struct exec_proc *p) {
        if (p->pids_root)
                return pids_item_attach(p->pids_root, p->uid, p->pid, p->item_tasks, p->user_tasks, &p->pids);
        if (p->user_tasks > 0 && p->uid != 0) {
                struct rlimit rl = { p->user_tasks, p->user_tasks };

                if (prlimit(p->pid, RLIMIT_NPROC, &rl, NULL) < 0)
                        return -errno;
        }
        return 0;
}

/* The error pipe is close-on-exec: EOF on it means the child has exec'd
 * the item's program, an errno means setting up or exec failed.  Only from
 * then on do the child's sleeps mean anything to the sleep detector: before,
 * it may sleep in the kernel for its own set-up (joining its cgroup waits for
 * an RCU grace period, moving to its CPU waits for the migration). */
static void exec_proc_on_errfd(evutil_socket_t fd, short what, void *userdata) {
        struct exec_proc *p = userdata;
        ssize_t n;
        int e = 0;

        n = read(fd, &e, sizeof(e));
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                (void) event_add(&p->ev_errfd, NULL);
                return;
        }
        if (n == (ssize_t) sizeof(e) && e > 0) {
                p->exec_errno = e;
                return;
        }
        if (n != 0)
                return;
        p->execd = true;
        p->cpu_at_exec_usec = exec_proc_main_cpu_usec(p);
        if (p->target)
                sleepwatch_target_exec_seen(p->target);
}

static struct exec_proc *exec_proc_free(struct exec_proc *p) {
        if (!p)
                return NULL;
        if (list_linked(&p->spawn_entry)) {
                /* Its reply is still due: it is freed then (killed and
                 * reaped, if the spawner made it). */
                p->discarded = true;
                return NULL;
        }

        p->target = sleepwatch_target_free(p->target);
        if (p->ev_errfd_assigned)
                event_del(&p->ev_errfd);
        if (p->ev_exit_assigned)
                event_del(&p->ev_exit);
        if (p->ev_timer_assigned)
                event_del(&p->ev_timer);
        exec_stream_done(&p->out);
        exec_stream_done(&p->err);
        if (p->pid > 0 && !p->reaped) {
                exec_proc_kill_group(p);
                /* Usually too early; at shutdown a zombie is acceptable. */
                if (waitpid(p->pid, NULL, WNOHANG) == p->pid)
                        p->reaped = true;
        }
        /* Kills what is left in it, and removes it once empty. */
        p->cgroup = cgroup_item_release(p->cgroup, p->base);
        p->pids = pids_item_release(p->pids);
        if (p->pidfd >= 0)
                close(p->pidfd);
        if (p->errfd >= 0)
                close(p->errfd);
        if (p->go_fd >= 0)
                close(p->go_fd);
        free(p);
        return NULL;
}

static void exec_proc_freep(struct exec_proc **p) {
        exec_proc_free(*p);
}

static void exec_proc_on_exit(evutil_socket_t fd, short what, void *userdata) {
        struct exec_proc *p = userdata;
        struct exec_result r = {};
        struct rusage ru = {};
        int status = 0, e = 0;
        pid_t k;

        /* Leftovers of the group first, while the zombie leader still pins
         * the group id. */
        exec_proc_kill_group(p);

        do
                k = wait4(p->pid, &status, WNOHANG, &ru);
        while (k < 0 && errno == EINTR);
        if (k == 0) {
                /* Not exited after all; wait for the next notification. */
                (void) event_add(&p->ev_exit, NULL);
                return;
        }
        p->reaped = true;
        p->target = sleepwatch_target_free(p->target);
        if (p->ev_timer_assigned)
                event_del(&p->ev_timer);

        if (k < 0)
                /* Somebody else reaped it (ECHILD): no status to report. */
                r.exit_status = -1;
        else if (WIFSIGNALED(status))
                r.signal = WTERMSIG(status);
        else
                r.exit_status = WEXITSTATUS(status);

        /* The whole tree's time, also of what the leader never waited for;
         * then what outlived the leader is killed, and the cgroup goes. */
        if (!p->cgroup || cgroup_item_cpu_usec(p->cgroup, &r.cpu_usec) < 0)
                r.cpu_usec = (uint64_t) ru.ru_utime.tv_sec * USEC_PER_SEC + (uint64_t) ru.ru_utime.tv_usec +
                             (uint64_t) ru.ru_stime.tv_sec * USEC_PER_SEC + (uint64_t) ru.ru_stime.tv_usec;
        p->cgroup = cgroup_item_release(p->cgroup, p->base);
        p->pids = pids_item_release(p->pids);

        exec_stream_drain(&p->out);
        exec_stream_drain(&p->err);

        if (p->exec_errno)
                r.exec_errno = p->exec_errno;
        else if (read(p->errfd, &e, sizeof(e)) == (ssize_t) sizeof(e) && e > 0)
                r.exec_errno = e;
        r.started_usec = p->started_usec;
        r.finished_usec = now_usec(CLOCK_REALTIME);
        r.timed_out = p->timed_out;
        r.killed = p->killed;
        r.out = exec_stream_take(&p->out);
        r.out_len = p->out.len;
        r.out_truncated = p->out.truncated;
        r.err = exec_stream_take(&p->err);
        r.err_len = p->err.len;
        r.err_truncated = p->err.truncated;

        p->dispatching = true;
        p->done(p, &r, p->userdata);
        free(r.out);
        free(r.err);
        exec_proc_free(p);
}

static void exec_proc_on_timeout(evutil_socket_t fd, short what, void *userdata) {
        struct exec_proc *p = userdata;
        uint64_t now = now_usec(CLOCK_MONOTONIC);

        /* An item that already exited on its own did not time out, even if
         * the loop has not seen its pidfd yet. */
        if (exec_proc_has_exited(p))
                return;
        /* The loop's timers may go by a coarse clock (cmwqd's do with the
         * perf detector), up to a jiffy ahead of this one: never early. */
        if (now < p->timeout_at_usec) {
                struct timeval tv = timeval_from_usec(p->timeout_at_usec - now);

                (void) evtimer_add(&p->ev_timer, &tv);
                return;
        }
        p->timed_out = true;
        exec_proc_kill_tree(p);
}

void exec_proc_kill(struct exec_proc *p) {
        if (!p || exec_proc_has_exited(p))
                return;
        p->killed = true;
        exec_proc_kill_tree(p);
}

pid_t exec_proc_pid(const struct exec_proc *p) {
        return p ? p->pid : -1;
}

struct exec_proc *exec_proc_abandon(struct exec_proc *p) {
        if (!p)
                return NULL;
        if (p->dispatching)
                /* Called from the done callback: freed once that returns. */
                return NULL;
        return exec_proc_free(p);
}

int exec_resolve_program(const char *name, char *const *plugin_dirs, char **ret_path) {
        char *path;

        if (!name || !*name)
                return -EINVAL;

        if (name[0] == '/') {
                path = strdup(name);
                if (!path)
                        return -ENOMEM;
                *ret_path = path;
                return 0;
        }
        if (strchr(name, '/'))
                return -EINVAL;

        for (char *const *d = plugin_dirs; d && *d; d++) {
                struct stat st;

                if (asprintf(&path, "%s/%s", *d, name) < 0)
                        return -ENOMEM;
                /* The plugin directories are root's; a symlink in one is
                 * the administrator's choice, so stat(), not lstat(). */
                if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                        *ret_path = path;
                        return 0;
                }
                free(path);
        }

        *ret_path = NULL;
        return 0;
}

/* Whether the child must change credentials: not when the daemon runs as
 * @uid already (a user's own cmwqd, or root's items in the system one): the
 * item keeps the daemon's groups then, which a process of that uid could
 * give itself anyway. */
static int exec_need_drop(uid_t uid, bool *ret) {
        uid_t ru, eu, su;

        if (getresuid(&ru, &eu, &su) < 0)
                return -errno;
        *ret = ru != uid || eu != uid || su != uid;
        return 0;
}

static int exec_open_stdin(const void *payload, size_t len, int *ret_fd) {
        _cleanup_(closep) int fd = -1;
        const char *p = payload;

        if (!payload) {
                fd = open("/dev/null", O_RDONLY | O_CLOEXEC | O_NOCTTY);
                if (fd < 0)
                        return -errno;
                *ret_fd = TAKE_FD(fd);
                return 0;
        }

        fd = memfd_create("cmwq-payload", MFD_CLOEXEC | MFD_NOEXEC_SEAL);
        if (fd < 0 && errno == EINVAL)
                /* Kernels before 6.3 do not know MFD_NOEXEC_SEAL. */
                fd = memfd_create("cmwq-payload", MFD_CLOEXEC);
        if (fd < 0)
                return -errno;

        /* Written here, completely, so that the child never waits for us. */
        for (size_t off = 0; off < len;) {
                ssize_t n = write(fd, p + off, len - off);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                off += (size_t) n;
        }
        if (lseek(fd, 0, SEEK_SET) < 0)
                return -errno;

        *ret_fd = TAKE_FD(fd);
        return 0;
}

static int exec_fd_close(int fd) {
        if (fd >= 0)
                close(fd);
        return -1;
}

static void exec_close_pair(int fds[2]) {
        for (int i = 0; i < 2; i++)
                if (fds[i] >= 0) {
                        close(fds[i]);
                        fds[i] = -1;
                }
}

const char *exec_strerror(int exec_errno) {
        if (exec_errno == EXEC_ERRNO_NO_USER)
                return "the submitting uid has no entry in the user database, so its groups are unknown";
        return strerror(exec_errno & ~EXEC_ERRNO_IN_CWD);
}
static void exec_close_pairp(int (*fds)[2]) {
        exec_close_pair(*fds);
}

/* For failures after fork() but before "go": the child has not exec'd and
 * cannot block SIGKILL, so waiting for it is quick. */
static void exec_proc_abort(struct exec_proc *p) {
        (void) kill(p->pid, SIGKILL);
        while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        p->reaped = true;
}

/* The pid is known: the pidfd, the task limits and the sleep detector,
 * then "attached", after which the child becomes the submitter and waits
 * for "go". */
static int exec_proc_attach(struct exec_proc *p) {
        int cgroup_dirfd, r;

        p->pidfd = (int) syscall(SYS_pidfd_open, p->pid, 0);
        if (p->pidfd < 0)
                return -errno;
        r = exec_proc_limit_tasks(p);
        if (r < 0)
                return r;
        if (p->sw) {
                r = sleepwatch_watch(p->sw, p->pid, p->sleep_cb, p->userdata, &p->target);
                if (r < 0)
                        return r;
                /* Its cgroup holds every task of the item: what /proc
                 * sampling watches and whose CPU time counts. */
                if (p->cgroup && cgroup_item_open_dir(p->cgroup, &cgroup_dirfd) >= 0) {
                        (void) sleepwatch_target_use_cgroup(p->target, cgroup_dirfd);
                        close(cgroup_dirfd);
                }
        }
        /* Should it be gone already, exec_go()'s pidfd tells. */
        (void) send(p->go_fd, (char[]) { EXEC_MSG_ATTACHED }, 1, MSG_NOSIGNAL);
        return 0;
}

static void exec_spawn_unwatch(void);

/* The spawner's reply for @p, the oldest request: its pid, or -errno. */
static void exec_spawn_done(struct exec_proc *p, int r) {
        list_del_init(&p->spawn_entry);
        if (list_empty(&exec_spawning))
                exec_spawn_unwatch();   /* also from its own callback: not used after */
        if (r > 0) {
                p->pid = r;
                r = p->discarded ? -ECANCELED : exec_proc_attach(p);
                if (r < 0)
                        exec_proc_abort(p);
        }
        if (p->discarded)
                exec_proc_free(p);
        else if (r < 0)
                p->spawn_error = r;
}

/* Reads the next reply (@wait: waiting for it).  False when none has come. */
static bool exec_spawn_collect_one(bool wait) {
        int r;

        if (list_empty(&exec_spawning))
                return false;
        r = exec_spawner_receive(wait);
        if (r == -EINPROGRESS)
                return false;
        /* -EPROTO: this one could not be made, nor will any be there. */
        if (r != -ENOTCONN)
                exec_spawn_done(list_first_entry(&exec_spawning, struct exec_proc, spawn_entry),
                                r == -EPROTO ? -EAGAIN : r);
        if (r == -EPROTO || r == -ENOTCONN)
                exec_spawner_stop();    /* the others: exec_spawn_lost() */
        return true;
}

static void exec_spawn_on_reply(evutil_socket_t fd, short what, void *userdata) {
        while (exec_spawn_collect_one(false))
                ;
}

/* Replies are read as they come, by an event that exists while some are
 * due (so that nothing of it outlives a loop that has no more to do).
 * Without it, exec_proc_ready() reads a reply itself. */
static void exec_spawn_watch(struct event_base *base) {
        int fd = exec_spawner_fd();

        if (exec_spawn_event || fd < 0)
                return;
        exec_spawn_event = event_new(base, fd, EV_READ | EV_PERSIST, exec_spawn_on_reply, NULL);
        if (exec_spawn_event && event_add(exec_spawn_event, NULL) < 0) {
                event_free(exec_spawn_event);
                exec_spawn_event = NULL;
        }
}

static void exec_spawn_unwatch(void) {
        if (exec_spawn_event) {
                event_free(exec_spawn_event);
                exec_spawn_event = NULL;
        }
}

void exec_spawn_lost(void) {
        exec_spawn_unwatch();
        /* What it wrote before it went answers the oldest requests. */
        while (!list_empty(&exec_spawning)) {
                int r = exec_spawner_receive(false);

                if (r == -EINPROGRESS || r == -ENOTCONN)
                        break;
                exec_spawn_done(list_first_entry(&exec_spawning, struct exec_proc, spawn_entry),
                                r == -EPROTO ? -EAGAIN : r);
        }
        /* The others' children may exist, unknown to us: they see their go
         * socket close when the process is freed, and end. */
        while (!list_empty(&exec_spawning))
                exec_spawn_done(list_first_entry(&exec_spawning, struct exec_proc, spawn_entry), -EAGAIN);
}

void exec_spawn_forget(void) {
        list_init(&exec_spawning);
        exec_spawn_event = NULL;
}

void exec_spawn_settle(void) {
        while (exec_spawn_collect_one(true))
                ;
}

int exec_prepare(struct event_base *base, struct sleepwatch *sw, const struct exec_spec *spec,
                 exec_done_cb done, sleepwatch_cb sleep_cb, void *userdata,
                 struct exec_proc **ret) {
        static char *const empty_env[] = { NULL };
        _cleanup_(exec_proc_freep) struct exec_proc *p = NULL;
        _cleanup_(closep) int stdin_fd = -1;
        _cleanup_(closep) int cgroup_fd = -1;
        _cleanup_(closep) int cgroup_dirfd = -1;
        _cleanup_(exec_close_pairp) int out_pipe[2] = { -1, -1 };
        _cleanup_(exec_close_pairp) int err_pipe[2] = { -1, -1 };
        _cleanup_(exec_close_pairp) int error_pipe[2] = { -1, -1 };
        _cleanup_(exec_close_pairp) int go[2] = { -1, -1 };
        struct exec_child c;
        sigset_t all, saved;
        bool drop = false;
        size_t limit;
        pid_t pid;
        int r;

        if (!base || !spec || !done || !ret)
                return -EINVAL;
        if (!spec->program || !*spec->program || !spec->argv || !spec->argv[0])
                return -EINVAL;
        if (spec->program[0] != '/' && strchr(spec->program, '/'))
                return -EINVAL;
        if (spec->cwd && spec->cwd[0] != '/')
                return -EINVAL;
        if (spec->cpu >= CPU_SETSIZE)
                return -EINVAL;

        r = exec_need_drop(spec->uid, &drop);
        if (r < 0)
                return r;

        limit = spec->output_limit > 0 ? spec->output_limit : EXEC_OUTPUT_LIMIT_DEFAULT;

        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->base = base;
        p->pid = -1;
        p->pidfd = -1;
        p->errfd = -1;
        p->go_fd = -1;
        p->timeout_usec = spec->timeout_usec;
        p->done = done;
        p->userdata = userdata;
        list_init(&p->spawn_entry);
        p->sw = sw;
        p->sleep_cb = sleep_cb;
        p->pids_root = spec->pids;
        p->uid = spec->uid;
        p->item_tasks = spec->item_tasks;
        p->user_tasks = spec->user_tasks;
        exec_stream_init(&p->out, limit);
        exec_stream_init(&p->err, limit);

        if (spec->cgroups) {
                r = cgroup_item_new(spec->cgroups, &p->cgroup);
                if (r < 0)
                        return r;
                r = cgroup_item_open_dir(p->cgroup, &cgroup_dirfd);
                if (r < 0)
                        return r;
        }

        r = exec_open_stdin(spec->payload, spec->payload_len, &stdin_fd);
        if (r < 0)
                return r;

        /* A socket, not a pipe, carries "go": send() with MSG_NOSIGNAL to a
         * child that already died cannot raise SIGPIPE in the daemon. */
        if (pipe2(out_pipe, O_CLOEXEC) < 0 ||
            pipe2(err_pipe, O_CLOEXEC) < 0 ||
            pipe2(error_pipe, O_CLOEXEC) < 0 ||
            socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) < 0)
                return -errno;
        p->out.fd = TAKE_FD(out_pipe[0]);
        p->err.fd = TAKE_FD(err_pipe[0]);
        p->errfd = TAKE_FD(error_pipe[0]);
        if (fcntl(p->out.fd, F_SETFL, O_NONBLOCK) < 0 ||
            fcntl(p->err.fd, F_SETFL, O_NONBLOCK) < 0 ||
            fcntl(p->errfd, F_SETFL, O_NONBLOCK) < 0)
                return -errno;

        c = (struct exec_child) {
                .program = spec->program,
                .absolute = spec->program[0] == '/',
                .argv = spec->argv,
                .envp = spec->envp ? spec->envp : empty_env,
                .cwd = spec->cwd ? spec->cwd : "/",
                .uid = spec->uid,
                .drop = drop,
                .cpu = spec->cpu,
                .nice = spec->nice,
                .stdin_fd = stdin_fd,
                .stdout_fd = out_pipe[1],
                .stderr_fd = err_pipe[1],
                .go_fd = go[1],
                .error_fd = error_pipe[1],
                .cgroup_fd = cgroup_fd,
        };

        /* What has come is read first, so that the spawner's replies never
         * pile up unread. */
        while (exec_spawn_collect_one(false))
                ;
        if (spec->ahead && list_count(&exec_spawning) < EXEC_SPAWN_AHEAD_MAX) {
                r = exec_spawner_send(&c, cgroup_dirfd);
                if (r == -EAGAIN || r == -ENOMEM || r == -E2BIG)
                        return r;
                if (r >= 0) {
                        /* The child's ends go with the cleanups: the
                         * spawner has its own. */
                        p->go_fd = TAKE_FD(go[0]);
                        list_add_tail(&p->spawn_entry, &exec_spawning);
                        exec_spawn_watch(base);
                        *ret = TAKE_PTR(p);
                        return 0;
                }
                /* No spawner: forked here, below. */
        }
        /* The replies still due come first on the spawner's socket. */
        exec_spawn_settle();
        pid = exec_spawner_spawn(&c, cgroup_dirfd);
        if ((pid == -EAGAIN || pid == -ENOMEM) && spec->rescuer && *spec->rescuer)
                pid = exec_rescuer_spawn(TAKE_PTR(*spec->rescuer), &c, cgroup_dirfd);
        if (pid == -EAGAIN || pid == -ENOMEM)
                return pid;
        if (pid < 0) {
                /* No spawner: fork here. */
                if (cgroup_dirfd >= 0) {
                        cgroup_fd = openat(cgroup_dirfd, "cgroup.procs", O_WRONLY | O_CLOEXEC | O_NOCTTY);
                        if (cgroup_fd < 0)
                                return -errno;
                        c.cgroup_fd = cgroup_fd;
                }

                /* No signal may run one of the daemon's handlers in the
                 * child before the child has reset them. */
                sigfillset(&all);
                sigprocmask(SIG_SETMASK, &all, &saved);
                pid = fork();
                if (pid == 0) {
                        /* Not the one CPU the loop may be pinned to now. */
                        if (c.cpu < 0)
                                daemon_cpus_restore();
                        exec_child(&c);
                }
                r = -errno;
                sigprocmask(SIG_SETMASK, &saved, NULL);
                if (pid < 0 && (r == -EAGAIN || r == -ENOMEM) && spec->rescuer && *spec->rescuer) {
                        c.cgroup_fd = -1;       /* the rescuer opens its own */
                        pid = exec_rescuer_spawn(TAKE_PTR(*spec->rescuer), &c, cgroup_dirfd);
                        r = pid;
                }
                if (pid < 0)
                        return r;
        }

        p->pid = pid;
        /* No setpgid(pid, pid) here: the child's setsid() would fail on a
         * group leader.  Until the child is in its session (it has started
         * nothing yet), exec_proc_kill()'s kill() of the pid reaches all. */

        /* The child's ends. */
        stdin_fd = exec_fd_close(stdin_fd);
        cgroup_fd = exec_fd_close(cgroup_fd);
        cgroup_dirfd = exec_fd_close(cgroup_dirfd);
        out_pipe[1] = exec_fd_close(out_pipe[1]);
        err_pipe[1] = exec_fd_close(err_pipe[1]);
        error_pipe[1] = exec_fd_close(error_pipe[1]);
        go[1] = exec_fd_close(go[1]);

        p->go_fd = TAKE_FD(go[0]);
        r = exec_proc_attach(p);
        if (r < 0) {
                exec_proc_abort(p);
                return r;
        }
        *ret = TAKE_PTR(p);
        return 0;
}

int exec_proc_ready(struct exec_proc *p) {
        if (!p)
                return -EINVAL;
        while (list_linked(&p->spawn_entry))
                (void) exec_spawn_collect_one(true);
        return p->spawn_error;
}

int exec_go(struct exec_proc *p) {
        struct event_base *base;
        int r;

        /* Its turn came before the spawner's reply: that is waited for. */
        r = exec_proc_ready(p);
        if (r < 0)
                return r;
        if (p->go_fd < 0)
                return -EINVAL;
        base = p->base;

        if (event_assign(&p->ev_errfd, base, p->errfd, EV_READ, exec_proc_on_errfd, p) < 0 ||
            event_assign(&p->ev_exit, base, p->pidfd, EV_READ, exec_proc_on_exit, p) < 0 ||
            event_assign(&p->out.ev, base, p->out.fd, EV_READ | EV_PERSIST, exec_stream_on_read, &p->out) < 0 ||
            event_assign(&p->err.ev, base, p->err.fd, EV_READ | EV_PERSIST, exec_stream_on_read, &p->err) < 0 ||
            evtimer_assign(&p->ev_timer, base, exec_proc_on_timeout, p) < 0)
                return -EINVAL;
        p->ev_errfd_assigned = p->ev_exit_assigned = p->out.ev_assigned = p->err.ev_assigned =
                p->ev_timer_assigned = true;

        if (event_add(&p->ev_errfd, NULL) < 0 ||
            event_add(&p->ev_exit, NULL) < 0 ||
            event_add(&p->out.ev, NULL) < 0 ||
            event_add(&p->err.ev, NULL) < 0)
                return -ENOMEM;
        if (p->timeout_usec > 0) {
                struct timeval tv = timeval_from_usec(p->timeout_usec);

                p->timeout_at_usec = now_usec(CLOCK_MONOTONIC) + p->timeout_usec;
                if (evtimer_add(&p->ev_timer, &tv) < 0)
                        return -ENOMEM;
        }

        /* Go: the child execs.  Should it be gone already, its pidfd tells. */
        p->started_usec = now_usec(CLOCK_REALTIME);
        (void) send(p->go_fd, (char[]) { EXEC_MSG_GO }, 1, MSG_NOSIGNAL);
        p->go_fd = exec_fd_close(p->go_fd);
        return 0;
}

int exec_start(struct event_base *base, struct sleepwatch *sw, const struct exec_spec *spec,
               exec_done_cb done, sleepwatch_cb sleep_cb, void *userdata,
               struct exec_proc **ret) {
        struct exec_proc *p;
        int r;

        r = exec_prepare(base, sw, spec, done, sleep_cb, userdata, &p);
        if (r < 0)
                return r;
        r = exec_go(p);
        if (r < 0) {
                exec_proc_discard(p);
                return r;
        }
        *ret = p;
        return 0;
}

struct exec_proc *exec_proc_discard(struct exec_proc *p) {
        if (!p)
                return NULL;
        /* Not exec'd (or failed before), so it cannot hold SIGKILL off or
         * have children: reaping it here is quick. */
        if (p->pid > 0 && !p->reaped)
                exec_proc_abort(p);
        return exec_proc_free(p);
}

uint64_t exec_proc_started_usec(const struct exec_proc *p) {
        return p ? p->started_usec : 0;
}
