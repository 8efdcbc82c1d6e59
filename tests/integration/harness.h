/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Integration test harness: starts a real cmwqd (system mode, as root, on a
 * private socket in a fresh directory) and runs the real cmwqctl against it.
 * The daemon and cmwqctl under test come from $CMWQD and $CMWQCTL, the item
 * program from $CMWQ_PROBE (all set by "make check").  With $CMWQD_WRAPPER
 * set, the daemon is started as "$CMWQD_WRAPPER $CMWQD ARGS...".
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct cmwqd {
        pid_t pid;
        char dir[256];          /* 0755, holds socket, log, copies of the tools */
        char socket[320];
        char log[320];
        char ctl[320];          /* cmwqctl, copied where any uid can run it */
        char probe[320];
        char state_dir[320];    /* --state-dir: <dir>/state */
};

/* Starts the daemon with @extra_args (NULL-terminated, may be NULL) and waits
 * until it accepts connections.  Fails the test if it cannot.  Unless the
 * test set $DBUS_SYSTEM_BUS_ADDRESS (to a bus of its own), the daemon gets
 * an address where no bus is, so it never takes the host's logind
 * inhibitor. */
void cmwqd_start(struct cmwqd *d, const char *const *extra_args);
/* SIGTERM; fails the test unless it exits 0 within 15 s, and if its log has
 * an AddressSanitizer, LeakSanitizer or UBSan ("runtime error:") report. */
void cmwqd_stop(struct cmwqd *d);
/* cmwqd_stop() without removing the directory: the state stays for a
 * cmwqd_launch() on it. */
void cmwqd_terminate(struct cmwqd *d);
/* SIGKILL, and reap it. */
void cmwqd_kill(struct cmwqd *d);
/* Starts the daemon again on the directory (socket, log, state) of @d. */
void cmwqd_launch(struct cmwqd *d, const char *const *extra_args);

struct ctl_result {
        int status;             /* exit status, or 128 + signal */
        char *out;
        char *err;
};

/* Runs cmwqctl --socket SOCKET ARGS... (NULL-terminated) and returns its exit
 * status.  @uid -1: as the test (root). */
int ctl_run(const struct cmwqd *d, uid_t uid, struct ctl_result *r, const char *const *args);
void ctl_result_free(struct ctl_result *r);

#define CTL(d, r, ...) ctl_run(d, (uid_t) -1, r, (const char *const[]) { __VA_ARGS__, NULL })
#define CTL_AS(d, uid, r, ...) ctl_run(d, uid, r, (const char *const[]) { __VA_ARGS__, NULL })

/* Runs cmwqctl and fails the test unless it exits 0; returns its stdout
 * without the trailing newline (free it). */
char *ctl_ok(const struct cmwqd *d, const char *const *args);
#define CTL_OK(d, ...) ctl_ok(d, (const char *const[]) { __VA_ARGS__, NULL })

char *read_file(const char *path);
/* Open file descriptors of process @pid (fails the test if unreadable). */
int count_fds(pid_t pid);
/* The sum of every "KEY": N in cmwqctl's --json output. */
long json_sum(const char *json, const char *key);
/* fork(), failing the test in the parent if it fails.  Nothing of Check
 * runs in either process when it works: a passing assertion writes a
 * record to Check's message file, and the child's could interleave with
 * the parent's. */
pid_t test_fork(void);
/* Submits to "system", after @delay seconds, an item that prints
 * "[$CMWQ_TEST_MARKER]", with CMWQ_TEST_MARKER set to @marker in its
 * environment (NULL: unset); returns its id.  CMWQ_TEST_MARKER is unset
 * afterwards. */
char *submit_marker_item(const struct cmwqd *d, const char *marker, const char *delay);
/* Waits for item @id and asserts it exited 0 having printed "[@marker]". */
void assert_marker_item_printed(const struct cmwqd *d, const char *id, const char *marker);
/* A fresh file name in the daemon's directory, world-writable directory. */
void test_path(const struct cmwqd *d, const char *name, char *buf, size_t size);

/* Spans of the probe log: one per TAG that has both a start and an end. */
struct span {
        char tag[32];
        int64_t start;
        int64_t end;
        int cpu;
};
/* Parses @path; returns the number of complete spans (at most @max). */
int read_spans(const char *path, struct span *spans, int max);
/* The largest number of spans running at one instant. */
int max_overlap(const struct span *spans, int n);
const struct span *find_span(const struct span *spans, int n, const char *tag);

/* Waits up to @timeout_ms for @path to have at least @lines lines. */
bool wait_for_lines(const char *path, int lines, int timeout_ms);
int count_lines(const char *path);

/* A gate for probe items ("probe wait GATE ...", "probe spin-until GATE
 * ..."): a file in the daemon's directory on which the test holds an
 * exclusive flock(2) until it opens the gate.  Items wait for an event, not
 * for a time. */
struct file_gate {
        int fd;
        char path[400];
};
void file_gate_close(const struct cmwqd *d, struct file_gate *g, const char *name);
void file_gate_open(struct file_gate *g);

/* The lines "TAG WHAT ..." of probe log @path with this @what, any TAG. */
int count_probe_lines(const char *path, const char *what);
/* Waits up to @timeout_ms for @n such lines; returns whether they came. */
bool wait_for_probe_lines(const char *path, const char *what, int n, int timeout_ms);

/* CLOCK_MONOTONIC in ns: comparable with the probe's timestamps. */
int64_t mono_ns(void);

/* cmwqctl running in the background; its stdout and stderr go to files in the
 * daemon's directory. */
struct ctl_async {
        pid_t pid;
        int64_t started_ns;     /* mono_ns() just before it was started */
        int64_t ended_ns;       /* mono_ns() when it was seen to have exited (polled every 5 ms) */
        char out_path[400];
        char err_path[400];
};

/* Starts cmwqctl --socket SOCKET ARGS... (NULL-terminated) as the test (root). */
void ctl_start(const struct cmwqd *d, struct ctl_async *a, const char *const *args);
/* Waits up to @timeout_ms (0: only look) for it to exit.  If it did, fills @r
 * (free with ctl_result_free()) and returns true; else it keeps running. */
bool ctl_finish(struct ctl_async *a, int timeout_ms, struct ctl_result *r);
#define CTL_START(d, a, ...) ctl_start(d, a, (const char *const[]) { __VA_ARGS__, NULL })
