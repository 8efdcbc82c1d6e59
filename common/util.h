/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define USEC_PER_SEC UINT64_C(1000000)
#define USEC_PER_MSEC UINT64_C(1000)

static inline void freep(void *p) {
        free(*(void **) p);
}

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}

/* Hand an owned pointer out of a cleanup-guarded local. */
#define TAKE_PTR(p) ({ __typeof__(p) _p = (p); (p) = NULL; _p; })
#define TAKE_FD(fd) ({ int _fd = (fd); (fd) = -1; _fd; })

static inline uint64_t now_usec(clockid_t clock) {
        struct timespec ts;
        clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* CLOCK_MONOTONIC in ns: the clock of cmwqd's perf records. */
static inline uint64_t now_nsec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * UINT64_C(1000000000) + (uint64_t) ts.tv_nsec;
}

/* A spinning thread's pause: tells the CPU (and a hypervisor) that it
 * waits, on the architectures that have a way to. */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__) || (defined(__arm__) && __ARM_ARCH >= 7)
        __asm__ __volatile__("yield" ::: "memory");
#else
        __asm__ __volatile__("" ::: "memory");
#endif
}

static inline struct timeval timeval_from_usec(uint64_t usec) {
        return (struct timeval) { .tv_sec = usec / USEC_PER_SEC, .tv_usec = usec % USEC_PER_SEC };
}

static inline struct timespec timespec_from_usec(uint64_t usec) {
        return (struct timespec) { .tv_sec = (time_t) (usec / USEC_PER_SEC),
                                   .tv_nsec = (long) (usec % USEC_PER_SEC) * 1000 };
}

/* Reads into @buf until @size bytes are in or at end of file, again after
 * EINTR: how many bytes it read (fewer than @size at the end), or -errno. */
ssize_t read_full(int fd, void *buf, size_t size);

/* A NULL-terminated string vector. */
char **strv_free(char **l);
size_t strv_length(char *const *l);
static inline void strv_freep(char ***l) {
        strv_free(*l);
}
