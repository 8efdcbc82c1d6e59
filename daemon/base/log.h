/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The daemon's log.  Messages go to stderr with a level prefix, or to the
 * journal (structured, with PRIORITY=) when stderr is connected to it, as
 * systemd announces with $JOURNAL_STREAM.  Only the layer that decides what
 * to do about an error logs it.
 *
 * A line about a queue or an item says so with log_queue() or log_item():
 * in the journal it carries fields to filter on (journalctl
 * CMWQ_QUEUE=build, CMWQ_ITEM=42, CMWQ_UID=1000, CMWQ_CPU=0, CMWQ_POOL=cpu0);
 * on stderr it is the same line as any other. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
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

/* What a line is about: its journal fields.  Fields left zero (NULL, 0,
 * false) are left out. */
struct log_fields {
        const char *queue;              /* CMWQ_QUEUE=, NULL: none */
        uint64_t item;                  /* CMWQ_ITEM=, 0: none (ids start at 1) */
        bool has_uid;
        uid_t uid;                      /* CMWQ_UID=: the item's submitter, the queue's owner */
        bool has_cpu;
        unsigned cpu;                   /* CMWQ_CPU= */
        const char *pool;               /* CMWQ_POOL= (pool_log_name()), NULL: none */
};

#define LOG_FIELDS_MAX 5u
#define LOG_FIELD_SIZE 96u              /* "CMWQ_QUEUE=" and a name of CMWQ_NAME_MAX */

/* Writes @f's fields as "NAME=value" strings into @buf and returns how many
 * (at most LOG_FIELDS_MAX).  A value is cut to fit, never overflows. */
size_t log_fields_format(const struct log_fields *f, char buf[static LOG_FIELDS_MAX][LOG_FIELD_SIZE]);

int log_internal_fields(int level, int error, const char *file, int line, const struct log_fields *f,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define LOG_FIELDS_QUEUE(wq) \
        (&(const struct log_fields) { .queue = (wq)->name, .has_uid = true, .uid = (wq)->owner })
#define LOG_FIELDS_ITEM(i) \
        (&(const struct log_fields) { .queue = item_wq_name(i), .item = (i)->id, .has_uid = true, .uid = (i)->uid, \
                                      .has_cpu = (i)->cpu >= 0, .cpu = (unsigned) (i)->cpu })

/* log_queue(LOG_INFO, wq, "Froze %s", wq->name): a line about struct
 * workqueue @wq; log_item() about struct item @i. */
#define log_fields_errno(level, error, fields, ...) \
        log_internal_fields(level, error, __FILE__, __LINE__, fields, __VA_ARGS__)
#define log_queue(level, wq, ...) log_fields_errno(level, 0, LOG_FIELDS_QUEUE(wq), __VA_ARGS__)
#define log_queue_errno(level, e, wq, ...) log_fields_errno(level, e, LOG_FIELDS_QUEUE(wq), __VA_ARGS__)
#define log_item(level, i, ...) log_fields_errno(level, 0, LOG_FIELDS_ITEM(i), __VA_ARGS__)
#define log_item_errno(level, e, i, ...) log_fields_errno(level, e, LOG_FIELDS_ITEM(i), __VA_ARGS__)
