/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Compaction of the durable log from the log itself (doc/design.md §3.11):
 * the records of a log that still say something, written into a new one.
 * It reads only the file and what the owner said when it began (the plan),
 * never the owner's memory, so that it runs on a thread of its own while
 * the loop goes on changing that memory.
 *
 * What the new records replay to (core/store-recovery.c) is what the old
 * ones replayed to:
 *  - a Header, with the next item id of the plan;
 *  - every queue that exists at the end, in the order it was created, as
 *    its last Workqueue record says it is (each one holds a queue's whole
 *    settings);
 *  - the items that are live at the end (queued on a queue that still
 *    exists, and no ItemResult): their ItemQueued and every ItemStarted,
 *    ItemReleased and ItemRequeued after it, in the log's order, preceded
 *    by the Environment records they name;
 *  - the items of the plan's history: an ItemHistory record as it was, or
 *    one made of the item's ItemQueued (without the environment and
 *    payload that a finished item no longer keeps) and the ItemResult that
 *    ended it, where that result was.
 * Everything else is gone: finished items no longer in the history,
 * destroyed queues, environments no live item names.  The owner must
 * write the Environment record again before a new record names one it
 * had written before the plan was taken.
 */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

/* Taken by the owner on the loop when a compaction starts
 * (store_plan_fn()). */
struct store_compact_plan {
        uint64_t next_id;               /* the next item id to give */
        uint64_t *history;              /* the items in the history, any order (malloc()) */
        size_t n_history;
};

void store_compact_plan_done(struct store_compact_plan *plan);

/* Writes into @w what still matters of the log in @fd (readable with
 * pread()), whose first @end bytes (the magic first) are on disk and will
 * not change.  Gives up with -ECANCELED once *@cancel is set, and with
 * -EBADMSG if a record there does not check out. */
int store_compact_log(int fd, uint64_t end, struct store_compact_plan *plan, struct store_writer *w,
                      atomic_bool *cancel);
