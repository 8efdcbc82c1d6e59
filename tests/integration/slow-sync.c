/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Preloaded into cmwqd by test-store (LD_PRELOAD): every fdatasync() first
 * sleeps $CMWQ_SLOW_SYNC_MS milliseconds (default 50), as a slow disk
 * would.  Records then wait in the daemon's memory while a sync runs, so
 * that a SIGKILL right after an item ran finds out whether the item ran
 * before a record of its start had reached the log: a daemon that starts
 * items too early runs some of them twice, and the test sees it.
 *
 * With $CMWQ_FAIL_DIR_FSYNC=N, the Nth fsync() of a directory in the
 * process fails with EIO (a disk that fails once, right after a rename).
 * With $CMWQ_FAIL_COMPACT_RENAME=N, the Nth renameat() of "log.compact"
 * fails with EIO (a compaction whose new log cannot be installed).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int fdatasync(int fd) {
        static int (*real)(int);
        const char *ms = getenv("CMWQ_SLOW_SYNC_MS");
        long n = ms ? atol(ms) : 50;
        struct timespec ts = { n / 1000, (n % 1000) * 1000000L };

        if (!real)
                real = (int (*)(int)) dlsym(RTLD_NEXT, "fdatasync");
        if (n > 0)
                nanosleep(&ts, NULL);
        return real(fd);
}

int fsync(int fd) {
        static int (*real)(int);
        static atomic_long dirs;
        const char *fail = getenv("CMWQ_FAIL_DIR_FSYNC");
        struct stat st;

        if (!real)
                real = (int (*)(int)) dlsym(RTLD_NEXT, "fsync");
        if (fail && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && atomic_fetch_add(&dirs, 1) + 1 == atol(fail)) {
                errno = EIO;
                return -1;
        }
        return real(fd);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
        static int (*real)(int, const char *, int, const char *);
        static atomic_long compactions;
        const char *fail = getenv("CMWQ_FAIL_COMPACT_RENAME");

        if (!real)
                real = (int (*)(int, const char *, int, const char *)) dlsym(RTLD_NEXT, "renameat");
        if (fail && strcmp(oldpath, "log.compact") == 0 && atomic_fetch_add(&compactions, 1) + 1 == atol(fail)) {
                errno = EIO;
                return -1;
        }
        return real(olddirfd, oldpath, newdirfd, newpath);
}
