/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * The helper processes that make an exec item's process -- the spawner and
 * the rescuers -- and the request both are sent (struct spawn_request).
 * Apart from exec.c because they are processes of their own, each with a
 * blocking loop and a protocol on a socketpair, and nothing of the
 * daemon's event loop; what they start runs exec_child() (exec-child.c).
 *
 * The spawner
 * -----------
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
 * cgroup.procs and its RCU grace period.  Before the clone the spawner
 * moves to the CPU the child will be bound to (spawner_hold_to()), so that
 * the child is born, set up and exec'd where its item runs.  The child runs
 * exec_child().  The reply is the pid, or -errno.
 *
 * exec_start() waits for that reply, so that a failure to create the
 * process (EAGAIN) is returned to the pool, which retries.  A process made
 * ahead (exec_spec.ahead: on a bound pool, the next item while the one
 * before it runs) does not: the request is sent, and its reply read from
 * the loop when it comes (exec.c), because the round trip is not short:
 * the spawner's clone3() takes 190-450 us on the development VM, and the
 * round trip about 1-2 ms (tests/bench/README.md, "Item by item").  The
 * replies come in the order of the requests.  Should the spawner be
 * unusable (it cannot be started, it died and cannot be restarted, or the
 * kernel refuses CLONE_PARENT), the daemon falls back to fork()ing the
 * child itself, as before.
 */

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cpus.h"
#include "exec/exec-internal.h"
#include "util.h"

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
                /* spawn_helper_setup() did it, in the process that parses */
                .signals_default = true,
        };
        *ret_argv = TAKE_PTR(argv);
        *ret_envp = TAKE_PTR(envp);
        return 0;
}

/* The CPUs the spawner may run on, the daemon's (empty: unknown, never
 * move), and the one it is held to now (-1: all of those). */
static cpu_set_t spawner_allowed;
static int spawner_on_cpu = -1;

/* Holds the spawner to @cpu, where the child it is about to make will run,
 * or (-1, or a CPU it may not use: the child's own sched_setaffinity()
 * tells that) lets it run on all its CPUs again.  A process that is born on
 * one CPU and runs on another pays for it on the development VM: its exec()
 * and its item's run took 0.5-0.8 ms longer, more than the fork costs on
 * the item's CPU, and the fork itself took half the CPU
 * (tests/bench/README.md, "Item by item"). */
static void spawner_hold_to(int cpu) {
        cpu_set_t set;

        if (CPU_COUNT(&spawner_allowed) == 0)
                return;
        if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &spawner_allowed))
                cpu = -1;
        if (cpu == spawner_on_cpu)
                return;
        if (cpu >= 0) {
                CPU_ZERO(&set);
                CPU_SET(cpu, &set);
        } else
                set = spawner_allowed;
        if (sched_setaffinity(0, sizeof(set), &set) == 0)
                spawner_on_cpu = cpu;
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

        spawner_hold_to(req->cpu);
        pid = spawner_clone(req->n_fds > SPAWN_FD_CGROUP ? fds[SPAWN_FD_CGROUP] : -1, &into_cgroup);
        if (pid == 0) {
                if (req->n_fds > SPAWN_FD_CGROUP && !into_cgroup) {
                        /* The old way: the child writes itself into
                         * cgroup.procs, first thing in exec_child(). */
                        c.cgroup_fd = openat(fds[SPAWN_FD_CGROUP], "cgroup.procs",
                                             O_WRONLY | O_CLOEXEC | O_NOCTTY);
                        if (c.cgroup_fd < 0)
                                exec_child_fail(c.error_fd, errno);
                }
                exec_child(&c);
        }
        r = pid < 0 ? -errno : pid;
        /* Not held to that CPU while it waits for the next request, which
         * may be for another: it would have to get this one first to move,
         * behind whatever runs here. */
        spawner_hold_to(-1);
        return r;
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
        /* Not the one CPU the loop may be pinned to as it forks. */
        daemon_cpus_restore();

        exec_child_close_all_except(fd, fd);
        for (int sig = 1; sig < _NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        exec_child_reset_signal(sig);
        sigemptyset(&none);
        (void) sigprocmask(SIG_SETMASK, &none, NULL);
}

_Noreturn static void spawner_main(int fd, pid_t daemon_pid) {
        spawn_helper_setup(fd, daemon_pid, "cmwqd-spawner");

        /* The daemon waits for our replies: not SCHED_BATCH. */
        struct sched_param param = { .sched_priority = 0 };
        (void) sched_setscheduler(0, SCHED_OTHER, &param);
        if (sched_getaffinity(0, sizeof(spawner_allowed), &spawner_allowed) < 0)
                CPU_ZERO(&spawner_allowed);     /* never move */

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

void exec_spawner_stop(void) {
        if (spawner_owner != getpid()) {
                /* Inherited through fork(): our parent's spawner, whose
                 * children and requests are our parent's too. */
                exec_spawn_forget();
                if (spawner_fd >= 0)
                        close(spawner_fd);
                spawner_fd = -1;
                spawner_pid = -1;
                return;
        }
        if (spawner_pid > 0) {
                (void) kill(spawner_pid, SIGKILL);
                while (waitpid(spawner_pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                spawner_pid = -1;
        }
        /* Gone: the replies it wrote are read, the others will not come. */
        exec_spawn_lost();
        if (spawner_fd >= 0) {
                close(spawner_fd);
                spawner_fd = -1;
        }
}

void exec_spawner_shutdown(void) {
        exec_spawn_settle();
        exec_spawner_stop();
}

int exec_spawner_start(void) {
        int sv[2];
        sigset_t all, saved;
        pid_t daemon_pid = getpid(), pid;
        int r;

        if (spawner_fd >= 0 && spawner_owner == daemon_pid)
                return 0;
        if (spawner_fd >= 0)
                exec_spawner_stop();    /* inherited through fork() */
        daemon_cpus_note();

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

/* Sends @c (with @cgroup_dirfd, if >= 0) to a spawner or rescuer on @fd.
 * Returns -errno if @fd is unusable. */
static int spawn_write_request(int fd, const struct exec_child *c, int cgroup_dirfd) {
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
                        return -errno;  /* nothing sent */
                if ((size_t) n < sizeof(req)) {
                        r = io_full(fd, (char *) &req + n, sizeof(req) - (size_t) n, true);
                        if (r < 0)
                                return -EPIPE;
                }
                break;
        }
        /* Part of a request is out: whatever fails now, the helper is out
         * of step and must go (-EPIPE, never -ENOMEM or -E2BIG). */
        r = io_full(fd, data, len, true);
        return r < 0 ? -EPIPE : 0;
}

/* Sends @c to a spawner or rescuer on @fd and reads its reply: the pid, or
 * -errno.  Returns -errno if @fd is unusable. */
static int spawn_send(int fd, const struct exec_child *c, int cgroup_dirfd, int32_t *ret_reply) {
        int r;

        r = spawn_write_request(fd, c, cgroup_dirfd);
        if (r < 0)
                return r;
        return io_full(fd, ret_reply, sizeof(*ret_reply), false);
}

/* The spawner, started in this process, if it may be used. */
static int spawner_ready(void) {
        int r;

        if (spawner_broken && spawner_owner == getpid())
                return -ENOTCONN;
        if (spawner_fd < 0 || spawner_owner != getpid()) {
                r = exec_spawner_start();
                if (r < 0)
                        return r == -EAGAIN || r == -ENOMEM ? r : -ENOTCONN;
        }
        return 0;
}

/* What a reply means: the pid, or -EAGAIN/-ENOMEM (no process could be
 * made); anything else (CLONE_PARENT refused, a request it could not take)
 * is -EPROTO, and the spawner is not used again: the caller stops it, and
 * items are forked here from then on. */
static int spawner_reply(int32_t reply) {
        if (reply > 0 || reply == -EAGAIN || reply == -ENOMEM)
                return reply;
        spawner_broken = true;
        return -EPROTO;
}

/* Asks the spawner for the child.  Returns its pid; -EAGAIN/-ENOMEM when it
 * could not be created; -ENOTCONN (or another errno) when the spawner is not
 * usable, and the caller forks itself. */
int exec_spawner_spawn(const struct exec_child *c, int cgroup_dirfd) {
        int32_t reply;
        int r;

        r = spawner_ready();
        if (r < 0)
                return r;
        r = spawn_send(spawner_fd, c, cgroup_dirfd, &reply);
        if (r == -E2BIG || r == -ENOMEM)
                return r;
        if (r < 0) {
                /* It died: the next request starts another one. */
                exec_spawner_stop();
                return -ENOTCONN;
        }
        r = spawner_reply(reply);
        if (r == -EPROTO) {
                exec_spawner_stop();
                return -ENOTCONN;
        }
        return r;
}

int exec_spawner_send(const struct exec_child *c, int cgroup_dirfd) {
        int r;

        r = spawner_ready();
        if (r < 0)
                return r;
        r = spawn_write_request(spawner_fd, c, cgroup_dirfd);
        if (r == -E2BIG || r == -ENOMEM)
                return r;
        if (r < 0) {
                exec_spawner_stop();
                return -ENOTCONN;
        }
        return 0;
}

int exec_spawner_fd(void) {
        return spawner_owner == getpid() ? spawner_fd : -1;
}

int exec_spawner_receive(bool wait) {
        int fd = exec_spawner_fd();
        int32_t reply;
        ssize_t n;
        int r;

        if (fd < 0)
                return -ENOTCONN;
        do
                n = recv(fd, &reply, sizeof(reply), MSG_PEEK | (wait ? 0 : MSG_DONTWAIT));
        while (n < 0 && errno == EINTR);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return -EINPROGRESS;
        /* The reply is written whole: read what is left of it, if anything. */
        r = n > 0 ? io_full(fd, &reply, sizeof(reply), false) : -ECONNRESET;
        if (r < 0)
                return -ENOTCONN;
        /* -EPROTO: the caller stops it, once this reply's request has its
         * answer. */
        return spawner_reply(reply);
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
int exec_rescuer_spawn(struct exec_rescuer *r, const struct exec_child *c, int cgroup_dirfd) {
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
