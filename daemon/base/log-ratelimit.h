/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Rate-limited log lines, per key: what a client can make the daemon log
 * over and over (a refused connection, a connection dropped for silence)
 * is logged once per key and interval; the repeats within the interval are
 * counted, and the count is logged with the last of them when the interval
 * is over ("Suppressed N more like this in the last 10 s: ...").  The front
 * end keys by uid and kind of message, so one user's flood costs one line
 * per interval and never hides another user's lines.
 *
 * At most LOG_RATELIMIT_KEYS keys are followed at once; a new key takes the
 * slot of the one followed longest (its count is logged first).  The timer
 * is armed only while some count waits to be logged.
 */

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct log_ratelimit;

#define LOG_RATELIMIT_KEYS 64u

int log_ratelimit_new(struct event_base *base, uint64_t interval_usec, struct log_ratelimit **ret);
struct log_ratelimit *log_ratelimit_free(struct log_ratelimit *l);

/* Logs the message at @level unless a message of @key was logged within
 * the interval; then it is only counted (and kept, to be shown with the
 * count).  Returns whether it was logged now. */
bool log_ratelimit_log(struct log_ratelimit *l, uint64_t key, int level, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
