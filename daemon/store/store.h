/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The durable log under the state directory (doc/design.md §3.11): an
 * append-only file of framed records (store/format.h), a snapshot of the
 * live state at its start.
 *
 * Records are appended from the event loop into memory; a commit thread
 * writes what has gathered and fdatasync()s it, so that everything appended
 * while one sync runs goes to disk with the next one (group commit) and the
 * loop never waits for the disk.  Every record gets a sequence number;
 * whoever must not act before a record is on disk (a reply to a client, the
 * start of an item) waits until store_durable_seq() reaches it, and
 * listeners are called from the loop each time it advances.
 *
 * When the log has grown to several times its last snapshot, it is
 * compacted off the event loop (doc/design.md §3.11), from the log itself
 * (store/compact.h): the loop only notes where the log ends and takes the
 * owner's plan (store_plan_fn), both at once; a thread waits until the
 * log is on disk that far, reads it back and writes what of it still
 * matters into STORE_COMPACT_NAME, and syncs it, while the loop goes on
 * serving and the commit thread goes on appending to the old log, which
 * stays complete.  Records appended since the start are also kept aside;
 * once the thread succeeded, the commit thread appends them to the new
 * file, syncs it and renames it over the log (then syncs the directory).
 * A crash at any moment leaves either the old log or the new one, each
 * holding every record that was on disk.  Once renamed, the new file is
 * the log even if the directory's sync failed: the thread syncs the
 * directory before its next commit counts.  (Before, a child forked for
 * it wrote the owner's snapshot; at a million items the fork stopped the
 * loop for 9-33 ms.)
 *
 * A full file system: the store keeps STORE_RESERVE_BYTES allocated past
 * the end of the log and renews that after every commit.  When it cannot
 * (ENOSPC, EDQUOT), or a write fails for want of room, the store is full:
 * store_is_full() says so, the core refuses every change with -ENOSPC, the
 * records still coming (items that end) go into the reserve, and past it
 * wait in memory, at most STORE_BACKLOG_MAX bytes (then they are dropped,
 * and the state on disk falls behind).  While full the commit thread looks
 * for room once a second; once the reserve is back, changes are accepted
 * again.  A store that cannot write its new log at start (full) goes on
 * with the log it read, full from the start: it serves what it recovered.
 */

#include <stdbool.h>
#include <stdint.h>

#include "list.h"
#include "store/format.h"

struct event_base;
struct store;
struct store_compact_plan;

#define STORE_LOG_NAME "log"
#define STORE_COMPACT_NAME "log.compact"
/* Held (flock()) by the daemon that uses the directory, with its pid in it:
 * store_open() fails with -EBUSY while another one holds it. */
#define STORE_LOCK_NAME "lock"
/* Compact when the log is past this and twice its size after the last
 * compaction. */
#define STORE_COMPACT_MIN_BYTES (4u * 1024u * 1024u)

struct store_listener {
        struct list_head entry;
        void (*durable)(struct store_listener *l, uint64_t seq);
        /* Optional: the state directory became full (@full) or has room
         * again.  While it is full, records may wait in memory for long:
         * replies to requests that change nothing need not wait for them
         * (changes are refused meanwhile, see store_is_full()); a reply
         * held for a record still waits until that record is on disk, and
         * is dropped if cmwqd stops first. */
        void (*full)(struct store_listener *l, bool full);
};

/* Where a snapshot goes: records are framed into buf and written to fd
 * whenever a chunk has gathered, so that a snapshot of any size needs only
 * a chunk of memory. */
struct store_writer {
        struct store_buf buf;
        int fd;
        uint64_t written;               /* bytes handed to write() */
};

int store_writer_append(struct store_writer *w, const CmwqStore__Record *rec);
/* A record framed already (read back from a log). */
int store_writer_append_frame(struct store_writer *w, const uint8_t *frame, size_t len);

/* Writes the live state into @w: a Header record first, then what recreates
 * every queue and item.  It runs on the loop, at start-up. */
typedef int (*store_snapshot_fn)(struct store_writer *w, void *userdata);
/* Called on the loop as a compaction starts: what it needs of the owner's
 * state at that moment (store/compact.h).  From then on, the owner writes
 * the Environment record again before the next record that names one. */
typedef int (*store_plan_fn)(struct store_compact_plan *plan, void *userdata);

/* Opens (creating) @dir and its log, and calls @replay for every intact
 * record in order.  A damaged tail is cut off (and logged).  The store takes
 * no records until store_start(). */
int store_open(const char *dir, store_record_cb replay, void *userdata, struct store **ret);
/* Whether store_open() found a damaged record before the log's end (not
 * a tail a crash tore): the records after it are lost, and so is what they
 * said of item ids given out (a copy of the log is kept). */
bool store_damaged(const struct store *s);
/* Rewrites the log as a snapshot (synchronously: this is start-up, before
 * any client) and starts the commit thread.  @plan NULL: compactions plan
 * with no history and no next id (tests). */
int store_start(struct store *s, struct event_base *base, store_snapshot_fn snapshot, store_plan_fn plan,
                void *userdata);
/* Writes and syncs what is still pending, stops the thread, and tells the
 * listeners how far that got: what waited for the disk and is on it now
 * may go out, what is still held never reached it.  No records after this. */
void store_stop(struct store *s);
/* store_stop() if not done yet, and frees. */
struct store *store_free(struct store *s);

/* Queues @rec for the next commit, which starts at once.  Returns its
 * sequence number (> 0) or a negative errno. */
int64_t store_append(struct store *s, const CmwqStore__Record *rec);
/* The same for a record that nobody waits for: it may wait up to 20 ms for
 * others to share its commit (a record appended with store_append() takes
 * it along at once). */
int64_t store_append_lazy(struct store *s, const CmwqStore__Record *rec);
/* A reply waits for every record appended so far: lazy ones go now. */
void store_urge(struct store *s);
uint64_t store_appended_seq(const struct store *s);
uint64_t store_durable_seq(const struct store *s);
void store_add_listener(struct store *s, struct store_listener *l);
void store_remove_listener(struct store *s, struct store_listener *l);
const char *store_path(const struct store *s);
const char *store_dir(const struct store *s);
/* Whether a compaction runs (its thread writes), for tests and benchmarks. */
bool store_compacting(const struct store *s);
/* Whether the log was started by store_start() (a snapshot of this
 * format, STORE_FORMAT_VERSION), rather than kept from before because the
 * state directory was full: only then may records that an older reader
 * would misread (doc/design.md §3.11, "Environments, once") go into it. */
bool store_log_is_ours(const struct store *s);
/* Whether the state directory has no room: changes must be refused
 * (NULL: false).  As last told to the loop. */
bool store_is_full(const struct store *s);
