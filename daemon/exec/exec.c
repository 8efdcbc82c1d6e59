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
 * The spawner is single-threaded, so the cloned child may call whatever it
 * needs; it uses plain system calls, except for the user database (NSS may
 * allocate, read files and talk to a directory service: glibc's fork() keeps
 * malloc and NSS usable in the child of the daemon's fallback fork and of a
 * rescuer too), and it never returns into the daemon's code: every path ends
 * in execve() or _exit().
 *
 * Credentials: the uid is what the kernel (SO_PEERCRED) or the bus vouched
 * for the submitter; the primary group and the supplementary groups are
 * looked up here, in the child, for that uid in the user database, as su,
 * cron and systemd's User= do.  Never the groups of the client process: a
 * process may hold groups it has borrowed (a setgid program it exec'd after
 * connecting, a connection inherited from one), and never anything read
 * from /proc of a peer.  In the child, because the lookup may block (NSS
 * modules talk to daemons), which the daemon's loop must never do.  Every failure before execve() is reported as an errno
 * through a close-on-exec pipe (closed by a successful exec, so an empty pipe
 * means the exec happened) and the child exits 127.
 *
 * Reaping goes through a pidfd registered with the event loop, never through
 * SIGCHLD, so nothing here blocks the loop; the process group of a finished
 * item is killed while its leader is still an unreaped zombie, which pins
 * the pid and therefore the group id against reuse.
 *
 * The child is not forked by the daemon itself but by the spawner, a small
 * helper process (see "The spawner" below), with clone3(CLONE_PARENT), so it
 * is still the daemon's child and everything above holds.  With a cgroup
 * (spec->cgroups), CLONE_INTO_CGROUP creates it inside; where the kernel
 * refuses that (before 5.7), the child joins by writing "0" into its
 * cgroup.procs before anything else, while still privileged.  The process
 * group stays: it is what works where no cgroup can be had, and killpg() is
 * cheap.
 */

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <linux/keyctl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "exec/cgroup.h"
#include "exec/exec.h"
#include "exec/pids.h"
#include "util.h"

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

/* What a failed child exits with, as a shell does for "command not found". */
#define EXEC_CHILD_FAILED 127

/* What the daemon tells a child on its go socket, one byte each, in this
 * order: the sleep detector is attached (the child may drop privileges now);
 * run the item (the child execs at once). */
#define EXEC_MSG_ATTACHED 'a'
#define EXEC_MSG_GO 'g'

/* One read() of output at most; also the size of the discard buffer. */
#define EXEC_READ_CHUNK (64u * 1024u)

/* When the process has ended, at most this many reads per stream collect what
 * is still in the pipe, so that an escaped writer cannot hold the loop. */
#define EXEC_DRAIN_READS_MAX 32u

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
};

static void exec_stream_init(struct exec_stream *s, size_t limit) {
        *s = (struct exec_stream) { .fd = -1, .limit = limit };
}

static void exec_stream_close(struct exec_stream *s) {
        if (s->ev_assigned) {
                event_del(&s->ev);
                s->ev_assigned = false;
        }
        if (s->fd >= 0) {
                close(s->fd);
                s->fd = -1;
        }
}

static void exec_stream_done(struct exec_stream *s) {
        exec_stream_close(s);
        free(s->buf);
        s->buf = NULL;
        s->len = s->cap = 0;
}

/* Hands the captured bytes out, trimmed to what was read: the daemon keeps
 * results of thousands of finished items, most of which printed nothing. */
static char *exec_stream_take(struct exec_stream *s) {
        char *b = TAKE_PTR(s->buf), *shrunk;

        if (s->len == 0) {
                free(b);
                return NULL;
        }
        shrunk = realloc(b, s->len);
        return shrunk ? shrunk : b;
}

/*
 * One read from @s.  Returns 1 if something was read, 0 at EOF (or a read
 * error, which ends the stream the same way), -EAGAIN if the pipe is empty.
 * Bytes beyond the limit are read and discarded, and flag the stream.
 */
static int exec_stream_read(struct exec_stream *s) {
        char discard[EXEC_READ_CHUNK];
        char *dst = discard;
        size_t want = sizeof(discard);
        ssize_t n;

        if (s->fd < 0)
                return 0;

        if (s->len < s->limit) {
                if (s->cap == s->len) {
                        size_t cap = s->cap < 4096 ? 4096 : s->cap * 2;
                        char *b;

                        if (cap > s->limit)
                                cap = s->limit;
                        b = realloc(s->buf, cap);
                        if (b) {
                                s->buf = b;
                                s->cap = cap;
                        }
                }
                if (s->cap > s->len) {
                        dst = s->buf + s->len;
                        want = s->cap - s->len;
                        if (want > EXEC_READ_CHUNK)
                                want = EXEC_READ_CHUNK;
                }
                /* else: out of memory, what we could not store is discarded */
        }

        n = read(s->fd, dst, want);
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return -EAGAIN;
                exec_stream_close(s);
                return 0;
        }
        if (n == 0) {
                exec_stream_close(s);
                return 0;
        }
        if (dst == discard)
                s->truncated = true;
        else
                s->len += (size_t) n;
        return 1;
}

static void exec_stream_drain(struct exec_stream *s) {
        for (unsigned i = 0; i < EXEC_DRAIN_READS_MAX; i++)
                if (exec_stream_read(s) <= 0)
                        break;
        exec_stream_close(s);
}

static void exec_stream_on_read(evutil_socket_t fd, short what, void *userdata) {
        /* One read per wake-up; the event is level-triggered, so a chatty
         * child cannot starve the rest of the loop. */
        (void) exec_stream_read(userdata);
}

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
static int exec_proc_limit_tasks(struct exec_proc *p, const struct exec_spec *spec) {
        if (spec->pids)
                return pids_item_attach(spec->pids, spec->uid, p->pid, spec->item_tasks, spec->user_tasks, &p->pids);
        if (spec->user_tasks > 0 && spec->uid != 0) {
                struct rlimit rl = { spec->user_tasks, spec->user_tasks };

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
        return strerror(exec_errno);
}

/* ---------------------------------------------------------------------------
 * The child, between fork() and execve().  Never returns. */

_Noreturn static void child_fail(int error_fd, int error) {
        if (error <= 0)
                error = EIO;
        /* Four bytes into a pipe are written at once or not at all. */
        if (write(error_fd, &error, sizeof(error)) < 0) {
                /* nobody to tell */
        }
        _exit(EXEC_CHILD_FAILED);
}

static void child_close_range(unsigned first, unsigned last) {
        if (first > last)
                return;
        if (close_range(first, last, 0) == 0)
                return;

        /* Kernels before 5.9 */
        {
                struct rlimit rl;
                unsigned max = 65536;

                if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max)
                        max = (unsigned) rl.rlim_cur;
                if (last >= max)
                        last = max - 1;
                for (unsigned fd = first; fd <= last && fd < max; fd++)
                        close((int) fd);
        }
}

/* Closes every fd from 3 up, except @a and @b (both >= 3). */
static void child_close_all_except(int a, int b) {
        unsigned lo = (unsigned) (a < b ? a : b), hi = (unsigned) (a < b ? b : a);

        child_close_range(3, lo - 1);
        if (lo != hi)
                child_close_range(lo + 1, hi - 1);
        if (hi != ~0U)
                child_close_range(hi + 1, ~0U);
}

static void child_reset_signal(int sig) {
        struct sigaction sa = { .sa_handler = SIG_DFL };
        /* All zeroes is SIG_DFL, no flags and an empty mask in every
         * architecture's struct kernel_sigaction. */
        uint64_t zero[8] = {};

        if (sigaction(sig, &sa, NULL) >= 0 || errno != EINVAL)
                return;
        /* glibc refuses its reserved signals (32, 33), which may still come
         * ignored from whoever started the daemon: ask the kernel. */
        (void) syscall(SYS_rt_sigaction, sig, zero, NULL, (size_t) (_NSIG / 8));
}

/* What the item would otherwise inherit from the daemon rather than get as
 * any process of its user: the NOFILE soft limit main.c raised (back to the
 * kernel's default, select()-safe 1024), and the daemon's session keyring,
 * whose keys a possessor may read whatever its uid (a new empty one,
 * charged to the daemon's key quota, not the user's: joined before the
 * credentials change).  Without keyctl (a container's seccomp) there is no
 * keyring to reach either. */
static void child_reset_inherited(int error_fd) {
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 1024) {
                rl.rlim_cur = rl.rlim_max < 1024 ? rl.rlim_max : 1024;
                if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                        child_fail(error_fd, errno);
        }
        if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS && errno != EPERM &&
            errno != EACCES)
                child_fail(error_fd, errno);
}

/* Reads the daemon's next word on the go socket, which must be @want;
 * anything else (EOF: the daemon gave up on us, or died) ends the child
 * before it runs anything of the item's. */
static void child_wait_for(int go_fd, char want) {
        char m;
        ssize_t n;

        do
                n = read(go_fd, &m, 1);
        while (n < 0 && errno == EINTR);
        if (n != 1 || m != want)
                _exit(EXEC_CHILD_FAILED);
}

/* The primary group and the supplementary groups of @uid in the user
 * database (*ret_groups is malloc()ed, the primary group among them, as
 * initgroups() sets them).  Fails the child with EXEC_ERRNO_NO_USER when
 * there is no entry: the uid alone does not tell which groups are its. */
static void child_lookup_user(int error_fd, uid_t uid, gid_t *ret_gid, gid_t **ret_groups, int *ret_n) {
        struct passwd pw, *found = NULL;
        size_t size = 4096;
        char *buf = NULL;
        gid_t *groups = NULL;
        int n = 64, r;

        for (;;) {
                buf = malloc(size);
                if (!buf)
                        child_fail(error_fd, ENOMEM);
                r = getpwuid_r(uid, &pw, buf, size, &found);
                if (r != ERANGE)
                        break;
                free(buf);
                if (size >= 1024 * 1024)
                        child_fail(error_fd, ERANGE);
                size *= 4;
        }
        /* Not found is 0 and NULL in glibc; POSIX also allows these. */
        if ((r == 0 && !found) || r == ENOENT || r == ESRCH || r == EBADF || r == EPERM)
                child_fail(error_fd, EXEC_ERRNO_NO_USER);
        if (r != 0)
                child_fail(error_fd, r);

        for (;;) {
                int want = n;

                groups = malloc((size_t) n * sizeof(gid_t));
                if (!groups)
                        child_fail(error_fd, ENOMEM);
                if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) >= 0)
                        break;
                free(groups);
                /* Too small: n is what it needs now (never less). */
                if (n <= want)
                        n = want * 2;
                if (n > 65536)
                        child_fail(error_fd, E2BIG);
        }
        *ret_gid = pw.pw_gid;
        *ret_groups = groups;
        *ret_n = n;
        free(buf);
}

_Noreturn static void exec_child(const struct exec_child *c) {
        sigset_t none;
        gid_t gid = getegid(), *groups = NULL;
        int error_fd, go_fd, in, out, err, n_groups = 0;

        /* The daemon's handlers (libevent's, which write to the loop's
         * notification socket) and ignored signals (SIGPIPE) must not reach
         * the item.  All signals are blocked across fork() by the parent,
         * so none can arrive before this. */
        for (int sig = 1; sig < _NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        child_reset_signal(sig);
        sigemptyset(&none);
        (void) sigprocmask(SIG_SETMASK, &none, NULL);

        /* The error pipe first, so that every later failure can be told. */
        error_fd = fcntl(c->error_fd, F_DUPFD_CLOEXEC, 3);
        if (error_fd < 0)
                child_fail(c->error_fd, errno);

        /* Into the item's cgroup before anything else, so that whatever the
         * item starts is born there. */
        if (c->cgroup_fd >= 0 && write(c->cgroup_fd, "0", 1) != 1)
                child_fail(error_fd, errno);

        /* A session of its own: no controlling terminal (an item must not
         * read from or type into the terminal cmwqd was started from, with
         * TIOCSTI), and a process group of its own, whose id is the pid:
         * killpg() of the item reaches its whole tree.  The daemon never
         * makes it a group leader first, which would make this fail. */
        if (setsid() < 0)
                child_fail(error_fd, errno);

        /* Everything moves above 2 first (and stays close-on-exec there), so
         * that dup2() onto 0..2 never meets an fd already in place, which
         * would keep its close-on-exec flag. */
        go_fd = fcntl(c->go_fd, F_DUPFD_CLOEXEC, 3);
        in = fcntl(c->stdin_fd, F_DUPFD_CLOEXEC, 3);
        out = fcntl(c->stdout_fd, F_DUPFD_CLOEXEC, 3);
        err = fcntl(c->stderr_fd, F_DUPFD_CLOEXEC, 3);
        if (go_fd < 0 || in < 0 || out < 0 || err < 0)
                child_fail(error_fd, errno);
        if (dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0)
                child_fail(error_fd, errno);
        child_close_all_except(go_fd, error_fd);

        if (c->cpu >= 0) {
                cpu_set_t set;

                CPU_ZERO(&set);
                CPU_SET(c->cpu, &set);
                if (sched_setaffinity(0, sizeof(set), &set) < 0)
                        child_fail(error_fd, errno);
        }

        /* The daemon runs SCHED_BATCH (so that watching items does not
         * preempt them); the item gets the ordinary policy back. */
        struct sched_param param = { .sched_priority = 0 };
        if (sched_setscheduler(0, SCHED_OTHER, &param) < 0)
                child_fail(error_fd, errno);

        /* While still privileged, so a root daemon can raise priority.  An
         * unprivileged daemon asked for more than it may give keeps its own. */
        if (setpriority(PRIO_PROCESS, 0, c->nice) < 0 && errno != EACCES && errno != EPERM)
                child_fail(error_fd, errno);

        child_reset_inherited(error_fd);

        /* Before the daemon's word, which may wait: in parallel with it. */
        if (c->drop)
                child_lookup_user(error_fd, c->uid, &gid, &groups, &n_groups);

        /* Wait until the daemon has attached the sleep detector.  This is
         * done before the credentials change: to the detector the child is
         * still the daemon's own process then. */
        child_wait_for(go_fd, EXEC_MSG_ATTACHED);

        if (c->drop) {
                if (setgroups((size_t) n_groups, groups) < 0)
                        child_fail(error_fd, errno);
                if (setresgid(gid, gid, gid) < 0)
                        child_fail(error_fd, errno);
                if (setresuid(c->uid, c->uid, c->uid) < 0)
                        child_fail(error_fd, errno);
        }

        /* Paranoia: the credentials must be exactly the submitter's (the
         * daemon's gid when it runs as the submitter), and root must be gone
         * for good. */
        {
                uid_t ru, eu, su;
                gid_t rg, eg, sg;

                if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0)
                        child_fail(error_fd, errno);
                if (ru != c->uid || eu != c->uid || su != c->uid || rg != gid || eg != gid || sg != gid)
                        child_fail(error_fd, EPERM);
                if (c->uid != 0 && setresuid(0, 0, 0) >= 0)
                        child_fail(error_fd, EPERM);
        }

        /* As the user: a directory they may not enter is EACCES. */
        if (chdir(c->cwd) < 0)
                child_fail(error_fd, errno);

        /* Everything is ready: from "go" on only execve() is left (go_fd is
         * close-on-exec), so that a prepared item starts as fast as a
         * process can (see exec_prepare()). */
        child_wait_for(go_fd, EXEC_MSG_GO);

        if (c->absolute)
                execve(c->program, c->argv, c->envp);
        else {
                /* execvp() searches the PATH of environ, which must be the
                 * item's, not the daemon's. */
                environ = (char **) c->envp;
                execvp(c->program, c->argv);
        }
        child_fail(error_fd, errno);
}

/* ---------------------------------------------------------------------------
 * The spawner.
 *
 * fork() in the daemon copies its page tables (copy_page_range) and then
 * makes the daemon take copy-on-write faults on its own heap, at a cost that
 * grows with the daemon.  So item processes are made by a small helper, the
 * spawner: forked once, early, while the daemon's heap is tiny (or, in a
 * program that never called exec_spawner_start(), at its first exec_start()).
 * It is connected by a SOCK_STREAM socketpair, keeps no other fd, runs a
 * blocking loop of its own (no libevent), and dies with the daemon
 * (PR_SET_PDEATHSIG, and EOF on the socket).
 *
 * A request is a struct spawn_request with the child's fds attached
 * (SCM_RIGHTS), followed by the serialized spec (program, cwd, argv, envp).  The spawner creates the child with clone3(CLONE_PARENT |
 * CLONE_INTO_CGROUP): CLONE_PARENT makes it the *daemon's* child, not the
 * spawner's, so that the daemon reaps it with wait4() exactly as before
 * (exit status, rusage, the zombie leader pinning its process group id), and
 * CLONE_INTO_CGROUP puts it in its cgroup at birth, without the write to
 * cgroup.procs and its RCU grace period.  The child runs exec_child().  The
 * reply is the pid, or -errno.
 *
 * The daemon waits for that reply (exec_prepare() stays synchronous): the
 * spawner is small, so its clone takes tens of microseconds, and a failure
 * to create the process (EAGAIN) is still returned by exec_start(), which
 * the pool retries.  On a bound pool that wait is not where it matters: the
 * next item is prepared while the one before it runs, and when that one
 * blocks or ends, exec_go() only sends one byte.  Should the spawner be unusable (it cannot be started,
 * it died and cannot be restarted, or the kernel refuses CLONE_PARENT), the
 * daemon falls back to fork()ing the child itself, as before.
 */

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif

#define SPAWN_MAGIC 0x636d7771u
/* Bounds a request: argv and envp are bounded far below by the kernel's
 * ARG_MAX (execve() fails E2BIG beyond), this only rejects garbage. */
#define SPAWN_REQUEST_MAX (64u * 1024u * 1024u)

enum {
        SPAWN_FD_STDIN,
        SPAWN_FD_STDOUT,
        SPAWN_FD_STDERR,
        SPAWN_FD_GO,
        SPAWN_FD_ERROR,
        SPAWN_FD_CGROUP,                /* the cgroup's directory; optional, last */
        _SPAWN_FD_MAX,
};

struct spawn_request {
        uint32_t magic;
        uint32_t n_fds;
        uint64_t len;                   /* bytes that follow */
        uint32_t uid;
        int32_t cpu;
        int32_t nice;
        uint32_t argc;
        uint32_t envc;
        uint8_t drop;
        uint8_t absolute;
};

struct spawner_clone_args {
        uint64_t flags;
        uint64_t pidfd;
        uint64_t child_tid;
        uint64_t parent_tid;
        uint64_t exit_signal;
        uint64_t stack;
        uint64_t stack_size;
        uint64_t tls;
        uint64_t set_tid;
        uint64_t set_tid_size;
        uint64_t cgroup;
};

static int spawner_fd = -1;             /* the daemon's end */
static pid_t spawner_pid = -1;
static pid_t spawner_owner = -1;        /* the process that started it */
static bool spawner_broken;             /* do not try again: fork here */

static int io_full(int fd, void *buf, size_t len, bool writing) {
        char *b = buf;

        while (len > 0) {
                ssize_t n = writing ? send(fd, b, len, MSG_NOSIGNAL) : read(fd, b, len);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        return -ECONNRESET;
                b += n;
                len -= (size_t) n;
        }
        return 0;
}

static pid_t spawner_clone(int cgroup_dirfd, bool *ret_into_cgroup) {
        static bool no_clone3;
        long r;

        *ret_into_cgroup = false;
        if (!no_clone3) {
                struct spawner_clone_args args = {
                        .flags = CLONE_PARENT | (cgroup_dirfd >= 0 ? CLONE_INTO_CGROUP : 0),
                        /* Must be 0 with CLONE_PARENT: the child gets
                         * ours, SIGCHLD, to its parent, the daemon. */
                        .exit_signal = 0,
                        .cgroup = cgroup_dirfd >= 0 ? (uint64_t) cgroup_dirfd : 0,
                };

                r = syscall(SYS_clone3, &args, sizeof(args));
                if (r >= 0) {
                        *ret_into_cgroup = cgroup_dirfd >= 0;
                        return (pid_t) r;
                }
                if (errno == EAGAIN || errno == ENOMEM)
                        return -1;
                if (errno == ENOSYS || errno == E2BIG)
                        no_clone3 = true;
                /* else: e.g. CLONE_INTO_CGROUP refused; the child joins itself */
        }
#if defined(__s390__) || defined(__CRIS__)
        r = syscall(SYS_clone, 0, CLONE_PARENT | SIGCHLD, 0, 0, 0);
#else
        r = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
#endif
        return (pid_t) r;
}

/* Turns a request into the child's set-up; @c points into @data, @fds and
 * *ret_argv, *ret_envp (the caller frees these two).  No cgroup_fd yet. */
static int spawn_parse(const struct spawn_request *req, int fds[_SPAWN_FD_MAX], char *data,
                       struct exec_child *ret, char ***ret_argv, char ***ret_envp) {
        _cleanup_(freep) char **argv = NULL, **envp = NULL;
        const char *program, *cwd;
        char *p = data, *end = data + req->len;

        if (req->n_fds < SPAWN_FD_CGROUP || req->n_fds > _SPAWN_FD_MAX)
                return -EBADMSG;

#define SPAWN_NEXT_STRING(s)                                    \
        do {                                                    \
                char *_z = memchr(p, 0, (size_t) (end - p));    \
                if (!_z)                                        \
                        return -EBADMSG;                        \
                (s) = p;                                        \
                p = _z + 1;                                     \
        } while (0)

        SPAWN_NEXT_STRING(program);
        SPAWN_NEXT_STRING(cwd);
        if (req->argc == 0 || req->argc > req->len || req->envc > req->len)
                return -EBADMSG;
        argv = calloc((size_t) req->argc + 1, sizeof(char *));
        envp = calloc((size_t) req->envc + 1, sizeof(char *));
        if (!argv || !envp)
                return -ENOMEM;
        for (uint32_t i = 0; i < req->argc; i++)
                SPAWN_NEXT_STRING(argv[i]);
        for (uint32_t i = 0; i < req->envc; i++)
                SPAWN_NEXT_STRING(envp[i]);
#undef SPAWN_NEXT_STRING

        *ret = (struct exec_child) {
                .program = program,
                .absolute = req->absolute,
                .argv = argv,
                .envp = envp,
                .cwd = cwd,
                .uid = req->uid,
                .drop = req->drop,
                .cpu = req->cpu,
                .nice = req->nice,
                .stdin_fd = fds[SPAWN_FD_STDIN],
                .stdout_fd = fds[SPAWN_FD_STDOUT],
                .stderr_fd = fds[SPAWN_FD_STDERR],
                .go_fd = fds[SPAWN_FD_GO],
                .error_fd = fds[SPAWN_FD_ERROR],
                .cgroup_fd = -1,
        };
        *ret_argv = TAKE_PTR(argv);
        *ret_envp = TAKE_PTR(envp);
        return 0;
}

/* One request: parses it, creates the child, returns its pid or -errno. */
static int spawner_handle(const struct spawn_request *req, int fds[_SPAWN_FD_MAX], char *data) {
        _cleanup_(freep) char **argv = NULL, **envp = NULL;
        struct exec_child c;
        bool into_cgroup;
        pid_t pid;
        int r;

        r = spawn_parse(req, fds, data, &c, &argv, &envp);
        if (r < 0)
                return r;

        pid = spawner_clone(req->n_fds > SPAWN_FD_CGROUP ? fds[SPAWN_FD_CGROUP] : -1, &into_cgroup);
        if (pid == 0) {
                if (req->n_fds > SPAWN_FD_CGROUP && !into_cgroup) {
                        /* The old way: the child writes itself into
                         * cgroup.procs, first thing in exec_child(). */
                        c.cgroup_fd = openat(fds[SPAWN_FD_CGROUP], "cgroup.procs",
                                             O_WRONLY | O_CLOEXEC | O_NOCTTY);
                        if (c.cgroup_fd < 0)
                                child_fail(c.error_fd, errno);
                }
                exec_child(&c);
        }
        if (pid < 0)
                return -errno;
        return pid;
}

/* Reads one request and its fds; exits the process when the daemon is gone
 * or out of step (a spawner or rescuer has nothing else to do then). */
static void spawn_receive(int fd, struct spawn_request *req, int fds[_SPAWN_FD_MAX], int *n_fds, char **ret_data) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * _SPAWN_FD_MAX)];
        } control;
        size_t got = 0;
        char *data;

        *n_fds = 0;
        while (got < sizeof(*req)) {
                struct iovec iov = { .iov_base = (char *) req + got, .iov_len = sizeof(*req) - got };
                struct msghdr mh = {
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = control.buf,
                        .msg_controllen = sizeof(control.buf),
                };
                ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        _exit(0);
                for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
                        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                                size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                                int *in = (int *) (void *) CMSG_DATA(cm);

                                for (size_t i = 0; i < k; i++) {
                                        if (*n_fds < _SPAWN_FD_MAX)
                                                fds[(*n_fds)++] = in[i];
                                        else
                                                close(in[i]);
                                }
                        }
                got += (size_t) n;
        }
        if (req->magic != SPAWN_MAGIC || req->len > SPAWN_REQUEST_MAX)
                /* Out of step with the daemon: nothing sensible to do. */
                _exit(1);

        data = malloc(req->len + 1);
        if (!data)
                _exit(1);
        if (io_full(fd, data, req->len, false) < 0)
                _exit(0);
        *ret_data = data;
}

/* What a spawner or a rescuer does first: nothing of the daemon's, neither its
 * fds (its listening socket, its clients', the items') nor its signal
 * handlers; and die with it. */
static void spawn_helper_setup(int fd, pid_t daemon_pid, const char *name) {
        sigset_t none;

        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != daemon_pid)
                _exit(0);
        (void) prctl(PR_SET_NAME, name);

        child_close_all_except(fd, fd);
        for (int sig = 1; sig < _NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        child_reset_signal(sig);
        sigemptyset(&none);
        (void) sigprocmask(SIG_SETMASK, &none, NULL);
}

_Noreturn static void spawner_main(int fd, pid_t daemon_pid) {
        spawn_helper_setup(fd, daemon_pid, "cmwqd-spawner");

        /* The daemon waits for our replies: not SCHED_BATCH. */
        struct sched_param param = { .sched_priority = 0 };
        (void) sched_setscheduler(0, SCHED_OTHER, &param);

        for (;;) {
                struct spawn_request req;
                int fds[_SPAWN_FD_MAX], n_fds = 0;
                char *data = NULL;
                int32_t reply;

                spawn_receive(fd, &req, fds, &n_fds, &data);
                if ((uint32_t) n_fds != req.n_fds)
                        reply = -EBADMSG;
                else
                        reply = spawner_handle(&req, fds, data);

                for (int i = 0; i < n_fds; i++)
                        close(fds[i]);
                free(data);

                if (io_full(fd, &reply, sizeof(reply), true) < 0)
                        _exit(0);
        }
}

static void exec_spawner_stop(void) {
        if (spawner_fd >= 0) {
                close(spawner_fd);
                spawner_fd = -1;
        }
        if (spawner_pid > 0) {
                (void) kill(spawner_pid, SIGKILL);
                while (waitpid(spawner_pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                spawner_pid = -1;
        }
}

void exec_spawner_shutdown(void) {
        exec_spawner_stop();
}

int exec_spawner_start(void) {
        int sv[2];
        sigset_t all, saved;
        pid_t daemon_pid = getpid(), pid;
        int r;

        if (spawner_fd >= 0 && spawner_owner == daemon_pid)
                return 0;
        if (spawner_fd >= 0) {
                /* Inherited through fork(): that spawner is our parent's,
                 * and its children would be our parent's too. */
                close(spawner_fd);
                spawner_fd = -1;
                spawner_pid = -1;
                spawner_broken = false;
        }

        spawner_broken = false;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;

        sigfillset(&all);
        sigprocmask(SIG_SETMASK, &all, &saved);
        pid = fork();
        if (pid == 0)
                spawner_main(sv[1], daemon_pid);
        r = -errno;
        sigprocmask(SIG_SETMASK, &saved, NULL);
        close(sv[1]);
        if (pid < 0) {
                close(sv[0]);
                return r;
        }
        spawner_fd = sv[0];
        spawner_pid = pid;
        spawner_owner = daemon_pid;
        return 0;
}

/* Sends @c (with @cgroup_dirfd, if >= 0) to a spawner or rescuer on @fd and
 * reads its reply: the pid, or -errno.  Returns -errno if @fd is unusable. */
static int spawn_send(int fd, const struct exec_child *c, int cgroup_dirfd, int32_t *ret_reply) {
        _cleanup_(freep) char *data = NULL;
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * _SPAWN_FD_MAX)];
        } control = {};
        struct spawn_request req = {
                .magic = SPAWN_MAGIC,
                .n_fds = cgroup_dirfd >= 0 ? _SPAWN_FD_MAX : SPAWN_FD_CGROUP,
                .uid = c->uid,
                .cpu = c->cpu,
                .nice = c->nice,
                .drop = c->drop,
                .absolute = c->absolute,
        };
        int fds[_SPAWN_FD_MAX] = {
                c->stdin_fd, c->stdout_fd, c->stderr_fd, c->go_fd, c->error_fd, cgroup_dirfd,
        };
        size_t len, lp, lc;
        struct iovec iov;
        struct msghdr mh;
        struct cmsghdr *cm;
        char *q;
        int r;

        lp = strlen(c->program) + 1;
        lc = strlen(c->cwd) + 1;
        len = lp + lc;
        for (char *const *a = c->argv; *a; a++, req.argc++)
                len += strlen(*a) + 1;
        for (char *const *e = c->envp; *e; e++, req.envc++)
                len += strlen(*e) + 1;
        if (len > SPAWN_REQUEST_MAX)
                return -E2BIG;
        req.len = len;

        data = malloc(len ? len : 1);
        if (!data)
                return -ENOMEM;
        q = data;
        memcpy(q, c->program, lp), q += lp;
        memcpy(q, c->cwd, lc), q += lc;
        for (char *const *a = c->argv; *a; a++) {
                size_t l = strlen(*a) + 1;
                memcpy(q, *a, l), q += l;
        }
        for (char *const *e = c->envp; *e; e++) {
                size_t l = strlen(*e) + 1;
                memcpy(q, *e, l), q += l;
        }

        iov = (struct iovec) { .iov_base = &req, .iov_len = sizeof(req) };
        mh = (struct msghdr) {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = control.buf,
                .msg_controllen = CMSG_SPACE(sizeof(int) * req.n_fds),
        };
        cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * req.n_fds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * req.n_fds);

        for (;;) {
                ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if ((size_t) n < sizeof(req)) {
                        r = io_full(fd, (char *) &req + n, sizeof(req) - (size_t) n, true);
                        if (r < 0)
                                return r;
                }
                break;
        }
        r = io_full(fd, data, len, true);
        if (r < 0)
                return r;
        r = io_full(fd, ret_reply, sizeof(*ret_reply), false);
        if (r < 0)
                return r;
        return 0;
}

/* Asks the spawner for the child.  Returns its pid; -EAGAIN/-ENOMEM when it
 * could not be created; -ENOTCONN (or another errno) when the spawner is not
 * usable, and the caller forks itself. */
static int exec_spawner_spawn(const struct exec_child *c, int cgroup_dirfd) {
        int32_t reply;
        int r;

        if (spawner_broken && spawner_owner == getpid())
                return -ENOTCONN;
        if (spawner_fd < 0 || spawner_owner != getpid()) {
                r = exec_spawner_start();
                if (r < 0)
                        return r == -EAGAIN || r == -ENOMEM ? r : -ENOTCONN;
        }

        r = spawn_send(spawner_fd, c, cgroup_dirfd, &reply);
        if (r == -E2BIG || r == -ENOMEM)
                return r;
        if (r < 0) {
                /* It died: the next request starts another one. */
                exec_spawner_stop();
                return -ENOTCONN;
        }
        if (reply > 0)
                return reply;
        if (reply == -EAGAIN || reply == -ENOMEM)
                return reply;
        /* Anything else (CLONE_PARENT refused, a request it could not
         * take): fork here from now on. */
        spawner_broken = true;
        exec_spawner_stop();
        return -ENOTCONN;
}

/* ---------------------------------------------------------------------------
 * Rescuers.
 *
 * The kernel gives every WQ_MEM_RECLAIM workqueue a rescuer thread, made when
 * the queue is, so that its work makes progress when no new worker can be
 * created.  An exec item needs a process of its own, and what refuses new
 * processes (RLIMIT_NPROC, a cgroup's pids.max, no memory for a fork) refuses
 * the spawner's clone as well.  So a rescuer is a process made ahead, while
 * that is still possible: a fork of the daemon (so the daemon's child, which
 * it reaps as any item) that waits for one spawn request, exactly what the
 * spawner gets, replies with its own pid and then *becomes* the item:
 * exec_child() in itself, without a fork.  It already counts against every
 * limit, so nothing new has to be created; joining the item's cgroup is a
 * move, which pids.max does not refuse.  A rescuer serves once; the owner
 * makes another when it can.
 */

struct exec_rescuer {
        pid_t pid;
        int fd;                         /* the daemon's end */
};

_Noreturn static void rescuer_main(int fd, pid_t daemon_pid) {
        _cleanup_(freep) char **argv = NULL, **envp = NULL;
        struct spawn_request req;
        int fds[_SPAWN_FD_MAX], n_fds = 0;
        struct exec_child c;
        char *data = NULL;
        int32_t reply;

        spawn_helper_setup(fd, daemon_pid, "cmwqd-rescuer");
        spawn_receive(fd, &req, fds, &n_fds, &data);
        reply = (uint32_t) n_fds != req.n_fds ? -EBADMSG : spawn_parse(&req, fds, data, &c, &argv, &envp);
        if (reply == 0 && req.n_fds > SPAWN_FD_CGROUP) {
                c.cgroup_fd = openat(fds[SPAWN_FD_CGROUP], "cgroup.procs", O_WRONLY | O_CLOEXEC | O_NOCTTY);
                if (c.cgroup_fd < 0)
                        reply = -errno;
        }
        if (reply == 0)
                reply = getpid();
        if (io_full(fd, &reply, sizeof(reply), true) < 0 || reply < 0)
                _exit(EXEC_CHILD_FAILED);
        close(fd);
        /* From here on an item like any other, which does not die with the
         * daemon on its own. */
        (void) prctl(PR_SET_PDEATHSIG, 0);
        exec_child(&c);
}

int exec_rescuer_new(struct exec_rescuer **ret) {
        pid_t daemon_pid = getpid(), pid;
        struct exec_rescuer *r;
        sigset_t all, saved;
        int sv[2], e;

        r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
                e = -errno;
                free(r);
                return e;
        }
        sigfillset(&all);
        sigprocmask(SIG_SETMASK, &all, &saved);
        pid = fork();
        if (pid == 0)
                rescuer_main(sv[1], daemon_pid);
        e = -errno;
        sigprocmask(SIG_SETMASK, &saved, NULL);
        close(sv[1]);
        if (pid < 0) {
                close(sv[0]);
                free(r);
                return e;
        }
        r->pid = pid;
        r->fd = sv[0];
        *ret = r;
        return 0;
}

struct exec_rescuer *exec_rescuer_free(struct exec_rescuer *r) {
        if (!r)
                return NULL;
        close(r->fd);
        (void) kill(r->pid, SIGKILL);
        while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        free(r);
        return NULL;
}

/* Runs @c in @r, which is used up.  Returns the pid, or -errno. */
static int exec_rescuer_spawn(struct exec_rescuer *r, const struct exec_child *c, int cgroup_dirfd) {
        int32_t reply;
        pid_t pid = r->pid;
        int e;

        e = spawn_send(r->fd, c, cgroup_dirfd, &reply);
        if (e < 0 || reply < 0) {
                exec_rescuer_free(r);
                return e < 0 ? e : reply;
        }
        /* It is the item now: the item's reaping is the daemon's. */
        close(r->fd);
        free(r);
        return pid;
}

/* -------------------------------------------------------------------------*/

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
                if (pid == 0)
                        exec_child(&c);
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

        p->pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
        if (p->pidfd < 0) {
                r = -errno;
                goto abort;
        }

        r = exec_proc_limit_tasks(p, spec);
        if (r < 0)
                goto abort;

        if (sw) {
                r = sleepwatch_watch(sw, pid, sleep_cb, userdata, &p->target);
                if (r < 0)
                        goto abort;
                /* Its cgroup holds every task of the item: what /proc
                 * sampling watches and whose CPU time counts. */
                if (p->cgroup && cgroup_item_open_dir(p->cgroup, &cgroup_dirfd) >= 0) {
                        (void) sleepwatch_target_use_cgroup(p->target, cgroup_dirfd);
                        cgroup_dirfd = exec_fd_close(cgroup_dirfd);
                }
        }

        /* Attached: the child may become the submitter now, and then
         * waits for "go".  Should it be gone already, exec_go()'s pidfd
         * tells. */
        p->go_fd = TAKE_FD(go[0]);
        (void) send(p->go_fd, (char[]) { EXEC_MSG_ATTACHED }, 1, MSG_NOSIGNAL);

        *ret = TAKE_PTR(p);
        return 0;

abort:
        exec_proc_abort(p);
        return r;
}

int exec_go(struct exec_proc *p) {
        struct event_base *base;

        if (!p || p->go_fd < 0)
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
