/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Argument parsing and small formatting helpers of cmwqctl, kept apart
 * from main() so that unit tests can reach them. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cmwq.pb-c.h"

/* cmwqctl's exit status (see cmwqctl(1)). */
enum {
        CTL_EXIT_OK = 0,
        CTL_EXIT_REFUSED = 1,           /* cmwqd refused the request, or a local failure */
        CTL_EXIT_USAGE = 2,             /* bad command line */
        CTL_EXIT_CONNECT = 3,           /* cannot connect, connection lost, protocol error */
        /* submit --wait and wait, as timeout(1) and the shell do: */
        CTL_EXIT_ITEM_TIMED_OUT = 124,
        CTL_EXIT_ITEM_CANCELLED = 125,
        CTL_EXIT_ITEM_NOT_STARTED = 127,
        CTL_EXIT_ITEM_SIGNAL_BASE = 128,        /* + signal number */
};

/* Strict decimal parsers: digits only, no sign, no white space, no
 * suffix.  -EINVAL for anything else, -ERANGE when too large. */
int parse_uint64(const char *s, uint64_t *ret);
int parse_uint32(const char *s, uint32_t *ret);
/* A CPU number: 0 .. INT32_MAX. */
int parse_cpu(const char *s, int32_t *ret);
/* Seconds, whole or decimal ("2", "0.5", ".25", "3."), to microseconds;
 * digits beyond the sixth decimal are ignored. */
int parse_seconds_usec(const char *s, uint64_t *ret);

/* Turn a program given relative to @cwd ("./run.sh", "bin/x") into an
 * absolute path; bare names and absolute paths are returned as copies.
 * NULL on out of memory. */
char *program_make_absolute(const char *program, const char *cwd);

/* The exit status `cmwqctl wait` ends with for an item; -EAGAIN if the
 * item has not ended yet. */
int item_exit_code(const Cmwq__ItemInfo *item);

const char *item_state_to_string(Cmwq__ItemState s);

/* The name of one workqueue flag bit ("unbound"), NULL if unknown. */
const char *workqueue_flag_to_string(uint32_t bit);
/* Workqueue flag bits as "unbound,freezable" (or "-" for none) in @buf. */
const char *workqueue_flags_to_string(uint32_t flags, char *buf, size_t size);

/* Write @n bytes at @p for a terminal: control characters other than
 * newline and tab are shown as \xNN. */
void fputs_visible(FILE *f, const void *p, size_t n);
/* Write @s quoted for a POSIX shell when it needs quoting. */
void fputs_shell_quoted(FILE *f, const char *s);
