/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The work item of the block-reaction benchmark (tests/bench/cmwq-bench.c).
 * It prints its timestamps on stdout, which the daemon captures and the
 * benchmark reads back with "wait".  Each line is
 *
 *   WHAT MONOTONIC_NS REALTIME_US MAIN_MONOTONIC_NS MAIN_REALTIME_US
 *
 * the time of WHAT, and the time main() was entered.
 * CLOCK_MONOTONIC compares across processes; CLOCK_REALTIME (µs) compares
 * with the daemon's own started_usec of an item.
 *
 *   blocker start               the first thing in main(): when it started
 *   blocker block SPIN_US SLEEP_US
 *                               burn SPIN_US of CPU (so that it counts as
 *                               running while the next item is queued behind
 *                               it), then note the time and block in
 *                               nanosleep() for SLEEP_US
 *   blocker exit SPIN_US        burn SPIN_US of CPU, note the time, exit
 *
 * Nothing is written before a timestamp is taken that could delay it: the
 * line of "block" is printed after the sleep.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(clockid_t clock) {
        struct timespec ts;

        clock_gettime(clock, &ts);
        return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void spin_us(int64_t us) {
        int64_t start = now_ns(CLOCK_THREAD_CPUTIME_ID);

        while (now_ns(CLOCK_THREAD_CPUTIME_ID) - start < us * 1000)
                ;
}

static void put(const char *what, int64_t mono, int64_t real, int64_t main_mono, int64_t main_real) {
        char line[128];
        int n;

        n = snprintf(line, sizeof(line), "%s %lld %lld %lld %lld\n", what, (long long) mono, (long long) (real / 1000),
                     (long long) main_mono, (long long) (main_real / 1000));
        if (write(STDOUT_FILENO, line, (size_t) n) != n)
                _exit(3);
}

int main(int argc, char **argv) {
        /* Taken before anything else, argument checks included. */
        int64_t mono = now_ns(CLOCK_MONOTONIC), real = now_ns(CLOCK_REALTIME);
        const int64_t main_mono = mono, main_real = real;

        if (argc >= 2 && strcmp(argv[1], "start") == 0) {
                put("start", mono, real, main_mono, main_real);
                return 0;
        }
        if (argc >= 4 && strcmp(argv[1], "block") == 0) {
                int64_t sleep_us = atoll(argv[3]);
                struct timespec ts = { sleep_us / 1000000, (sleep_us % 1000000) * 1000 };

                spin_us(atoll(argv[2]));
                mono = now_ns(CLOCK_MONOTONIC);
                real = now_ns(CLOCK_REALTIME);
                nanosleep(&ts, NULL);
                put("block", mono, real, main_mono, main_real);
                return 0;
        }
        if (argc >= 3 && strcmp(argv[1], "exit") == 0) {
                spin_us(atoll(argv[2]));
                mono = now_ns(CLOCK_MONOTONIC);
                real = now_ns(CLOCK_REALTIME);
                put("exit", mono, real, main_mono, main_real);
                _exit(0);
        }
        fprintf(stderr, "usage: blocker start | block SPIN_US SLEEP_US | exit SPIN_US\n");
        return 2;
}
