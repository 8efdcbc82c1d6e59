/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* cmwqctl's output: aligned tables and JSON for the daemon's replies. */

#include <stdbool.h>
#include <stdio.h>

#include "cmwq.pb-c.h"
#include "cmwqctl-json.h"

typedef struct TableColumn {
        const char *header;
        bool right;             /* right-aligned (numbers) */
} TableColumn;

typedef struct Table Table;

int table_new(const TableColumn *columns, size_t n_columns, Table **ret);
Table *table_free(Table *t);
static inline void table_freep(Table **t) {
        table_free(*t);
}
/* Append the next cell, row by row. */
int table_add(Table *t, const char *cell);
int table_addf(Table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void table_print(const Table *t, FILE *f);

/* Items: "key: value" lines, output included; or one JSON object. */
void item_print(const Cmwq__ItemInfo *item, FILE *f);
void item_json(const Cmwq__ItemInfo *item, JsonWriter *w);

/* Listings.  Each returns 0 or -ENOMEM. */
int list_print(const Cmwq__ListReply *list, FILE *f);
void list_json(const Cmwq__ListReply *list, JsonWriter *w);
int pools_print(const Cmwq__PoolsReply *pools, FILE *f);
void pools_json(const Cmwq__PoolsReply *pools, JsonWriter *w);
/* The flags decide which columns apply to a queue, as in the kernel's
 * wq_monitor.py: the queue's own (WorkqueueStats.flags), else from @list
 * (may be NULL; for a cmwqd that does not send them). */
int stats_print(const Cmwq__StatsReply *stats, const Cmwq__ListReply *list, FILE *f);
void stats_json(const Cmwq__StatsReply *stats, JsonWriter *w);
