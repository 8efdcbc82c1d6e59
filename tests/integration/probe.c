/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The work item the integration tests submit.  It appends what it did, with
 * CLOCK_MONOTONIC timestamps (comparable across processes), to a log file so
 * that a test can tell which items overlapped.
 *
 *   probe spin MS LOG TAG     burn MS ms of CPU time ("up" first, its span after)
 *   probe burn MS LOG TAG     the same without the "up" line: nothing that
 *                             may block (a write) before it computes
 *   probe spin-until GATE LOG TAG
 *                             "up", then burn CPU time until GATE (a file
 *                             the test holds an exclusive flock(2) on) opens,
 *                             never blocking; its span after
 *   probe sleep MS LOG TAG    sleep MS ms
 *   probe wait GATE LOG TAG   "start", block until GATE opens, "end"
 *   probe cpu                 print the CPU it runs on
 *   probe exit N              exit with status N
 *   probe tempfail LOG TAG N  exit 75 (requeue me) until it has run N times
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(clockid_t clock) {
        struct timespec ts;
        clock_gettime(clock, &ts);
        return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void log_line_at(const char *path, const char *tag, const char *what, int64_t when, int cpu) {
        char line[256];
        int fd, n;

        n = snprintf(line, sizeof(line), "%s %s %lld %d\n", tag, what, (long long) when, cpu);
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0) {
                perror(path);
                exit(2);
        }
        /* One write per line: O_APPEND keeps lines of concurrent items whole. */
        if (write(fd, line, n) != n)
                exit(2);
        close(fd);
}

static void log_line(const char *path, const char *tag, const char *what) {
        log_line_at(path, tag, what, now_ns(CLOCK_MONOTONIC), sched_getcpu());
}

static int count_lines(const char *path, const char *tag) {
        char line[256];
        FILE *f = fopen(path, "re");
        int n = 0;

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, tag, strlen(tag)) == 0 && line[strlen(tag)] == ' ')
                        n++;
        fclose(f);
        return n;
}

static int open_gate(const char *path) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);

        if (fd < 0) {
                perror(path);
                exit(2);
        }
        return fd;
}

/* Whether the gate is open now (its holder let go of its lock); never
 * sleeps. */
static int gate_is_open(int fd) {
        if (flock(fd, LOCK_SH | LOCK_NB) == 0)
                return 1;
        if (errno != EWOULDBLOCK) {
                perror("flock");
                exit(2);
        }
        return 0;
}

int main(int argc, char **argv) {
        if (argc >= 5 && (strcmp(argv[1], "spin") == 0 || strcmp(argv[1], "burn") == 0 ||
                          strcmp(argv[1], "spin-until") == 0)) {
                int until_gate = strcmp(argv[1], "spin-until") == 0;
                int64_t ms = until_gate ? 0 : atoll(argv[2]), start, t_start, t_end;
                int cpu_start, cpu_end, gate = until_gate ? open_gate(argv[2]) : -1;

                /* Appending to a file on ext4 can sleep (in the journal)
                 * and a sleeping item rightly lets the next one start: so
                 * the span holds nothing but the spin, its lines are
                 * written after it, and "up" says early that it runs
                 * ("burn" does not: nothing before its spin may block). */
                if (strcmp(argv[1], "burn") != 0 && !until_gate)
                        log_line(argv[3], argv[4], "up");
                t_start = now_ns(CLOCK_MONOTONIC);
                cpu_start = sched_getcpu();
                start = now_ns(CLOCK_THREAD_CPUTIME_ID);
                /* After the span's start: the test opens the gate once
                 * every item said "up", and an item preempted between the
                 * two would otherwise start its span after another's end.
                 * Only items that must overlap wait at a gate, so the
                 * append's possible sleep inside the span hides nothing. */
                if (until_gate)
                        log_line(argv[3], argv[4], "up");
                if (until_gate)
                        while (!gate_is_open(gate))
                                ;
                else
                        while (now_ns(CLOCK_THREAD_CPUTIME_ID) - start < ms * 1000000)
                                ;
                t_end = now_ns(CLOCK_MONOTONIC);
                cpu_end = sched_getcpu();
                log_line_at(argv[3], argv[4], "start", t_start, cpu_start);
                log_line_at(argv[3], argv[4], "end", t_end, cpu_end);
                return 0;
        }
        if (argc >= 5 && strcmp(argv[1], "sleep") == 0) {
                int64_t ms = atoll(argv[2]);
                struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

                log_line(argv[3], argv[4], "start");
                nanosleep(&ts, NULL);
                log_line(argv[3], argv[4], "end");
                return 0;
        }
        if (argc >= 5 && strcmp(argv[1], "wait") == 0) {
                int gate = open_gate(argv[2]);

                log_line(argv[3], argv[4], "start");
                if (flock(gate, LOCK_SH) < 0) {
                        perror("flock");
                        return 2;
                }
                log_line(argv[3], argv[4], "end");
                return 0;
        }
        if (argc >= 2 && strcmp(argv[1], "cpu") == 0) {
                printf("%d\n", sched_getcpu());
                return 0;
        }
        if (argc >= 3 && strcmp(argv[1], "exit") == 0)
                return atoi(argv[2]);
        if (argc >= 5 && strcmp(argv[1], "tempfail") == 0) {
                log_line(argv[2], argv[3], "run");
                return count_lines(argv[2], argv[3]) < atoi(argv[4]) ? 75 : 0;
        }
        if (argc >= 3 && strcmp(argv[1], "forks") == 0) {
                /* Makes up to N children that wait, prints how many it
                 * could, then ends them. */
                int n = atoi(argv[2]), made = 0;
                pid_t kids[4096];

                for (; made < n && made < 4096; made++) {
                        pid_t pid = fork();

                        if (pid < 0)
                                break;
                        if (pid == 0) {
                                pause();
                                _exit(0);
                        }
                        kids[made] = pid;
                }
                printf("%d\n", made);
                fflush(stdout);
                for (int k = 0; k < made; k++) {
                        kill(kids[k], SIGKILL);
                        waitpid(kids[k], NULL, 0);
                }
                return 0;
        }
        fprintf(stderr, "usage: probe spin|burn|sleep MS LOG TAG | spin-until|wait GATE LOG TAG | cpu | exit N | "
                        "tempfail LOG TAG N | forks N\n");
        return 2;
}
