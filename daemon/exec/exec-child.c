/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * The child, between fork() and execve(): what an item's new process does
 * in itself before it runs the item's program, in the order exec/exec.h
 * lists.  Never returns: every path ends in execve() or _exit().  Apart
 * from exec.c because it runs in another process (a clone of the spawner,
 * a rescuer, or the daemon's fallback fork()), where nothing of the
 * daemon's loop may be touched; the spawner and the rescuers use its
 * helpers too, to shed what they inherit from the daemon.
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
 */

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <linux/keyctl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "exec/exec-internal.h"

_Noreturn void exec_child_fail(int error_fd, int error) {
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
void exec_child_close_all_except(int a, int b) {
        unsigned lo = (unsigned) (a < b ? a : b), hi = (unsigned) (a < b ? b : a);

        child_close_range(3, lo - 1);
        if (lo != hi)
                child_close_range(lo + 1, hi - 1);
        if (hi != ~0U)
                child_close_range(hi + 1, ~0U);
}

void exec_child_reset_signal(int sig) {
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

/* The limits an item gets no more of than PID 1 has, which every service
 * starts from: whoever started cmwqd with more (a root shell's raised
 * limits, a unit's LimitRTPRIO=) grants it to cmwqd, not to every user's
 * items -- RTPRIO would let them run SCHED_FIFO.  RLIMIT_NPROC is set per
 * user afterwards (exec/exec.c). */
static const int child_capped_limits[] = {
        RLIMIT_AS, RLIMIT_CORE, RLIMIT_CPU, RLIMIT_DATA, RLIMIT_FSIZE, RLIMIT_LOCKS, RLIMIT_MEMLOCK,
        RLIMIT_MSGQUEUE, RLIMIT_NICE, RLIMIT_NOFILE, RLIMIT_RSS, RLIMIT_RTPRIO, RLIMIT_RTTIME,
        RLIMIT_SIGPENDING, RLIMIT_STACK,
};

static rlim_t rlim_min(rlim_t a, rlim_t b) {
        if (a == RLIM_INFINITY)
                return b;
        if (b == RLIM_INFINITY)
                return a;
        return a < b ? a : b;
}

/* What the item would otherwise inherit from the daemon rather than get as
 * any process of its user: the NOFILE soft limit main.c raised (back to the
 * kernel's default, select()-safe 1024), any limit above PID 1's
 * (child_capped_limits), and the daemon's session keyring, whose keys a
 * possessor may read whatever its uid (a new empty one, charged to the
 * daemon's key quota, not the user's: joined before the credentials
 * change).  Without keyctl (a container's seccomp) there is no keyring to
 * reach either.  A daemon that may not read PID 1's limits (--user) runs
 * as the items' user: its limits are that user's already. */
static void child_reset_inherited(int error_fd) {
        struct rlimit rl, init;

        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 1024) {
                rl.rlim_cur = rl.rlim_max < 1024 ? rl.rlim_max : 1024;
                if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                        exec_child_fail(error_fd, errno);
        }
        for (size_t k = 0; k < sizeof(child_capped_limits) / sizeof(child_capped_limits[0]); k++) {
                int resource = child_capped_limits[k];
                struct rlimit capped;

                if (prlimit(1, resource, NULL, &init) < 0 || getrlimit(resource, &rl) < 0)
                        continue;
                capped.rlim_max = rlim_min(rl.rlim_max, init.rlim_max);
                capped.rlim_cur = rlim_min(rlim_min(rl.rlim_cur, init.rlim_cur), capped.rlim_max);
                if ((capped.rlim_cur != rl.rlim_cur || capped.rlim_max != rl.rlim_max) &&
                    setrlimit(resource, &capped) < 0)
                        exec_child_fail(error_fd, errno);
        }
        if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS && errno != EPERM &&
            errno != EACCES)
                exec_child_fail(error_fd, errno);
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
                        exec_child_fail(error_fd, ENOMEM);
                r = getpwuid_r(uid, &pw, buf, size, &found);
                if (r != ERANGE)
                        break;
                free(buf);
                if (size >= 1024 * 1024)
                        exec_child_fail(error_fd, ERANGE);
                size *= 4;
        }
        /* Not found is 0 and NULL in glibc; POSIX also allows these. */
        if ((r == 0 && !found) || r == ENOENT || r == ESRCH || r == EBADF || r == EPERM)
                exec_child_fail(error_fd, EXEC_ERRNO_NO_USER);
        if (r != 0)
                exec_child_fail(error_fd, r);

        for (;;) {
                int want = n;

                groups = malloc((size_t) n * sizeof(gid_t));
                if (!groups)
                        exec_child_fail(error_fd, ENOMEM);
                if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) >= 0)
                        break;
                free(groups);
                /* Too small: n is what it needs now (never less). */
                if (n <= want)
                        n = want * 2;
                if (n > 65536)
                        exec_child_fail(error_fd, E2BIG);
        }
        *ret_gid = pw.pw_gid;
        *ret_groups = groups;
        *ret_n = n;
        free(buf);
}

_Noreturn void exec_child(const struct exec_child *c) {
        sigset_t none;
        gid_t gid = getegid(), *groups = NULL;
        int error_fd, go_fd, in, out, err, n_groups = 0;

        /* The daemon's handlers (libevent's, which write to the loop's
         * notification socket) and ignored signals (SIGPIPE) must not reach
         * the item.  The daemon blocks all signals across its fallback
         * fork(), so none can arrive before this.  The spawner's child and
         * a rescuer have what spawn_helper_setup() set, defaults and an
         * empty mask, already: 64 system calls fewer on the CPU the item
         * will run on. */
        if (!c->signals_default) {
                for (int sig = 1; sig < _NSIG; sig++)
                        if (sig != SIGKILL && sig != SIGSTOP)
                                exec_child_reset_signal(sig);
                sigemptyset(&none);
                (void) sigprocmask(SIG_SETMASK, &none, NULL);
        }

        /* The error pipe first, so that every later failure can be told. */
        error_fd = fcntl(c->error_fd, F_DUPFD_CLOEXEC, 3);
        if (error_fd < 0)
                exec_child_fail(c->error_fd, errno);

        /* Into the item's cgroup before anything else, so that whatever the
         * item starts is born there. */
        if (c->cgroup_fd >= 0 && write(c->cgroup_fd, "0", 1) != 1)
                exec_child_fail(error_fd, errno);

        /* A session of its own: no controlling terminal (an item must not
         * read from or type into the terminal cmwqd was started from, with
         * TIOCSTI), and a process group of its own, whose id is the pid:
         * killpg() of the item reaches its whole tree.  The daemon never
         * makes it a group leader first, which would make this fail. */
        if (setsid() < 0)
                exec_child_fail(error_fd, errno);

        /* Everything moves above 2 first (and stays close-on-exec there), so
         * that dup2() onto 0..2 never meets an fd already in place, which
         * would keep its close-on-exec flag. */
        go_fd = fcntl(c->go_fd, F_DUPFD_CLOEXEC, 3);
        in = fcntl(c->stdin_fd, F_DUPFD_CLOEXEC, 3);
        out = fcntl(c->stdout_fd, F_DUPFD_CLOEXEC, 3);
        err = fcntl(c->stderr_fd, F_DUPFD_CLOEXEC, 3);
        if (go_fd < 0 || in < 0 || out < 0 || err < 0)
                exec_child_fail(error_fd, errno);
        if (dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0)
                exec_child_fail(error_fd, errno);
        exec_child_close_all_except(go_fd, error_fd);

        if (c->cpu >= 0) {
                cpu_set_t set;

                CPU_ZERO(&set);
                CPU_SET(c->cpu, &set);
                if (sched_setaffinity(0, sizeof(set), &set) < 0)
                        exec_child_fail(error_fd, errno);
        }

        /* The daemon runs SCHED_BATCH (so that watching items does not
         * preempt them); the item gets the ordinary policy back. */
        struct sched_param param = { .sched_priority = 0 };
        if (sched_setscheduler(0, SCHED_OTHER, &param) < 0)
                exec_child_fail(error_fd, errno);

        /* While still privileged, so a root daemon can raise priority.  An
         * unprivileged daemon asked for more than it may give keeps its own. */
        if (setpriority(PRIO_PROCESS, 0, c->nice) < 0 && errno != EACCES && errno != EPERM)
                exec_child_fail(error_fd, errno);

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
                        exec_child_fail(error_fd, errno);
                if (setresgid(gid, gid, gid) < 0)
                        exec_child_fail(error_fd, errno);
                if (setresuid(c->uid, c->uid, c->uid) < 0)
                        exec_child_fail(error_fd, errno);
        }

        /* Paranoia: the credentials must be exactly the submitter's (the
         * daemon's gid when it runs as the submitter), and root must be gone
         * for good. */
        {
                uid_t ru, eu, su;
                gid_t rg, eg, sg;

                if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0)
                        exec_child_fail(error_fd, errno);
                if (ru != c->uid || eu != c->uid || su != c->uid || rg != gid || eg != gid || sg != gid)
                        exec_child_fail(error_fd, EPERM);
                if (c->uid != 0 && setresuid(0, 0, 0) >= 0)
                        exec_child_fail(error_fd, EPERM);
        }

        /* As the user: a directory they may not enter is EACCES. */
        if (chdir(c->cwd) < 0)
                exec_child_fail(error_fd, EXEC_ERRNO_IN_CWD | errno);

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
        exec_child_fail(error_fd, errno);
}
