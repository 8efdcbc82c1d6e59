/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Per-user limits: what one uid may hold in the daemon at once, so that one
 * user's flood bounds the daemon's memory and leaves everybody else served.
 *
 * The limits are set once at start-up (cmwqd --limit NAME=VALUE) and are
 * the same for every unprivileged uid.  Two kinds:
 *  - per-user totals (workqueues, pending-items, queued-bytes, connections,
 *    reply-bytes, callback-threads),
 *    counted in struct user_usage; root and the daemon's own uid are exempt
 *    from these (they may stop the daemon anyway);
 *  - sizes that bound every item and every user's history, root's too
 *    (item-args-bytes, item-payload-bytes, output-bytes, history,
 *    history-bytes), since they bound the daemon's own memory.
 * hello-timeout is a connection deadline, not per user.  item-tasks and
 * user-tasks are enforced by the kernel on the items' processes (exec/pids.h):
 * the tasks of one item (root's too), and of all items of one user
 * together (root exempt).
 *
 * A refusal is -EDQUOT (the protocol's LIMIT_EXCEEDED) with a message that
 * names the limit, see limit_refuse().
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "request-limits.h"
#include "list.h"

struct core_error;
struct pwq_share;

/* Named limits on what one request may carry.  The byte sizes are the
 * defaults of limits item-args-bytes and item-payload-bytes below. */
#define ITEM_ARGV_MAX 4096u                     /* arguments */
#define ITEM_ENV_MAX 4096u                      /* environment entries */
#define ITEM_STRINGS_BYTES_MAX (256u * 1024u)   /* argv + env + cwd bytes */
#define ITEM_PAYLOAD_MAX (1024u * 1024u)        /* stdin payload */
#define ITEM_KEY_MAX CMWQ_WORK_KEY_MAX
#define ITEM_DELAY_MAX_USEC CMWQ_DELAY_MAX_USEC

enum limit_id {
        LIMIT_WORKQUEUES,
        LIMIT_PENDING_ITEMS,
        LIMIT_QUEUED_BYTES,
        LIMIT_CONNECTIONS,
        LIMIT_REPLY_BYTES,
        LIMIT_ITEM_ARGS_BYTES,
        LIMIT_ITEM_PAYLOAD_BYTES,
        LIMIT_OUTPUT_BYTES,
        LIMIT_HISTORY,
        LIMIT_HISTORY_BYTES,
        LIMIT_HELLO_TIMEOUT,
        LIMIT_CALLBACK_THREADS,
        LIMIT_ITEM_TASKS,
        LIMIT_USER_TASKS,
        _LIMIT_MAX,
};

struct limits {
        uint64_t value[_LIMIT_MAX];
};

/* The documented defaults (cmwqd(8), LIMITS). */
void limits_init_default(struct limits *l);
/* Parses "NAME=VALUE" (VALUE: a number, with an optional K, M or G suffix of
 * 1024 powers for the byte limits).  Returns -EINVAL with a message in @err
 * for an unknown name, a malformed or out-of-range value. */
int limits_parse(struct limits *l, const char *assignment, char *err, size_t errlen);
const char *limit_name(enum limit_id id);

/* What one uid holds now.  Exists while any of it is non-zero. */
struct user_usage {
        struct user_usage *hash_next;
        uid_t uid;
        uint64_t nr_workqueues;
        uint64_t nr_items;              /* unfinished: delayed, inactive, pending, running */
        uint64_t queued_bytes;          /* argv + env + cwd + payload of those */
        uint64_t nr_connections;
        uint64_t reply_bytes;           /* replies queued, not yet read, on its connections */
        uint64_t nr_callback_threads;   /* libcmwq-client worker threads registered */
        struct list_head history;       /* struct item, user_history_entry, oldest first */
        uint64_t nr_history;
        uint64_t history_bytes;         /* argv + output kept of those */
        /* Its shares of the built-in queues' max_active (core/core.h), one per
         * pwq, made when it first queues to one; go with it. */
        struct pwq_share *builtin_shares;
};

struct user_table {
        struct user_usage *buckets[256];
};

/* The uid's usage, created empty when it has none.  NULL: out of memory. */
struct user_usage *user_usage_get(struct user_table *t, uid_t uid);
/* Frees @u if it holds nothing any more. */
void user_usage_put(struct user_table *t, struct user_usage *u);
void user_table_done(struct user_table *t);

/* Sets @e to "per-user limit 'NAME' (VALUE) reached for uid UID" and
 * returns -EDQUOT. */
int limit_refuse(const struct limits *l, enum limit_id id, uid_t uid, struct core_error *e);
/* For the per-item limits: "WHAT BYTES bytes, over the limit 'NAME' (VALUE)",
 * -EDQUOT. */
int limit_refuse_item(const struct limits *l, enum limit_id id, struct core_error *e, const char *what, size_t bytes);
