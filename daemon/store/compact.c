/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Compaction of the log from the log (store/compact.h): a first pass over
 * its records learns which queues exist and which items are live at the
 * end, a second writes what still matters.  The first pass keeps 24 bytes
 * and two index slots for each item it meets (about 32 MB for a million),
 * nothing of their contents: the second reads again what it writes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "store/compact.h"
#include "util.h"

/* Read in chunks of this (a record is read whole, however long). */
#define COMPACT_READ_CHUNK (1024u * 1024u)
/* Records between two looks at the cancel flag. */
#define COMPACT_CANCEL_EVERY 4096u

enum compact_item_state {
        COMPACT_ITEM_LIVE = 1,          /* queued, not ended (if its queue is still there) */
        COMPACT_ITEM_RETIRED,           /* by the first ItemResult after off */
        COMPACT_ITEM_HISTORY,           /* an ItemHistory record at off */
        COMPACT_ITEM_GONE,              /* the replay would drop it */
        COMPACT_ITEM_WRITTEN,           /* the second pass wrote its ItemHistory */
};

struct compact_item {
        uint64_t id;
        uint64_t off;                   /* its ItemQueued or ItemHistory record */
        uint32_t gen;                   /* its queue's instance */
        uint8_t state;
};

struct compact_env {
        uint64_t id;
        uint64_t off;                   /* its first Environment record */
        bool written;
};

/* One instance of a queue: a queue destroyed and created again under its
 * name is a new one (gen), whose items are not the old one's. */
struct compact_queue {
        uint32_t owner;
        char *name;
        uint64_t first_off;             /* the record that created this instance */
        uint64_t last_off;              /* its last Workqueue record */
        uint32_t gen;
        bool alive;
};

/* Open addressing on a 64-bit hash: slots hold an entry's number + 1. */
struct compact_index {
        uint32_t *slots;
        size_t size;                    /* a power of two, or 0 */
};

/* Entries whose first member is their 64-bit id, found by it. */
struct id_table {
        void *entries;                  /* mapped (big_grow()) */
        size_t elem, n, size;
        struct compact_index index;
};

struct compaction {
        int fd;
        uint64_t end;
        struct store_compact_plan *plan;
        atomic_bool *cancel;
        struct store_buf scratch;       /* a record read at an offset */

        struct id_table items;          /* struct compact_item */
        struct id_table envs;           /* struct compact_env */
        struct compact_queue *queues;
        size_t n_queues, queues_size;
        struct compact_index queue_index;
        bool *gen_alive;                /* by gen; gen 0: none */
        size_t gens_size;
        uint32_t n_gens;
        uint64_t next_id;
};

/* Reads the log's records in order, a chunk at a time. */
struct compact_reader {
        int fd;
        uint64_t end;
        uint64_t off;                   /* of buf.data[0] in the file */
        size_t pos;                     /* the next record in buf */
        struct store_buf buf;
};

/* Ids are given in sequence, and the log holds them mostly in that order:
 * an id as its own hash puts them in consecutive slots, which the passes
 * then walk in order (hashed, every lookup missed the cache: a third of a
 * compaction's time).  The high half moves a range of ids elsewhere: after
 * a damaged log, ids go on 2^32 higher (core/store-recovery.c), and would
 * otherwise fall on the slots of the ids before the gap. */
static uint64_t hash_id(uint64_t id) {
        return id + (id >> 32) * 0x9e3779b97f4a7c15ull;
}

static uint64_t hash_str(const char *s) {
        uint64_t h = 0xcbf29ce484222325ull;     /* FNV-1a */

        for (; *s; s++)
                h = (h ^ (uint8_t) *s) * 0x100000001b3ull;
        return h;
}

/* The slot of the entry @match says is @key, or the free one where it
 * goes. */
static uint32_t *index_slot(const struct compact_index *x, uint64_t hash,
                            bool (*match)(const void *owner, uint32_t k, const void *key), const void *owner,
                            const void *key) {
        size_t mask = x->size - 1;

        for (size_t k = (size_t) hash & mask;; k = (k + 1) & mask)
                if (x->slots[k] == 0 || match(owner, x->slots[k] - 1, key))
                        return &x->slots[k];
}

/* The tables of a compaction (tens of MB at a million items) are mapped
 * for themselves: freed, they go back to the system at once.  From malloc()
 * in this thread's arena, they stayed in cmwqd's RSS after the compaction
 * (30 bytes more per pending item, measured). */
static void *big_alloc(size_t bytes) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        return p == MAP_FAILED ? NULL : p;
}

static void big_free(void *p, size_t bytes) {
        if (p)
                (void) munmap(p, bytes);
}

/* Makes room for entry @n in *@array (*@size entries of @elem bytes),
 * doubling it; the new room is zeroed. */
static int big_grow(void **array, size_t *size, size_t n, size_t elem) {
        size_t want = *size ? *size * 2 : 4096;
        void *p;

        if (n < *size)
                return 0;
        if (want > SIZE_MAX / elem)
                return -ENOMEM;
        p = *array ? mremap(*array, *size * elem, want * elem, MREMAP_MAYMOVE) : big_alloc(want * elem);
        if (!p || p == MAP_FAILED)
                return -ENOMEM;
        *array = p;
        *size = want;
        return 0;
}

/* Makes room for @n entries, at most half the slots. */
static int index_reserve(struct compact_index *x, size_t n, uint64_t (*hash_of)(const void *owner, uint32_t k),
                         const void *owner) {
        struct compact_index old = *x;
        size_t size = old.size ? old.size : 4096;

        if (n * 2 <= old.size)
                return 0;
        while (n * 2 > size)
                size *= 2;
        x->slots = big_alloc(size * sizeof(*x->slots));
        if (!x->slots) {
                *x = old;
                return -ENOMEM;
        }
        x->size = size;
        for (size_t k = 0; k < old.size; k++)
                if (old.slots[k]) {
                        size_t mask = size - 1, j = (size_t) hash_of(owner, old.slots[k] - 1) & mask;

                        while (x->slots[j])
                                j = (j + 1) & mask;
                        x->slots[j] = old.slots[k];
                }
        big_free(old.slots, old.size * sizeof(*old.slots));
        return 0;
}

static void index_done(struct compact_index *x) {
        big_free(x->slots, x->size * sizeof(*x->slots));
        *x = (struct compact_index) {};
}

static int grow_array(void **array, size_t *size, size_t n, size_t elem) {
        size_t want = *size ? *size * 2 : 64;
        void *p;

        if (n < *size)
                return 0;
        p = reallocarray(*array, want, elem);
        if (!p)
                return -ENOMEM;
        *array = p;
        *size = want;
        return 0;
}

static void *id_table_at(const struct id_table *t, uint32_t k) {
        return (char *) t->entries + (size_t) k * t->elem;
}

static bool id_table_match(const void *owner, uint32_t k, const void *key) {
        return *(const uint64_t *) id_table_at(owner, k) == *(const uint64_t *) key;
}

static uint64_t id_table_hash(const void *owner, uint32_t k) {
        return hash_id(*(const uint64_t *) id_table_at(owner, k));
}

static void *id_table_find(const struct id_table *t, uint64_t id) {
        uint32_t *slot;

        if (!t->index.size)
                return NULL;
        slot = index_slot(&t->index, hash_id(id), id_table_match, t, &id);
        return *slot ? id_table_at(t, *slot - 1) : NULL;
}

/* A new entry for @id (not in the table), zeroed but for its id. */
static void *id_table_add(struct id_table *t, uint64_t id) {
        void *e;

        if (big_grow(&t->entries, &t->size, t->n, t->elem) < 0 ||
            index_reserve(&t->index, t->n + 1, id_table_hash, t) < 0)
                return NULL;
        e = id_table_at(t, (uint32_t) t->n);
        memset(e, 0, t->elem);
        *(uint64_t *) e = id;
        *index_slot(&t->index, hash_id(id), id_table_match, t, &id) = (uint32_t) ++t->n;
        return e;
}

static void id_table_done(struct id_table *t) {
        big_free(t->entries, t->size * t->elem);
        index_done(&t->index);
}

static struct compact_item *item_find(const struct compaction *cx, uint64_t id) {
        return id_table_find(&cx->items, id);
}

static int item_add(struct compaction *cx, uint64_t id, uint64_t off, uint32_t gen, enum compact_item_state state) {
        struct compact_item *i = id_table_add(&cx->items, id);

        if (!i)
                return -ENOMEM;
        *i = (struct compact_item) { .id = id, .off = off, .gen = gen, .state = state };
        if (cx->next_id <= id)
                cx->next_id = id + 1;
        return 0;
}

static bool item_is_live(const struct compaction *cx, const struct compact_item *i) {
        return i->state == COMPACT_ITEM_LIVE && cx->gen_alive[i->gen];
}

static int id_compare(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static bool item_in_history(const struct compaction *cx, uint64_t id) {
        return cx->plan->n_history > 0 && bsearch(&id, cx->plan->history, cx->plan->n_history, sizeof(uint64_t), id_compare);
}

static struct compact_env *env_find(const struct compaction *cx, uint64_t id) {
        return id_table_find(&cx->envs, id);
}

static int env_add(struct compaction *cx, uint64_t id, uint64_t off) {
        struct compact_env *e;

        if (id == 0 || env_find(cx, id))
                return 0;       /* never named (damage), or named again with the same contents */
        e = id_table_add(&cx->envs, id);
        if (!e)
                return -ENOMEM;
        e->off = off;
        return 0;
}

/* What a queue is found by: names are per owner. */
struct queue_key {
        uint32_t owner;
        const char *name;
};

static uint64_t queue_key_hash(uint32_t owner, const char *name) {
        return hash_str(name) ^ (uint64_t) owner * 0x9e3779b97f4a7c15ull;
}

static bool queue_match(const void *owner, uint32_t k, const void *key) {
        const struct compaction *cx = owner;
        const struct queue_key *qk = key;

        return cx->queues[k].owner == qk->owner && strcmp(cx->queues[k].name, qk->name) == 0;
}

static uint64_t queue_hash(const void *owner, uint32_t k) {
        const struct compaction *cx = owner;

        return queue_key_hash(cx->queues[k].owner, cx->queues[k].name);
}

/* A record of an older cmwqd names no owner: this daemon's user, as the
 * replay takes it. */
static struct queue_key queue_key_of(bool has_owner, uint32_t owner, const char *name) {
        return (struct queue_key) { .owner = has_owner ? owner : (uint32_t) getuid(), .name = name };
}

static struct compact_queue *queue_find(const struct compaction *cx, const struct queue_key *key) {
        uint32_t *slot;

        if (!cx->queue_index.size)
                return NULL;
        slot = index_slot(&cx->queue_index, queue_key_hash(key->owner, key->name), queue_match, cx, key);
        return *slot ? &cx->queues[*slot - 1] : NULL;
}

static int gen_new(struct compaction *cx, uint32_t *ret) {
        int r = grow_array((void **) &cx->gen_alive, &cx->gens_size, (size_t) cx->n_gens + 1, sizeof(bool));

        if (r < 0)
                return r;
        cx->gen_alive[0] = false;       /* no queue's */
        cx->gen_alive[++cx->n_gens] = true;
        *ret = cx->n_gens;
        return 0;
}

static int queue_record(struct compaction *cx, const CmwqStore__Workqueue *w, uint64_t off) {
        struct queue_key key = queue_key_of(true, w->owner, w->name);
        struct compact_queue *q = queue_find(cx, &key);
        uint32_t gen;
        char *name;
        int r;

        if (q && q->alive) {
                q->last_off = off;
                return 0;
        }
        r = gen_new(cx, &gen);
        if (r < 0)
                return r;
        if (q) {
                q->first_off = q->last_off = off;
                q->gen = gen;
                q->alive = true;
                return 0;
        }
        if ((r = grow_array((void **) &cx->queues, &cx->queues_size, cx->n_queues, sizeof(*cx->queues))) < 0 ||
            (r = index_reserve(&cx->queue_index, cx->n_queues + 1, queue_hash, cx)) < 0)
                return r;
        name = strdup(w->name);
        if (!name)
                return -ENOMEM;
        cx->queues[cx->n_queues] = (struct compact_queue) { .owner = key.owner, .name = name, .first_off = off,
                                                             .last_off = off, .gen = gen, .alive = true };
        *index_slot(&cx->queue_index, queue_hash(cx, (uint32_t) cx->n_queues), queue_match, cx, &key) =
                (uint32_t) cx->n_queues + 1;
        cx->n_queues++;
        return 0;
}

static uint64_t min_u64(uint64_t a, uint64_t b) {
        return a < b ? a : b;
}

static void reader_done(struct compact_reader *rd) {
        store_buf_done(&rd->buf);
}

/* The next record, and its frame in *@frame (valid until the next call):
 * 1, 0 at the end, -EBADMSG if it does not check out or runs past it. */
static int reader_next(struct compact_reader *rd, CmwqStore__Record **ret, uint64_t *ret_off, const uint8_t **frame,
                       size_t *frame_len) {
        for (;;) {
                size_t left = rd->buf.len - rd->pos, need = STORE_RECORD_HEADER_SIZE;
                uint64_t at = rd->off + rd->pos;
                ssize_t n;
                int r;

                if (at >= rd->end)
                        return 0;
                if (left >= STORE_RECORD_HEADER_SIZE) {
                        uint32_t plen = store_record_payload_len(rd->buf.data + rd->pos);

                        if (plen > STORE_RECORD_MAX)
                                return -EBADMSG;
                        need += plen;
                        if (at + need > rd->end)
                                return -EBADMSG;
                        if (left >= need) {
                                *ret = store_record_read(rd->buf.data + rd->pos, need);
                                if (!*ret)
                                        return -EBADMSG;
                                *ret_off = at;
                                *frame = rd->buf.data + rd->pos;
                                *frame_len = need;
                                rd->pos += need;
                                return 1;
                        }
                }
                /* Keep what is left of the record, read on after it. */
                if (left > 0)
                        memmove(rd->buf.data, rd->buf.data + rd->pos, left);
                rd->off += rd->pos;
                rd->pos = 0;
                rd->buf.len = left;
                r = store_buf_reserve(&rd->buf, (need > COMPACT_READ_CHUNK ? need : COMPACT_READ_CHUNK) - left);
                if (r < 0)
                        return r;
                n = pread(rd->fd, rd->buf.data + left,
                          (size_t) min_u64(rd->buf.size - left, rd->end - rd->off - left),
                          (off_t) (rd->off + left));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -EBADMSG;        /* shorter than it was said to be */
                rd->buf.len += (size_t) n;
        }
}

static int pread_all(int fd, uint8_t *p, size_t len, uint64_t off) {
        while (len > 0) {
                ssize_t n = pread(fd, p, len, (off_t) off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -EBADMSG;
                p += n;
                len -= (size_t) n;
                off += (uint64_t) n;
        }
        return 0;
}

/* The record at @off (read before: it checks out), and its frame in the
 * scratch buffer. */
static int read_record_at(struct compaction *cx, uint64_t off, CmwqStore__Record **ret) {
        uint8_t header[STORE_RECORD_HEADER_SIZE];
        size_t len;
        int r;

        r = pread_all(cx->fd, header, sizeof(header), off);
        if (r < 0)
                return r;
        len = STORE_RECORD_HEADER_SIZE + store_record_payload_len(header);
        if (len > STORE_RECORD_HEADER_SIZE + STORE_RECORD_MAX)
                return -EBADMSG;
        cx->scratch.len = 0;
        r = store_buf_reserve(&cx->scratch, len);
        if (r < 0)
                return r;
        r = pread_all(cx->fd, cx->scratch.data, len, off);
        if (r < 0)
                return r;
        cx->scratch.len = len;
        *ret = store_record_read(cx->scratch.data, len);
        return *ret ? 0 : -EBADMSG;
}

static int cancelled(struct compaction *cx, unsigned *count) {
        if (++*count % COMPACT_CANCEL_EVERY == 0 && atomic_load(cx->cancel))
                return -ECANCELED;
        return 0;
}

/* The first pass: what exists at the end. */
static int compact_learn(struct compaction *cx, struct store_writer *w, CmwqStore__Record *rec, uint64_t off,
                         const uint8_t *frame, size_t frame_len) {
        struct compact_queue *q;
        struct compact_item *i;
        struct queue_key key;

        switch (rec->body_case) {
        case CMWQ_STORE__RECORD__BODY_HEADER:
                if (cx->next_id < rec->header->next_id)
                        cx->next_id = rec->header->next_id;
                return 0;
        case CMWQ_STORE__RECORD__BODY_WORKQUEUE:
                return queue_record(cx, rec->workqueue, off);
        case CMWQ_STORE__RECORD__BODY_WORKQUEUE_DESTROYED:
                key = queue_key_of(rec->workqueue_destroyed->has_owner, rec->workqueue_destroyed->owner,
                                   rec->workqueue_destroyed->name);
                q = queue_find(cx, &key);
                if (q && q->alive)
                        q->alive = cx->gen_alive[q->gen] = false;
                return 0;
        case CMWQ_STORE__RECORD__BODY_ENVIRONMENT:
                return env_add(cx, rec->environment->id, off);
        case CMWQ_STORE__RECORD__BODY_ITEM_QUEUED:
                if (item_find(cx, rec->item_queued->id))
                        return 0;       /* the replay refuses an id it has */
                key = queue_key_of(rec->item_queued->has_workqueue_owner, rec->item_queued->workqueue_owner,
                                   rec->item_queued->workqueue);
                q = queue_find(cx, &key);
                if (!q || !q->alive || rec->item_queued->n_argv == 0)
                        return item_add(cx, rec->item_queued->id, off, 0, COMPACT_ITEM_GONE);
                return item_add(cx, rec->item_queued->id, off, q->gen, COMPACT_ITEM_LIVE);
        case CMWQ_STORE__RECORD__BODY_ITEM_RESULT:
                i = item_find(cx, rec->item_result->id);
                /* The replay retires a live item once; a result after that,
                 * or for an item its queue took along, changes nothing. */
                if (i && item_is_live(cx, i))
                        i->state = COMPACT_ITEM_RETIRED;
                return 0;
        case CMWQ_STORE__RECORD__BODY_ITEM_HISTORY:
                if (item_find(cx, rec->item_history->item->id))
                        return 0;
                return item_add(cx, rec->item_history->item->id, off, 0,
                                rec->item_history->item->n_argv > 0 ? COMPACT_ITEM_HISTORY : COMPACT_ITEM_GONE);
        default:
                return 0;       /* said again below, or nothing the replay keeps */
        }
}

/* Calls @fn for every record of the log, in order. */
static int compact_each_record(struct compaction *cx, struct store_writer *w,
                               int (*fn)(struct compaction *cx, struct store_writer *w, CmwqStore__Record *rec,
                                         uint64_t off, const uint8_t *frame, size_t frame_len)) {
        struct compact_reader rd = { .fd = cx->fd, .end = cx->end, .off = STORE_MAGIC_SIZE };
        unsigned count = 0;
        int r;

        for (;;) {
                CmwqStore__Record *rec = NULL;
                const uint8_t *frame = NULL;
                size_t frame_len = 0;
                uint64_t off = 0;

                r = reader_next(&rd, &rec, &off, &frame, &frame_len);
                if (r <= 0)
                        break;
                r = fn(cx, w, rec, off, frame, frame_len);
                cmwq_store__record__free_unpacked(rec, NULL);
                if (r < 0 || (r = cancelled(cx, &count)) < 0)
                        break;
        }
        reader_done(&rd);
        return r;
}

static int append_record_at(struct compaction *cx, struct store_writer *w, uint64_t off) {
        CmwqStore__Record *rec;
        int r = read_record_at(cx, off, &rec);

        if (r < 0)
                return r;
        cmwq_store__record__free_unpacked(rec, NULL);
        return store_writer_append_frame(w, cx->scratch.data, cx->scratch.len);
}

static int queue_compare(const void *a, const void *b) {
        const struct compact_queue *x = *(struct compact_queue *const *) a, *y = *(struct compact_queue *const *) b;

        return x->first_off < y->first_off ? -1 : x->first_off > y->first_off;
}

/* The Header, then every queue that exists, in the order it was
 * created. */
static int compact_write_head(struct compaction *cx, struct store_writer *w) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__Header hdr = CMWQ_STORE__HEADER__INIT;
        _cleanup_(freep) struct compact_queue **alive = NULL;
        size_t n = 0;
        int r;

        hdr.version = STORE_FORMAT_VERSION;
        hdr.next_id = cx->next_id > cx->plan->next_id ? cx->next_id : cx->plan->next_id;
        rec.body_case = CMWQ_STORE__RECORD__BODY_HEADER;
        rec.header = &hdr;
        r = store_writer_append(w, &rec);
        if (r < 0)
                return r;
        alive = calloc(cx->n_queues + 1, sizeof(*alive));
        if (!alive)
                return -ENOMEM;
        for (size_t k = 0; k < cx->n_queues; k++)
                if (cx->queues[k].alive)
                        alive[n++] = &cx->queues[k];
        qsort(alive, n, sizeof(*alive), queue_compare);
        for (size_t k = 0; k < n; k++) {
                r = append_record_at(cx, w, alive[k]->last_off);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* An ItemHistory of @i, retired by @result: its ItemQueued without what a
 * finished item no longer keeps. */
static int append_history(struct compaction *cx, struct store_writer *w, const struct compact_item *i,
                          CmwqStore__ItemResult *result) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT, *queued;
        CmwqStore__ItemHistory h = CMWQ_STORE__ITEM_HISTORY__INIT;
        CmwqStore__ItemQueued *q;
        size_t n_env;
        char **env;
        int r;

        r = read_record_at(cx, i->off, &queued);
        if (r < 0)
                return r;
        q = queued->item_queued;
        /* Given back as they were, for the free. */
        n_env = q->n_env;
        env = q->env;
        q->n_env = 0;
        q->env = NULL;
        q->has_env_id = q->has_payload = q->has_deadline_usec = false;
        h.item = q;
        h.result = result;
        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_HISTORY;
        rec.item_history = &h;
        r = store_writer_append(w, &rec);
        q->n_env = n_env;
        q->env = env;
        cmwq_store__record__free_unpacked(queued, NULL);
        return r;
}

/* The second pass: a record of the log, kept or not. */
static int compact_keep(struct compaction *cx, struct store_writer *w, CmwqStore__Record *rec, uint64_t off,
                        const uint8_t *frame, size_t frame_len) {
        struct compact_item *i;
        struct compact_env *e;
        uint64_t id;
        int r;

        switch (rec->body_case) {
        case CMWQ_STORE__RECORD__BODY_ITEM_QUEUED:
                i = item_find(cx, rec->item_queued->id);
                if (!i || i->off != off || !item_is_live(cx, i))
                        return 0;
                e = rec->item_queued->has_env_id ? env_find(cx, rec->item_queued->env_id) : NULL;
                if (e && !e->written) {
                        r = append_record_at(cx, w, e->off);
                        if (r < 0)
                                return r;
                        e->written = true;
                }
                return store_writer_append_frame(w, frame, frame_len);
        case CMWQ_STORE__RECORD__BODY_ITEM_STARTED:
        case CMWQ_STORE__RECORD__BODY_ITEM_RELEASED:
        case CMWQ_STORE__RECORD__BODY_ITEM_REQUEUED:
                id = rec->body_case == CMWQ_STORE__RECORD__BODY_ITEM_STARTED ? rec->item_started->id
                   : rec->body_case == CMWQ_STORE__RECORD__BODY_ITEM_RELEASED ? rec->item_released->id
                                                                               : rec->item_requeued->id;
                i = item_find(cx, id);
                if (!i || off < i->off || !item_is_live(cx, i))
                        return 0;
                return store_writer_append_frame(w, frame, frame_len);
        case CMWQ_STORE__RECORD__BODY_ITEM_RESULT:
                /* The first result after its ItemQueued is the one that
                 * retired it (no result comes while it is not live and
                 * then one while it is). */
                i = item_find(cx, rec->item_result->id);
                if (!i || i->state != COMPACT_ITEM_RETIRED || off < i->off || !item_in_history(cx, i->id))
                        return 0;
                i->state = COMPACT_ITEM_WRITTEN;
                return append_history(cx, w, i, rec->item_result);
        case CMWQ_STORE__RECORD__BODY_ITEM_HISTORY:
                i = item_find(cx, rec->item_history->item->id);
                if (!i || i->state != COMPACT_ITEM_HISTORY || i->off != off || !item_in_history(cx, i->id))
                        return 0;
                return store_writer_append_frame(w, frame, frame_len);
        default:
                return 0;
        }
}

void store_compact_plan_done(struct store_compact_plan *plan) {
        free(plan->history);
        *plan = (struct store_compact_plan) {};
}

int store_compact_log(int fd, uint64_t end, struct store_compact_plan *plan, struct store_writer *w,
                      atomic_bool *cancel) {
        struct compaction cx = { .fd = fd, .end = end, .plan = plan, .cancel = cancel,
                                 .items.elem = sizeof(struct compact_item),
                                 .envs.elem = sizeof(struct compact_env) };
        int r;

        if (plan->n_history > 0)
                qsort(plan->history, plan->n_history, sizeof(uint64_t), id_compare);
        r = compact_each_record(&cx, NULL, compact_learn);
        if (r >= 0)
                r = compact_write_head(&cx, w);
        if (r >= 0)
                r = compact_each_record(&cx, w, compact_keep);
        for (size_t k = 0; k < cx.n_queues; k++)
                free(cx.queues[k].name);
        free(cx.queues);
        index_done(&cx.queue_index);
        id_table_done(&cx.items);
        id_table_done(&cx.envs);
        free(cx.gen_alive);
        store_buf_done(&cx.scratch);
        return r;
}
