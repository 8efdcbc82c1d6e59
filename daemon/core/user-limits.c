/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/user-limits.h"
#include "exec/exec.h"
#include "frame.h"
#include "util.h"

#define KIB UINT64_C(1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)

static const struct {
        const char *name;
        uint64_t dfl;
        uint64_t min;
        uint64_t max;
        bool bytes;             /* takes K/M/G */
} limit_table[_LIMIT_MAX] = {
        [LIMIT_WORKQUEUES] = { "workqueues", 64, 1, 1000000, false },
        [LIMIT_PENDING_ITEMS] = { "pending-items", 10000, 1, UINT64_C(100000000), false },
        [LIMIT_QUEUED_BYTES] = { "queued-bytes", 64 * MIB, 1, 1024 * GIB, true },
        [LIMIT_CONNECTIONS] = { "connections", 64, 1, 1000000, false },
        /* Two largest replies must fit. */
        [LIMIT_REPLY_BYTES] = { "reply-bytes", 64 * MIB, 2 * (uint64_t) CMWQ_FRAME_MAX_PAYLOAD, 1024 * GIB, true },
        /* A request must fit one frame; a reply carries both streams. */
        [LIMIT_ITEM_ARGS_BYTES] = { "item-args-bytes", ITEM_STRINGS_BYTES_MAX, 1, CMWQ_FRAME_MAX_PAYLOAD, true },
        [LIMIT_ITEM_PAYLOAD_BYTES] = { "item-payload-bytes", ITEM_PAYLOAD_MAX, 1, CMWQ_FRAME_MAX_PAYLOAD, true },
        [LIMIT_OUTPUT_BYTES] = { "output-bytes", EXEC_OUTPUT_LIMIT_DEFAULT, 1, MIB, true },
        [LIMIT_HISTORY] = { "history", 1000, 1, 10000000, false },
        [LIMIT_HISTORY_BYTES] = { "history-bytes", 16 * MIB, 1, 1024 * GIB, true },
        [LIMIT_HELLO_TIMEOUT] = { "hello-timeout", 10, 1, 3600, false },
        /* Each costs a perf fd (or /proc sampling) in the daemon. */
        [LIMIT_CALLBACK_THREADS] = { "callback-threads", 1024, 1, 1000000, false },
        /* Processes and threads: of one item, of all of a user's items. */
        [LIMIT_ITEM_TASKS] = { "item-tasks", 512, 1, 4194304, false },
        [LIMIT_USER_TASKS] = { "user-tasks", 1024, 1, 4194304, false },
};

const char *limit_name(enum limit_id id) {
        return (unsigned) id < _LIMIT_MAX ? limit_table[id].name : "unknown";
}

void limits_init_default(struct limits *l) {
        for (size_t k = 0; k < _LIMIT_MAX; k++)
                l->value[k] = limit_table[k].dfl;
}

int limits_parse(struct limits *l, const char *assignment, char *err, size_t errlen) {
        const char *eq = strchr(assignment, '=');
        unsigned long long v;
        uint64_t mult = 1;
        char *end;
        size_t k;

        if (!eq) {
                snprintf(err, errlen, "--limit needs NAME=VALUE, not '%s'", assignment);
                return -EINVAL;
        }
        for (k = 0; k < _LIMIT_MAX; k++)
                if (strlen(limit_table[k].name) == (size_t) (eq - assignment) &&
                    strncmp(limit_table[k].name, assignment, (size_t) (eq - assignment)) == 0)
                        break;
        if (k == _LIMIT_MAX) {
                snprintf(err, errlen, "unknown limit '%.*s' (see cmwqd(8), LIMITS)", (int) (eq - assignment),
                         assignment);
                return -EINVAL;
        }
        errno = 0;
        v = strtoull(eq + 1, &end, 10);
        if (limit_table[k].bytes && *end && !end[1]) {
                switch (*end) {
                case 'K': case 'k': mult = KIB; end++; break;
                case 'M': case 'm': mult = MIB; end++; break;
                case 'G': case 'g': mult = GIB; end++; break;
                }
        }
        if (errno || end == eq + 1 || *end || eq[1] == '-' || v > limit_table[k].max / mult ||
            v * mult < limit_table[k].min) {
                snprintf(err, errlen, "invalid value '%s' for limit '%s' (%" PRIu64 "-%" PRIu64 "%s)", eq + 1,
                         limit_table[k].name, limit_table[k].min, limit_table[k].max,
                         limit_table[k].bytes ? " bytes, or with K, M, G" : "");
                return -EINVAL;
        }
        l->value[k] = v * mult;
        return 0;
}

int limit_refuse(const struct limits *l, enum limit_id id, uid_t uid, struct core_error *e) {
        core_error_set(e, -EDQUOT, "per-user limit '%s' (%" PRIu64 ") reached for uid %u", limit_name(id),
                       l->value[id], (unsigned) uid);
        if (e)
                e->limit = limit_name(id);
        return -EDQUOT;
}

int limit_refuse_item(const struct limits *l, enum limit_id id, struct core_error *e, const char *what, size_t bytes) {
        core_error_set(e, -EDQUOT, "%s %zu bytes, over the limit '%s' (%" PRIu64 ")", what, bytes, limit_name(id),
                       l->value[id]);
        if (e)
                e->limit = limit_name(id);
        return -EDQUOT;
}

static size_t user_bucket(uid_t uid) {
        return ((uint32_t) uid * UINT32_C(2654435761)) >> 24;
}

struct user_usage *user_usage_get(struct user_table *t, uid_t uid) {
        struct user_usage **b = &t->buckets[user_bucket(uid)], *u;

        for (u = *b; u; u = u->hash_next)
                if (u->uid == uid)
                        return u;
        u = calloc(1, sizeof(*u));
        if (!u)
                return NULL;
        u->uid = uid;
        list_init(&u->history);
        u->hash_next = *b;
        *b = u;
        return u;
}

void user_usage_put(struct user_table *t, struct user_usage *u) {
        if (!u || u->nr_workqueues || u->nr_items || u->queued_bytes || u->nr_connections || u->reply_bytes ||
            u->nr_history || u->nr_callback_threads)
                return;
        for (struct user_usage **p = &t->buckets[user_bucket(u->uid)]; *p; p = &(*p)->hash_next)
                if (*p == u) {
                        *p = u->hash_next;
                        free(u->builtin_shares);
                        free(u);
                        return;
                }
}

void user_table_done(struct user_table *t) {
        for (size_t k = 0; k < ELEMENTSOF(t->buckets); k++)
                while (t->buckets[k]) {
                        struct user_usage *u = t->buckets[k];

                        t->buckets[k] = u->hash_next;
                        free(u->builtin_shares);
                        free(u);
                }
}
