/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * confine PROGRAM [ARG]...: runs PROGRAM (the cmwqd under test) with what
 * the machine might refuse it, for tests of how cmwqd copes, without
 * touching anything machine-wide:
 *   CMWQ_CONFINE_NO_PERF=1   perf_event_open() fails with EACCES (seccomp),
 *                            as where perf_event_paranoid forbids it
 *   CMWQ_CONFINE_CGROUP=DIR  start inside cgroup DIR (its cgroup.procs),
 *                            whose pids.max the test then lowers
 * The harness runs cmwqd through it when $CMWQD_WRAPPER names it.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int refuse_perf(void) {
        struct sock_filter filter[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_perf_event_open, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EACCES & SECCOMP_RET_DATA)),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = { .len = sizeof(filter) / sizeof(filter[0]), .filter = filter };

        /* Root may install a filter as it is; anyone else needs no_new_privs. */
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0)
                return 0;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
                return -errno;
        return 0;
}

static int join_cgroup(const char *dir) {
        char path[4096];
        int fd, r = 0;

        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (write(fd, "0\n", 2) != 2)
                r = -errno;
        close(fd);
        return r;
}

int main(int argc, char **argv) {
        const char *no_perf = getenv("CMWQ_CONFINE_NO_PERF"), *cgroup = getenv("CMWQ_CONFINE_CGROUP");
        int r;

        if (argc < 2) {
                fprintf(stderr, "Usage: confine PROGRAM [ARG]...\n");
                return 2;
        }
        if (cgroup && *cgroup && (r = join_cgroup(cgroup)) < 0) {
                fprintf(stderr, "confine: cannot join cgroup %s: %s\n", cgroup, strerror(-r));
                return 126;
        }
        if (no_perf && strcmp(no_perf, "1") == 0 && (r = refuse_perf()) < 0) {
                fprintf(stderr, "confine: cannot install the seccomp filter: %s\n", strerror(-r));
                return 126;
        }
        execv(argv[1], argv + 1);
        fprintf(stderr, "confine: cannot run %s: %s\n", argv[1], strerror(errno));
        return 127;
}
