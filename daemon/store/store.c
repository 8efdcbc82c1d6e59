/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The durable log: reading it back at start, group commit through a thread,
 * compaction.  See store/store.h.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cpus.h"
#include "base/log.h"
#include "store/compact.h"
#include "store/store.h"
#include "util.h"

#define STORE_RETRY_USEC USEC_PER_SEC
/* How long records nobody waits for (an item's result, the start of one
 * whose claim is on disk) may gather before they are committed: a stream
 * of them then shares one fdatasync() instead of taking one each (1.2 per
 * item before, at 270 items a second).  A crash in that time loses them as
 * it would lose them during the sync: the item is reported interrupted, or
 * runs again on a rerun queue. */
#define STORE_LAZY_USEC (20 * USEC_PER_MSEC)

/* Room kept allocated past the end of the log (fallocate(KEEP_SIZE)), renewed
 * after every commit: the first renewal that fails says the file system is
 * full while what was just accepted is still written.  The records of items
 * that end (their results, output included) and of requests in flight then
 * still fit while changes are refused. */
#define STORE_RESERVE_BYTES (256u * 1024u)

/* While the log cannot be written, records wait in memory up to this; past
 * it they are dropped (the state on disk falls behind, and says so). */
#define STORE_BACKLOG_MAX (4u * 1024u * 1024u)

/* A snapshot is written in chunks of this. */
#define STORE_WRITER_CHUNK (256u * 1024u)

static bool errno_is_full(int r) {
        return r == -ENOSPC || r == -EDQUOT;
}

struct store {
        char *dir;
        char *path;
        int dir_fd;
        int lock_fd;                    /* STORE_LOCK_NAME, locked */
        struct event_base *base;
        store_snapshot_fn snapshot;
        store_plan_fn plan;
        void *snapshot_userdata;
        struct list_head listeners;

        /* Event loop only. */
        uint64_t appended_seq;
        uint64_t log_bytes;             /* as it will be once everything is written */
        uint64_t compacted_bytes;       /* right after the last compaction */
        struct event *wake_event;       /* the thread says: durable_seq moved */
        struct event *compact_event;
        bool compact_running;           /* compact_thread writes the new log */
        /* It did: the commit thread installs it (compact_installed says
         * how that went); compact_new_size is its size before the tail. */
        bool compact_installing;
        uint64_t compact_new_size;
        pthread_t compact_thread;
        int compact_log_fd;             /* the log being compacted, for reading */
        uint64_t compact_log_bytes;     /* log_bytes when it began: what it compacts */
        uint64_t compact_start_seq;     /* the last record in that */
        struct store_compact_plan compact_plan;
        atomic_bool compact_cancel;
        uint64_t seen_durable_seq;
        bool seen_full;
        bool backlog_dropping;          /* records were dropped: logged once */
        size_t valid_len;               /* store_open(): intact part of the log read */
        bool log_new;                   /* store_open(): the log had no magic yet */
        bool damaged;                   /* store_open(): a record before the log's end did not check out */
        bool log_ours;                  /* store_start() wrote the log: its header is of this format */

        /* Shared with the commit thread, under lock. */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        pthread_t thread;
        bool thread_running;
        int fd;                         /* the log; replaced by a compaction */
        struct store_buf pending;       /* framed records not yet handed to write() */
        uint64_t pending_seq;           /* the last record in pending */
        /* Someone waits for a record in pending; without one, pending is
         * committed STORE_LAZY_USEC after its first record (lazy_since,
         * CLOCK_MONOTONIC), with whatever joined it meanwhile. */
        bool pending_urgent;
        uint64_t lazy_since_usec;
        bool compacting;                /* a new log is written: records also go to tail */
        bool compact_broken;            /* a record could not go to tail: the compaction is void */
        struct store_buf tail;          /* every record appended since it began */
        bool compact_posted;            /* the new log is written: the commit thread finishes it */
        pthread_cond_t compact_cond;    /* compact_thread waits: durable_seq moved, or cancel */
        bool compact_done;              /* compact_thread is through: the loop joins it */
        int compact_installed;          /* 1: renamed over the log, -1: void (the old log goes on) */
        int compact_result;             /* what it said */
        uint64_t compact_size;          /* the new log's size, if it wrote it */
        pid_t compact_gate;             /* tests: the stopped process it waits for */
        uint64_t durable_seq;
        bool full;                      /* no room: changes are refused */
        bool failing;                   /* the last commit failed */
        bool reserve_unsupported;       /* no fallocate() here: "full" once a write fails */
        /* A new log was renamed over the old one and the directory's sync
         * failed: it is the log, but a crash may bring the old one back
         * until the directory is synced.  Nothing is acknowledged until
         * then (the thread syncs it before its next commit). */
        bool dir_unsynced;
        bool stop;
        int wake_fd;                    /* eventfd */
};

const char *store_path(const struct store *s) {
        return s->path;
}

uint64_t store_appended_seq(const struct store *s) {
        return s->appended_seq;
}

uint64_t store_durable_seq(const struct store *s) {
        return s->seen_durable_seq;
}

const char *store_dir(const struct store *s) {
        return s->dir;
}

bool store_compacting(const struct store *s) {
        return s && s->compact_running;
}

bool store_log_is_ours(const struct store *s) {
        return s->log_ours;
}

bool store_is_full(const struct store *s) {
        return s && s->seen_full;
}

void store_add_listener(struct store *s, struct store_listener *l) {
        list_add_tail(&l->entry, &s->listeners);
}

void store_remove_listener(struct store *s, struct store_listener *l) {
        if (list_linked(&l->entry))
                list_del_init(&l->entry);
}

static int write_all(int fd, const uint8_t *p, size_t len) {
        while (len > 0) {
                ssize_t n = write(fd, p, len);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t) n;
        }
        return 0;
}

static int read_all(int fd, struct store_buf *b) {
        for (;;) {
                ssize_t n;
                int r = store_buf_reserve(b, 65536);

                if (r < 0)
                        return r;
                n = read(fd, b->data + b->len, b->size - b->len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        return 0;
                b->len += (size_t) n;
        }
}

/* Writes out what has gathered in @w once it is a chunk. */
static int store_writer_flush(struct store_writer *w) {
        int r;

        if (w->buf.len < STORE_WRITER_CHUNK)
                return 0;
        r = write_all(w->fd, w->buf.data, w->buf.len);
        if (r < 0)
                return r;
        /* Start writing it out now: a snapshot of hundreds of MiB does not
         * pile up in the page cache for the final fsync() (and every other
         * sync on the disk meanwhile) to wait for. */
        (void) sync_file_range(w->fd, (off64_t) (STORE_MAGIC_SIZE + w->written), (off64_t) w->buf.len,
                               SYNC_FILE_RANGE_WRITE);
        w->written += w->buf.len;
        w->buf.len = 0;
        return 0;
}

int store_writer_append(struct store_writer *w, const CmwqStore__Record *rec) {
        int r = store_record_append(&w->buf, rec);

        return r < 0 ? r : store_writer_flush(w);
}

int store_writer_append_frame(struct store_writer *w, const uint8_t *frame, size_t len) {
        int r = store_buf_reserve(&w->buf, len);

        if (r < 0)
                return r;
        memcpy(w->buf.data + w->buf.len, frame, len);
        w->buf.len += len;
        return store_writer_flush(w);
}

/* Writes the magic and the snapshot into @name under the state directory
 * (created or truncated) and syncs it.  Returns its fd (open for appending)
 * and size. */
static int store_write_snapshot(int dir_fd, const char *name, store_snapshot_fn snapshot, void *userdata,
                                int *ret_fd, uint64_t *ret_size) {
        struct store_writer w = { .fd = -1 };
        int r;

        w.fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND | O_NOFOLLOW, 0600);
        if (w.fd < 0)
                return -errno;
        r = write_all(w.fd, (const uint8_t *) STORE_MAGIC, STORE_MAGIC_SIZE);
        if (r >= 0)
                r = snapshot(&w, userdata);
        if (r >= 0)
                r = write_all(w.fd, w.buf.data, w.buf.len);
        w.written += w.buf.len;
        if (r >= 0 && fsync(w.fd) < 0)
                r = -errno;
        store_buf_done(&w.buf);
        if (r < 0) {
                close(w.fd);
                return r;
        }
        *ret_fd = w.fd;
        *ret_size = STORE_MAGIC_SIZE + w.written;
        return 0;
}

/* @name, written and synced, becomes the log: renamed over it, the
 * directory synced.  *@renamed says whether the rename was done: then
 * @name is the log whatever the directory's sync said, and what comes next
 * must go into it, not into the old one (unlinked). */
static int store_install(int dir_fd, const char *name, bool *renamed) {
        *renamed = false;
        if (renameat(dir_fd, name, dir_fd, STORE_LOG_NAME) < 0)
                return -errno;
        *renamed = true;
        if (fsync(dir_fd) < 0)
                return -errno;
        return 0;
}

/* Also wakes the compaction thread, which waits for durable_seq. */
static void store_wake_loop(struct store *s) {
        uint64_t one = 1;

        pthread_cond_broadcast(&s->compact_cond);
        (void) !write(s->wake_fd, &one, sizeof(one));
}

/* Keeps STORE_RESERVE_BYTES allocated past the end of the log: 0, or
 * -ENOSPC/-EDQUOT when there is no room for it or none beyond it (other errors, such as a file
 * system without fallocate(), are not the disk being full: 0). */
static int store_keep_reserve(struct store *s, int fd) {
        struct statfs sfs;
        off_t end;

        if (s->reserve_unsupported)
                return 0;
        end = lseek(fd, 0, SEEK_END);
        if (end < 0)
                return 0;
        if (fallocate(fd, FALLOC_FL_KEEP_SIZE, end, STORE_RESERVE_BYTES) < 0) {
                if (errno == ENOSPC || errno == EDQUOT)
                        return -errno;
                s->reserve_unsupported = true;
        }
        /* The reserve is taken page by page: nothing left past it is full
         * too, not only once the next page cannot be had. */
        if (fstatfs(fd, &sfs) >= 0 && sfs.f_blocks > 0 && sfs.f_bavail == 0)
                return -ENOSPC;
        return 0;
}

/* Appends @b to the log and syncs it; on failure the log is cut back to
 * where it was, so that no torn record sits before later ones.  *@cut_to
 * (>= 0) is where a failed commit could not cut it back to: nothing is
 * written after torn bytes, they are cut first (a record after them would
 * never be read back). */
static int store_commit(int fd, const struct store_buf *b, off_t *cut_to) {
        off_t end;
        int r;

        if (*cut_to >= 0) {
                if (ftruncate(fd, *cut_to) < 0)
                        return -errno;
                *cut_to = -1;
        }
        end = lseek(fd, 0, SEEK_END);
        if (end < 0)
                return -errno;
        r = write_all(fd, b->data, b->len);
        if (r >= 0 && fdatasync(fd) < 0)
                r = -errno;
        if (r < 0 && ftruncate(fd, end) < 0)
                *cut_to = end;
        return r;
}

/* Under the lock: the store is full or has room again; the loop is told. */
static void store_set_full(struct store *s, bool full) {
        if (s->full == full)
                return;
        s->full = full;
        if (full)
                log_error("The state directory %s is full: changes are refused until there is room again", s->dir);
        else
                log_info("The state directory %s has room again: changes are accepted", s->dir);
        store_wake_loop(s);
}

/* With the lock held: waits until signalled, or until @due_usec on
 * CLOCK_MONOTONIC, the clock the condition times on (store_open()).
 * ETIMEDOUT once that time has come. */
static int store_wait_until(struct store *s, uint64_t due_usec) {
        struct timespec ts = timespec_from_usec(due_usec);

        return pthread_cond_timedwait(&s->cond, &s->lock, &ts);
}

static void *store_close_thread(void *userdata) {
        close((int) (intptr_t) userdata);
        return NULL;
}

/* Closes @fd, the last fd of a log renamed over, on a thread of its own:
 * freeing its blocks takes 37-185 ms on the development VM, and the
 * commit thread that did it let every reply held for durability wait
 * that long after each compaction.  Closes it here when no thread can
 * be had. */
static void store_close_aside(int fd) {
        pthread_attr_t attr;
        pthread_t thread;
        int r;

        r = pthread_attr_init(&attr);
        if (r == 0) {
                (void) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                r = pthread_create(&thread, &attr, store_close_thread, (void *) (intptr_t) fd);
                pthread_attr_destroy(&attr);
        }
        if (r != 0)
                close(fd);
}

static void *store_thread(void *userdata) {
        struct store *s = userdata;
        struct store_buf batch = {};
        uint64_t batch_seq = 0;
        bool failing = false, retry = false;
        off_t cut_to = -1;

        pthread_mutex_lock(&s->lock);
        for (;;) {
                uint64_t seq;
                int r, k;

                while (!s->stop && !retry && !s->dir_unsynced && !s->compact_posted &&
                       (s->pending.len == 0 || !s->pending_urgent)) {
                        int fd;

                        if (s->pending.len > 0) {
                                /* Only lazy records: wait for their time,
                                 * or for one someone waits for. */
                                uint64_t due = s->lazy_since_usec + STORE_LAZY_USEC;

                                if (now_usec(CLOCK_MONOTONIC) >= due)
                                        break;
                                (void) store_wait_until(s, due);
                                continue;
                        }
                        if (!s->full) {
                                pthread_cond_wait(&s->cond, &s->lock);
                                continue;
                        }
                        /* Full: look for room again now and then (only
                         * while full; an idle store has no timer). */
                        if (store_wait_until(s, now_usec(CLOCK_MONOTONIC) + STORE_RETRY_USEC) != ETIMEDOUT)
                                continue;
                        fd = s->fd;
                        pthread_mutex_unlock(&s->lock);
                        r = store_keep_reserve(s, fd);
                        pthread_mutex_lock(&s->lock);
                        if (r >= 0 && !s->failing)
                                store_set_full(s, false);
                }

                if (s->compact_posted) {
                        struct store_buf tail = s->tail;
                        size_t taken = s->pending.len;
                        bool broken = s->compact_broken, renamed = false, full;
                        int new_fd = -1, old_fd;

                        /* The snapshot holds every record up to the fork,
                         * the tail every one since: together, everything
                         * appended so far, pending included. */
                        s->tail = (struct store_buf) {};
                        s->compact_posted = s->compacting = s->compact_broken = false;
                        seq = s->pending_seq;
                        pthread_mutex_unlock(&s->lock);
                        r = broken ? -ENOMEM : 0;
                        if (r >= 0) {
                                new_fd = openat(s->dir_fd, STORE_COMPACT_NAME, O_WRONLY | O_APPEND | O_CLOEXEC);
                                if (new_fd < 0)
                                        r = -errno;
                        }
                        if (r >= 0)
                                r = write_all(new_fd, tail.data, tail.len);
                        if (r >= 0 && fdatasync(new_fd) < 0)
                                r = -errno;
                        if (r >= 0)
                                r = store_install(s->dir_fd, STORE_COMPACT_NAME, &renamed);
                        store_buf_done(&tail);
                        if (r < 0 && !renamed) {
                                /* The old log still holds everything: go on with it. */
                                if (new_fd >= 0)
                                        close(new_fd);
                                (void) unlinkat(s->dir_fd, STORE_COMPACT_NAME, 0);
                                log_warning_errno(r, "Cannot compact the state log %s, going on with it: %m",
                                                  s->path);
                                pthread_mutex_lock(&s->lock);
                                s->compact_installed = -1;
                                store_wake_loop(s);
                                continue;
                        }
                        if (r < 0)
                                log_error_errno(r, "Cannot sync the state directory %s after compacting its log, "
                                                   "replies wait until it can: %m",
                                                s->dir);
                        pthread_mutex_lock(&s->lock);
                        /* What was pending then is in the new log; what came
                         * since is after it in pending.  A batch held back
                         * for want of memory is in it too. */
                        if (taken > 0) {
                                memmove(s->pending.data, s->pending.data + taken, s->pending.len - taken);
                                s->pending.len -= taken;
                                if (s->pending.len == 0)
                                        s->pending_urgent = false;
                        }
                        retry = false;
                        batch.len = 0;
                        cut_to = -1;
                        old_fd = s->fd;
                        s->fd = new_fd;
                        s->compact_installed = 1;
                        if (r < 0)
                                s->dir_unsynced = true;
                        else if (seq > s->durable_seq)
                                s->durable_seq = seq;
                        store_wake_loop(s);
                        /* Not under the lock, which the loop takes to
                         * append: taking the new log's reserve may wait
                         * for a journal commit (tens of ms behind a
                         * snapshot's writeback on ext4). */
                        pthread_mutex_unlock(&s->lock);
                        store_close_aside(old_fd);
                        full = errno_is_full(store_keep_reserve(s, new_fd));
                        pthread_mutex_lock(&s->lock);
                        if (full)
                                store_set_full(s, true);
                        continue;
                }

                if (s->pending.len == 0 && !retry && !s->dir_unsynced)
                        break;          /* stopping, and everything is written */

                /* Take what has gathered; more gathers while we sync.  A
                 * batch that failed and could not be put back in front of
                 * pending (no memory) goes first, alone. */
                struct store_buf tmp = batch;
                if (!retry) {
                        batch = s->pending;
                        s->pending = tmp;
                        s->pending.len = 0;
                        s->pending_urgent = false;
                        batch_seq = s->pending_seq;
                }
                seq = batch_seq;
                int fd = s->fd;
                bool sync_dir = s->dir_unsynced;
                pthread_mutex_unlock(&s->lock);
                r = 0;
                if (sync_dir && fsync(s->dir_fd) < 0)
                        r = -errno;
                if (r >= 0)
                        r = store_commit(fd, &batch, &cut_to);
                k = r >= 0 ? store_keep_reserve(s, fd) : 0;
                pthread_mutex_lock(&s->lock);
                if (r >= 0)
                        store_set_full(s, errno_is_full(k));
                if (r >= 0 && sync_dir)
                        s->dir_unsynced = false;
                if (r < 0) {
                        /* Put the batch back in front and try again: nothing
                         * it holds may be acknowledged before it is on disk. */
                        if (!failing && !errno_is_full(r))
                                log_error_errno(r, "Cannot write the state log %s, replies wait until it can: %m",
                                                s->path);
                        else if (!failing)
                                log_error_errno(r, "Cannot write the state log %s, records wait in memory: %m",
                                                s->path);
                        failing = true;
                        s->failing = true;
                        if (errno_is_full(r))
                                store_set_full(s, true);
                        if (retry || store_buf_reserve(&batch, s->pending.len) < 0)
                                retry = true;   /* kept as it is, tried again first */
                        else {
                                memcpy(batch.data + batch.len, s->pending.data, s->pending.len);
                                batch.len += s->pending.len;
                                tmp = s->pending;
                                s->pending = batch;
                                batch = tmp;
                                batch.len = 0;
                                s->pending_urgent = true;       /* a retry: not lazy again */
                        }
                        if (s->stop)
                                break;
                        (void) store_wait_until(s, now_usec(CLOCK_MONOTONIC) + STORE_RETRY_USEC);
                        continue;
                }
                if (failing)
                        log_info("The state log %s is written again", s->path);
                failing = false;
                s->failing = false;
                retry = false;
                batch.len = 0;
                if (seq > s->durable_seq)
                        s->durable_seq = seq;
                store_wake_loop(s);
        }
        pthread_mutex_unlock(&s->lock);
        store_buf_done(&batch);
        return NULL;
}

static void store_compact_reap(struct store *s, bool aborted);
static void store_compact_installed(struct store *s, bool renamed);

static void store_notify(struct store *s) {
        struct store_listener *l, *n;
        uint64_t seq;

        bool full, compacted;
        int installed;

        pthread_mutex_lock(&s->lock);
        seq = s->durable_seq;
        full = s->full;
        compacted = s->compact_done;
        installed = s->compact_installed;
        s->compact_installed = 0;
        pthread_mutex_unlock(&s->lock);
        if (compacted && s->compact_running)
                store_compact_reap(s, false);
        if (installed && s->compact_installing)
                store_compact_installed(s, installed > 0);
        if (!full)
                s->backlog_dropping = false;
        if (seq != s->seen_durable_seq) {
                s->seen_durable_seq = seq;
                list_for_each_entry_safe(l, n, &s->listeners, entry)
                        l->durable(l, seq);
        }
        if (full != s->seen_full) {
                s->seen_full = full;
                list_for_each_entry_safe(l, n, &s->listeners, entry)
                        if (l->full)
                                l->full(l, full);
        }
}

static void store_woken(evutil_socket_t fd, short what, void *userdata) {
        struct store *s = userdata;
        uint64_t n;

        (void) !read(s->wake_fd, &n, sizeof(n));
        store_notify(s);
}

/* Compaction thread: the new log's records (store_write_snapshot()'s
 * filler), once every record the compaction covers is on disk. */
static int store_compact_fill(struct store_writer *w, void *userdata) {
        struct store *s = userdata;
        struct stat st;

        pthread_mutex_lock(&s->lock);
        while (s->durable_seq < s->compact_start_seq && !atomic_load(&s->compact_cancel))
                pthread_cond_wait(&s->compact_cond, &s->lock);
        pthread_mutex_unlock(&s->lock);
        if (atomic_load(&s->compact_cancel))
                return -ECANCELED;
        /* The loop's count of the log's bytes says where the compaction
         * ends; a log shorter than that is a count gone wrong, which would
         * have the compaction leave records out. */
        if (fstat(s->compact_log_fd, &st) < 0)
                return -errno;
        if ((uint64_t) st.st_size < s->compact_log_bytes)
                return -ESPIPE;
        return store_compact_log(s->compact_log_fd, s->compact_log_bytes, &s->compact_plan, w, &s->compact_cancel);
}

/* Tests (CMWQD_TEST_STOP_COMPACTION): the new log is written and not yet
 * installed; the thread waits here for a process that stopped itself to be
 * continued (or killed), so that a test can make a crash fall during a
 * compaction. */
static void store_compact_gate(struct store *s) {
        pid_t pid;

        if (!getenv("CMWQD_TEST_STOP_COMPACTION"))
                return;
        pid = fork();
        if (pid == 0) {
                /* Only what is safe after fork() in a threaded process. */
                (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
                (void) raise(SIGSTOP);
                _exit(EXIT_SUCCESS);
        }
        if (pid < 0)
                return;
        pthread_mutex_lock(&s->lock);
        s->compact_gate = pid;
        pthread_mutex_unlock(&s->lock);
        /* Cancelled before the loop could see the gate: nobody else kills it. */
        if (atomic_load(&s->compact_cancel))
                (void) kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        pthread_mutex_lock(&s->lock);
        s->compact_gate = 0;
        pthread_mutex_unlock(&s->lock);
}

static void *store_compact_thread(void *userdata) {
        struct store *s = userdata;
        uint64_t size = 0;
        int fd = -1, r;

        /* The loop comes first.  Not the one CPU the loop may be pinned to
         * as it forks (cm/sentinel.c). */
        (void) setpriority(PRIO_PROCESS, (id_t) syscall(SYS_gettid), getpriority(PRIO_PROCESS, 0) + 10);
        daemon_cpus_restore();
        r = store_write_snapshot(s->dir_fd, STORE_COMPACT_NAME, store_compact_fill, s, &fd, &size);
        if (r >= 0) {
                close(fd);
                store_compact_gate(s);
        }
        pthread_mutex_lock(&s->lock);
        s->compact_done = true;
        s->compact_result = r;
        s->compact_size = size;
        store_wake_loop(s);
        pthread_mutex_unlock(&s->lock);
        return NULL;
}

/* Loop: the compaction thread is through (@aborted: told to stop).  The
 * commit thread finishes the compaction, or it is void. */
static void store_compact_reap(struct store *s, bool aborted) {
        uint64_t size;
        bool ok;
        int r;

        pthread_join(s->compact_thread, NULL);
        s->compact_running = false;
        close(s->compact_log_fd);
        s->compact_log_fd = -1;
        store_compact_plan_done(&s->compact_plan);

        pthread_mutex_lock(&s->lock);
        r = s->compact_result;
        size = s->compact_size;
        s->compact_done = false;
        ok = r >= 0 && !aborted;
        if (ok) {
                s->compact_posted = true;
                pthread_cond_signal(&s->cond);
        } else {
                s->compacting = s->compact_broken = false;
                store_buf_done(&s->tail);
        }
        pthread_mutex_unlock(&s->lock);
        if (!ok) {
                (void) unlinkat(s->dir_fd, STORE_COMPACT_NAME, 0);
                if (aborted)
                        return;
                if (r == -EBADMSG)
                        log_error("The state log %s does not read back as it was written (a damaged disk?): it is "
                                  "not compacted and keeps growing.  A restart recovers what comes before the "
                                  "damage and keeps a copy of the log",
                                  s->path);
                else if (r == -ESPIPE)
                        log_error("The state log %s is shorter than cmwqd counted (a bug): it is not compacted "
                                  "and keeps growing",
                                  s->path);
                else
                        log_warning_errno(r, "Cannot compact the state log %s, it keeps growing: %m", s->path);
                s->compacted_bytes = s->log_bytes;      /* do not retry at once */
                return;
        }
        /* Sizes change once it is the log: the next compaction reads the
         * log up to log_bytes, which must then say where its end is. */
        s->compact_installing = true;
        s->compact_new_size = size;
}

/* Loop: the commit thread installed the new log (@renamed), or could not
 * and goes on with the old one. */
static void store_compact_installed(struct store *s, bool renamed) {
        s->compact_installing = false;
        if (!renamed) {
                s->compacted_bytes = s->log_bytes;      /* not again at once */
                return;
        }
        /* The new log: the compacted records, then what was appended since. */
        s->compacted_bytes = s->compact_new_size;
        s->log_bytes = s->compact_new_size + (s->log_bytes - s->compact_log_bytes);
        log_info("Compacted the state log: %" PRIu64 " bytes of it now take %" PRIu64, s->compact_log_bytes,
                 s->compact_new_size);
}

/* Ends a running compaction at once (the daemon stops): the old log holds
 * everything. */
static void store_compact_abort(struct store *s) {
        pid_t gate;

        if (!s->compact_running)
                return;
        atomic_store(&s->compact_cancel, true);
        pthread_mutex_lock(&s->lock);
        pthread_cond_broadcast(&s->compact_cond);
        gate = s->compact_gate;
        pthread_mutex_unlock(&s->lock);
        if (gate > 0)
                (void) kill(gate, SIGKILL);
        store_compact_reap(s, true);
}

static void store_compact_now(evutil_socket_t fd, short what, void *userdata) {
        struct store *s = userdata;
        uint64_t t = now_usec(CLOCK_MONOTONIC);
        int r;

        if (s->compact_running || s->compact_installing)
                return;
        /* By name: the log's own fd is open for appending only. */
        s->compact_log_fd = openat(s->dir_fd, STORE_LOG_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        r = s->compact_log_fd < 0 ? -errno : 0;
        if (r >= 0 && s->plan)
                r = s->plan(&s->compact_plan, s->snapshot_userdata);
        if (r < 0)
                goto fail;
        /* Only the loop appends: the compaction covers the log up to here,
         * the tail takes every record from here on. */
        pthread_mutex_lock(&s->lock);
        s->compacting = true;
        s->compact_broken = false;
        s->tail.len = 0;
        s->compact_start_seq = s->appended_seq;
        s->compact_done = false;
        pthread_mutex_unlock(&s->lock);
        s->compact_log_bytes = s->log_bytes;
        atomic_store(&s->compact_cancel, false);
        r = -pthread_create(&s->compact_thread, NULL, store_compact_thread, s);
        if (r < 0) {
                pthread_mutex_lock(&s->lock);
                s->compacting = false;
                pthread_mutex_unlock(&s->lock);
                goto fail;
        }
        s->compact_running = true;
        /* What it covers goes to disk now, not in STORE_LAZY_USEC. */
        store_urge(s);
        log_info("Compacting the state log: %" PRIu64 " bytes, in a thread (the loop took %" PRIu64 " us to start it)",
                 s->log_bytes, now_usec(CLOCK_MONOTONIC) - t);
        return;

fail:
        log_warning_errno(r, "Cannot start compacting the state log: %m");
        if (s->compact_log_fd >= 0)
                close(s->compact_log_fd);
        s->compact_log_fd = -1;
        store_compact_plan_done(&s->compact_plan);
        s->compacted_bytes = s->log_bytes;
}

static int64_t store_append_record(struct store *s, const CmwqStore__Record *rec, bool lazy) {
        bool compacting;
        size_t before;
        int r;

        pthread_mutex_lock(&s->lock);
        before = s->pending.len;
        if (s->failing && before >= STORE_BACKLOG_MAX) {
                pthread_mutex_unlock(&s->lock);
                if (!s->backlog_dropping)
                        log_error("The state log %s cannot be written and %zu bytes of records wait: "
                                  "dropping new ones until it can",
                                  s->path, before);
                s->backlog_dropping = true;
                return -ENOSPC;
        }
        r = store_record_append(&s->pending, rec);
        compacting = s->compacting;
        if (r >= 0 && compacting && !s->compact_broken) {
                size_t len = s->pending.len - before;

                /* The framed record once more, for the new log. */
                if (store_buf_reserve(&s->tail, len) >= 0) {
                        memcpy(s->tail.data + s->tail.len, s->pending.data + before, len);
                        s->tail.len += len;
                } else
                        s->compact_broken = true;       /* the old log goes on, complete */
        }
        if (r >= 0) {
                s->pending_seq = ++s->appended_seq;
                if (before == 0) {
                        s->lazy_since_usec = now_usec(CLOCK_MONOTONIC);
                        s->pending_urgent = false;
                }
                if (!lazy)
                        s->pending_urgent = true;
                if (!lazy || before == 0)
                        pthread_cond_signal(&s->cond);
        }
        s->log_bytes += s->pending.len - before;
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
                return r;

        if (s->compact_event && s->log_bytes > STORE_COMPACT_MIN_BYTES && s->log_bytes > 2 * s->compacted_bytes &&
            !s->compact_running && !s->compact_installing && !compacting && !event_pending(s->compact_event, EV_TIMEOUT, NULL))
                event_active(s->compact_event, EV_TIMEOUT, 0);
        return (int64_t) s->appended_seq;
}

int64_t store_append(struct store *s, const CmwqStore__Record *rec) {
        return store_append_record(s, rec, false);
}

int64_t store_append_lazy(struct store *s, const CmwqStore__Record *rec) {
        return store_append_record(s, rec, true);
}

void store_urge(struct store *s) {
        pthread_mutex_lock(&s->lock);
        if (s->pending.len > 0 && !s->pending_urgent) {
                s->pending_urgent = true;
                pthread_cond_signal(&s->cond);
        }
        pthread_mutex_unlock(&s->lock);
}

static int mkdir_parents(const char *path, mode_t mode) {
        _cleanup_(freep) char *p = strdup(path);

        if (!p)
                return -ENOMEM;
        for (char *slash = strchr(p + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
                *slash = 0;
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *slash = '/';
        }
        if (mkdir(p, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

/* A condition whose timed waits are on CLOCK_MONOTONIC (store_wait_until()). */
static void store_cond_init(pthread_cond_t *cond) {
        pthread_condattr_t attr;

        pthread_condattr_init(&attr);
        (void) pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(cond, &attr);
        pthread_condattr_destroy(&attr);
}

/* The log holds every user's arguments, environment and output, and the
 * daemon (root, for the system instance) creates and renames files there:
 * whoever else may write the directory could read them or, with a
 * symlink, have the daemon overwrite a file of their choosing.  So the
 * directory must be the daemon's own and nobody else's to write. */
static int store_check_dir(struct store *s) {
        struct stat st;

        if (fstat(s->dir_fd, &st) < 0)
                return log_error_errno(-errno, "Cannot look at the state directory %s: %m", s->dir);
        if (st.st_uid != geteuid()) {
                log_error("The state directory %s belongs to uid %u, not to this daemon's (%u): "
                          "refusing to keep the state there",
                          s->dir, (unsigned) st.st_uid, (unsigned) geteuid());
                return -EPERM;
        }
        if (st.st_mode & (S_IWGRP | S_IWOTH)) {
                log_error("The state directory %s may be written by others (mode %04o): refusing to keep the "
                          "state there (chmod go-w it, or 0700 as cmwqd makes it)",
                          s->dir, (unsigned) (st.st_mode & 07777));
                return -EPERM;
        }
        return 0;
}

/* Two daemons on one state directory would each replace the log the other
 * appends to, hand out the same item ids and run the same items: the one
 * that has it holds a lock on STORE_LOCK_NAME for as long as it runs (a
 * flock(), released with its last fd however it ends; the children that
 * outlive an exec() do not inherit it), and writes its pid there. */
static int store_lock_dir(struct store *s) {
        _cleanup_(closep) int fd = -1;
        char holder[32];
        ssize_t n;

        fd = openat(s->dir_fd, STORE_LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return log_error_errno(-errno, "Cannot open %s/%s: %m", s->dir, STORE_LOCK_NAME);
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                if (errno != EWOULDBLOCK)
                        return log_error_errno(-errno, "Cannot lock %s/%s: %m", s->dir, STORE_LOCK_NAME);
                n = pread(fd, holder, sizeof(holder) - 1, 0);
                holder[n > 0 ? n : 0] = 0;
                holder[strcspn(holder, "\n")] = 0;
                log_error("The state directory %s is in use by another cmwqd%s%s%s: two daemons must not share one",
                          s->dir, holder[0] ? " (process " : "", holder, holder[0] ? ")" : "");
                return -EBUSY;
        }
        n = snprintf(holder, sizeof(holder), "%d\n", (int) getpid());
        if (ftruncate(fd, 0) < 0 || pwrite(fd, holder, (size_t) n, 0) != n)
                log_warning_errno(-errno, "Cannot write this daemon's pid to %s/%s: %m", s->dir, STORE_LOCK_NAME);
        s->lock_fd = TAKE_FD(fd);
        return 0;
}

/* Keeps a damaged log as "log.damaged.SECONDS" before the snapshot at start
 * replaces it: what comes after the damage is lost to cmwqd, not to whoever
 * wants to look.  A second name for the same file, which takes no room on a
 * full disk (a copy could fail half-written, and the log was then replaced
 * all the same); the log is never cut while it is damaged.  Its name into
 * @name. */
static int store_keep_damaged(int dir_fd, char *name, size_t size) {
        unsigned long long now = (unsigned long long) time(NULL);

        for (unsigned k = 0;; k++) {
                if (k == 0)
                        snprintf(name, size, STORE_LOG_NAME ".damaged.%llu", now);
                else
                        snprintf(name, size, STORE_LOG_NAME ".damaged.%llu.%u", now, k);
                if (linkat(dir_fd, STORE_LOG_NAME, dir_fd, name, 0) >= 0)
                        break;
                if (errno != EEXIST || k == 100)
                        return -errno;
        }
        return fsync(dir_fd) < 0 ? -errno : 0;
}

int store_open(const char *dir, store_record_cb replay, void *userdata, struct store **ret) {
        struct store *s;
        struct store_buf image = {};
        size_t valid = 0;
        int r, n;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->fd = s->dir_fd = s->lock_fd = s->wake_fd = s->compact_log_fd = -1;
        list_init(&s->listeners);
        pthread_mutex_init(&s->lock, NULL);
        store_cond_init(&s->cond);
        store_cond_init(&s->compact_cond);
        s->dir = strdup(dir);
        if (!s->dir || asprintf(&s->path, "%s/%s", dir, STORE_LOG_NAME) < 0) {
                r = -ENOMEM;
                goto fail;
        }

        /* The log holds every user's arguments, environment and output. */
        r = mkdir_parents(dir, 0700);
        if (r < 0) {
                log_error_errno(r, "Cannot create the state directory %s: %m", dir);
                goto fail;
        }
        s->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->dir_fd < 0) {
                r = log_error_errno(-errno, "Cannot open the state directory %s: %m", dir);
                goto fail;
        }
        r = store_check_dir(s);
        if (r < 0)
                goto fail;
        r = store_lock_dir(s);
        if (r < 0)
                goto fail;
        s->fd = openat(s->dir_fd, STORE_LOG_NAME, O_RDWR | O_CREAT | O_CLOEXEC | O_APPEND | O_NOFOLLOW, 0600);
        if (s->fd < 0) {
                r = log_error_errno(-errno, "Cannot open the state log %s: %m", s->path);
                goto fail;
        }
        r = read_all(s->fd, &image);
        if (r < 0) {
                log_error_errno(r, "Cannot read the state log %s: %m", s->path);
                goto fail;
        }

        /* Empty, or its magic torn while it was first written: a new log. */
        if (image.len < STORE_MAGIC_SIZE && memcmp(image.data ? (void *) image.data : "", STORE_MAGIC, image.len) == 0)
                n = 0;
        else {
                n = store_scan(image.data, image.len, replay, userdata, &valid);
                if (n == -EBADMSG) {
                        r = log_error_errno(n, "%s is not a cmwqd state log; move it away to start afresh",
                                            s->path);
                        goto fail;
                }
                if (n < 0) {
                        r = log_error_errno(n, "Cannot recover the state from %s: %m", s->path);
                        goto fail;
                }
                if (valid < image.len && store_tail_is_torn(image.data, image.len, valid))
                        log_warning("The state log %s ends in %zu bytes of a record torn by a crash; "
                                    "recovered the %d records before them",
                                    s->path, image.len - valid, n);
                else if (valid < image.len) {
                        char kept[64];

                        s->damaged = true;
                        r = store_keep_damaged(s->dir_fd, kept, sizeof(kept));
                        if (r < 0) {
                                log_error_errno(r, "The state log %s is damaged %zu bytes into it, and cannot be "
                                                   "kept as %s/%s before it is replaced (%m): move it away to "
                                                   "start with what it holds before the damage",
                                                s->path, valid, s->dir, kept);
                                goto fail;
                        }
                        log_error("The state log %s is damaged %zu bytes into it, %zu bytes before its end (a "
                                  "record that does not check out): recovered the %d records before the damage; "
                                  "what came after it is lost.  The damaged log is kept as %s/%s",
                                  s->path, valid, image.len - valid, n, s->dir, kept);
                }
        }
        s->valid_len = n == 0 && image.len < STORE_MAGIC_SIZE ? 0 : valid;
        s->log_new = image.len < STORE_MAGIC_SIZE;
        log_info("Recovered %d records from %s", n, s->path);
        store_buf_done(&image);
        *ret = s;
        return 0;

fail:
        store_buf_done(&image);
        store_free(s);
        return r;
}

int store_start(struct store *s, struct event_base *base, store_snapshot_fn snapshot, store_plan_fn plan,
                void *userdata) {
        uint64_t size = 0;
        int new_fd = -1, r;
        bool renamed = false;
        struct stat st;

        s->base = base;
        s->snapshot = snapshot;
        s->plan = plan;
        s->snapshot_userdata = userdata;

        /* A compaction that a crash interrupted: the log holds everything. */
        (void) unlinkat(s->dir_fd, STORE_COMPACT_NAME, 0);
        /* Start from a compact log: it also drops a damaged tail for good. */
        r = store_write_snapshot(s->dir_fd, STORE_LOG_NAME ".new", snapshot, userdata, &new_fd, &size);
        if (r >= 0) {
                r = store_install(s->dir_fd, STORE_LOG_NAME ".new", &renamed);
                if (r < 0 && renamed) {
                        /* It is the log: the thread syncs the directory
                         * before it acknowledges anything. */
                        log_error_errno(r, "Cannot sync the state directory %s, replies wait until it can: %m",
                                        s->dir);
                        s->dir_unsynced = true;
                        r = 0;
                }
                if (r < 0)
                        close(new_fd);
        }
        if (r < 0)
                (void) unlinkat(s->dir_fd, STORE_LOG_NAME ".new", 0);
        if (errno_is_full(r)) {
                /* No room for a new log: serve what the old one holds and
                 * refuse changes until there is room (what stands in it
                 * stays valid; a torn tail is cut off, which needs no
                 * room).  A log that had no magic yet gets it first.  A
                 * damaged log is neither cut nor written after: cmwqd could
                 * not read past the damage, nor anyone else in the copy
                 * kept (the same file). */
                if (s->damaged)
                        return log_error_errno(r, "The state directory %s is full and its log damaged: cannot "
                                                  "write a new log beside the damaged one: free some room and "
                                                  "start again: %m",
                                               s->dir);
                log_error_errno(r, "The state directory %s is full, cannot write a new log: "
                                   "serving the state recovered, refusing changes until there is room: %m",
                                s->dir);
                if (fstat(s->fd, &st) < 0)
                        return -errno;
                if ((uint64_t) st.st_size > s->valid_len && ftruncate(s->fd, (off_t) s->valid_len) < 0)
                        return log_error_errno(-errno, "Cannot cut the state log %s: %m", s->path);
                s->full = s->seen_full = true;
                s->log_bytes = s->compacted_bytes = s->valid_len;
                if (s->log_new) {
                        if (store_buf_reserve(&s->pending, STORE_MAGIC_SIZE) < 0)
                                return -ENOMEM;
                        memcpy(s->pending.data, STORE_MAGIC, STORE_MAGIC_SIZE);
                        s->pending.len = STORE_MAGIC_SIZE;
                        s->log_bytes = s->compacted_bytes = STORE_MAGIC_SIZE;
                }
        } else if (r < 0)
                return log_error_errno(r, "Cannot write the state log %s: %m", s->path);
        else {
                close(s->fd);
                s->fd = new_fd;
                s->log_ours = true;
                s->log_bytes = s->compacted_bytes = size;
                if (errno_is_full(store_keep_reserve(s, s->fd))) {
                        log_error("The state directory %s is full: changes are refused until there is room again",
                                  s->dir);
                        s->full = s->seen_full = true;
                }
        }

        s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->wake_fd < 0)
                return -errno;
        s->wake_event = event_new(base, s->wake_fd, EV_READ | EV_PERSIST, store_woken, s);
        s->compact_event = evtimer_new(base, store_compact_now, s);
        if (!s->wake_event || !s->compact_event || event_add(s->wake_event, NULL) < 0)
                return -ENOMEM;
        r = pthread_create(&s->thread, NULL, store_thread, s);
        if (r != 0)
                return log_error_errno(-r, "Cannot start the state log's commit thread: %m");
        s->thread_running = true;
        return 0;
}

void store_stop(struct store *s) {
        if (!s || !s->thread_running)
                return;
        store_compact_abort(s);
        pthread_mutex_lock(&s->lock);
        s->stop = true;
        pthread_cond_signal(&s->cond);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
        s->thread_running = false;
        store_notify(s);
}

struct store *store_free(struct store *s) {
        if (!s)
                return NULL;
        store_stop(s);
        if (s->wake_event)
                event_free(s->wake_event);
        if (s->compact_event)
                event_free(s->compact_event);
        if (s->wake_fd >= 0)
                close(s->wake_fd);
        if (s->fd >= 0)
                close(s->fd);
        if (s->dir_fd >= 0)
                close(s->dir_fd);
        /* Last: nothing of this daemon writes there any more. */
        if (s->lock_fd >= 0)
                close(s->lock_fd);
        store_buf_done(&s->pending);
        store_buf_done(&s->tail);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        pthread_cond_destroy(&s->compact_cond);
        store_compact_plan_done(&s->compact_plan);
        free(s->dir);
        free(s->path);
        free(s);
        return NULL;
}

bool store_damaged(const struct store *s) {
        return s && s->damaged;
}
