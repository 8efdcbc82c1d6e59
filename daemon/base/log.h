/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The daemon's log.  Messages go to stderr with a level prefix, or to the
 * journal (structured, with PRIORITY=) when stderr is connected to it, as
 * systemd announces with $JOURNAL_STREAM.  Only the layer that decides what
 * to do about an error logs it. */

#include <stdbool.h>
#include <syslog.h>

void log_setup(int max_level);
int log_level_from_string(const char *s);   /* -EINVAL if unknown */
int log_get_max_level(void);

/* Logs and returns @error (a negative errno), so callers can write
 * "return log_error_errno(r, ...);". %m expands to strerror(-error). */
int log_internal(int level, int error, const char *file, int line, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));

#define log_full_errno(level, error, ...) \
        log_internal(level, error, __FILE__, __LINE__, __VA_ARGS__)
#define log_debug(...) log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_full_errno(LOG_ERR, 0, __VA_ARGS__)
#define log_debug_errno(e, ...) log_full_errno(LOG_DEBUG, e, __VA_ARGS__)
#define log_info_errno(e, ...) log_full_errno(LOG_INFO, e, __VA_ARGS__)
#define log_notice_errno(e, ...) log_full_errno(LOG_NOTICE, e, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...) log_full_errno(LOG_ERR, e, __VA_ARGS__)
