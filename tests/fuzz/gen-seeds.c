/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Writes the seed corpus of the fuzz targets: real requests, packed by the
 * same protobuf-c code as cmwqctl's, framed as on the socket.
 *
 *   gen-seeds DIR     writes DIR/decode/seed-*, DIR/dispatch/seed-* and
 *                     DIR/shm-ring/seed-*
 *
 * A shm-ring seed is a program of fuzz-shm-ring.h's ops.  A dispatch seed
 * is the decode seed with the byte that picks the client in front
 * (fuzz-dispatch.c).  Programs are named for the fake executor's
 * behaviours (fake-exec.c): hang, nofork, sleeper, tempfail, false.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmwq.pb-c.h"
#include "frame.h"
#include "fuzz-shm-ring.h"

struct stream {
        uint8_t buf[1 << 16];
        size_t len;
        uint64_t next_id;
};

static void put_raw(struct stream *s, const void *data, size_t len) {
        if (s->len + len > sizeof(s->buf))
                abort();
        memcpy(s->buf + s->len, data, len);
        s->len += len;
}

static void put(struct stream *s, Cmwq__Request *req) {
        uint8_t hdr[CMWQ_FRAME_HEADER_SIZE];
        size_t len;

        req->id = ++s->next_id;
        len = cmwq__request__get_packed_size(req);
        frame_header_encode(hdr, (uint32_t) len);
        put_raw(s, hdr, sizeof(hdr));
        if (s->len + len > sizeof(s->buf))
                abort();
        cmwq__request__pack(req, s->buf + s->len);
        s->len += len;
}

static void hello(struct stream *s, uint32_t version) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Hello h = CMWQ__HELLO__INIT;

        h.version = version;
        h.client = (char *) "gen-seeds";
        req.body_case = CMWQ__REQUEST__BODY_HELLO;
        req.hello = &h;
        put(s, &req);
}

static void create(struct stream *s, const char *name, uint32_t flags, uint32_t max_active) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CreateWorkqueue c = CMWQ__CREATE_WORKQUEUE__INIT;

        c.name = (char *) name;
        c.has_flags = flags != 0;
        c.flags = flags;
        c.has_max_active = max_active != 0;
        c.max_active = max_active;
        req.body_case = CMWQ__REQUEST__BODY_CREATE;
        req.create = &c;
        put(s, &req);
}

static void by_name(struct stream *s, Cmwq__Request__BodyCase kind, const char *name) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__WorkqueueName n = CMWQ__WORKQUEUE_NAME__INIT;
        Cmwq__FreezeRequest f = CMWQ__FREEZE_REQUEST__INIT;

        n.name = f.name = (char *) name;
        req.body_case = kind;
        switch (kind) {
        case CMWQ__REQUEST__BODY_DESTROY: req.destroy = &n; break;
        case CMWQ__REQUEST__BODY_FLUSH: req.flush = &n; break;
        case CMWQ__REQUEST__BODY_DRAIN: req.drain = &n; break;
        case CMWQ__REQUEST__BODY_FREEZE:
                f.has_timeout_usec = true;
                f.timeout_usec = 1000;
                req.freeze = &f;
                break;
        case CMWQ__REQUEST__BODY_THAW: req.thaw = &f; break;
        default: abort();
        }
        put(s, &req);
}

static void by_id(struct stream *s, Cmwq__Request__BodyCase kind, uint64_t id) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__ItemId i = CMWQ__ITEM_ID__INIT;

        i.id = id;
        req.body_case = kind;
        req.wait = req.show = req.cancel = NULL;
        if (kind == CMWQ__REQUEST__BODY_WAIT)
                req.wait = &i;
        else if (kind == CMWQ__REQUEST__BODY_SHOW)
                req.show = &i;
        else
                req.cancel = &i;
        put(s, &req);
}

static void empty(struct stream *s, Cmwq__Request__BodyCase kind) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Empty e = CMWQ__EMPTY__INIT;

        req.body_case = kind;
        if (kind == CMWQ__REQUEST__BODY_LIST)
                req.list = &e;
        else if (kind == CMWQ__REQUEST__BODY_POOLS)
                req.pools = &e;
        else if (kind == CMWQ__REQUEST__BODY_SNAPSHOT)
                req.snapshot = &e;
        else if (kind == CMWQ__REQUEST__BODY_ITEMS)
                req.items = &e;
        else
                req.stats = &e;
        put(s, &req);
}

static void set_max_active(struct stream *s, const char *name, uint32_t max_active) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__SetMaxActive m = CMWQ__SET_MAX_ACTIVE__INIT;

        m.name = (char *) name;
        m.max_active = max_active;
        req.body_case = CMWQ__REQUEST__BODY_SET_MAX_ACTIVE;
        req.set_max_active = &m;
        put(s, &req);
}

struct submit_opts {
        int cpu;                /* 0: unset; else cpu + 1 */
        uint64_t delay_usec;
        const char *key;
        uint64_t timeout_usec;
        bool wait;
        const char *payload;
        const char *cwd;
        const char *env;
};

static void submit(struct stream *s, const char *wq, const char *program, const struct submit_opts *o) {
        static const struct submit_opts none;
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Submit sub = CMWQ__SUBMIT__INIT;
        char *argv[] = { (char *) program, (char *) "arg", NULL };
        char *env[] = { (char *) (o && o->env ? o->env : "PATH=/usr/bin:/bin"), NULL };

        if (!o)
                o = &none;
        sub.workqueue = (char *) wq;
        sub.n_argv = 2;
        sub.argv = argv;
        sub.n_env = 1;
        sub.env = env;
        sub.cwd = (char *) (o->cwd ? o->cwd : "/");
        if (o->payload) {
                sub.has_stdin_payload = true;
                sub.stdin_payload.data = (uint8_t *) o->payload;
                sub.stdin_payload.len = strlen(o->payload);
        }
        if (o->cpu) {
                sub.has_cpu = true;
                sub.cpu = o->cpu - 1;
        }
        sub.has_delay_usec = o->delay_usec > 0;
        sub.delay_usec = o->delay_usec;
        sub.key = (char *) o->key;
        sub.has_timeout_usec = o->timeout_usec > 0;
        sub.timeout_usec = o->timeout_usec;
        sub.has_wait = o->wait;
        sub.wait = o->wait;
        req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
        req.submit = &sub;
        put(s, &req);
}

static const char *out_dir;

static void write_seed(const char *target, const char *name, uint8_t prefix, const struct stream *s) {
        char path[4096];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", out_dir, target);
        if (mkdir(path, 0755) < 0 && errno != EEXIST) {
                perror(path);
                exit(1);
        }
        snprintf(path, sizeof(path), "%s/%s/seed-%s", out_dir, target, name);
        f = fopen(path, "wb");
        if (!f || (prefix != 0xff && fputc(prefix, f) == EOF) || fwrite(s->buf, 1, s->len, f) != s->len ||
            fclose(f) != 0) {
                perror(path);
                exit(1);
        }
}

/* As root (the dispatch seed's byte 0 is 0) and, with @also_unprivileged, as
 * uid 65534 too. */
static void emit(const char *name, const struct stream *s, bool also_unprivileged) {
        char n[256];

        write_seed("decode", name, 0xff, s);
        write_seed("dispatch", name, 0, s);
        if (also_unprivileged) {
                snprintf(n, sizeof(n), "%s-nobody", name);
                write_seed("dispatch", n, 1, s);
        }
}

/* shm-ring programs (fuzz-shm-ring.h) */
static void shm_put(struct stream *s, uint8_t op, const uint8_t *args, size_t n) {
        put_raw(s, &op, 1);
        put_raw(s, args, n);
}
#define SHM(s, op, ...) shm_put(s, op, (const uint8_t[]) { __VA_ARGS__ }, sizeof((const uint8_t[]) { __VA_ARGS__ }))
#define SHM0(s, op) shm_put(s, op, NULL, 0)
/* Slot choices (shm_fuzz_slots[]) */
#define SLOT_LAST 6
#define SLOT_PAST 7

static void shm_push(struct stream *s, uint8_t slot_choice, uint8_t op) {
        SHM(s, SHM_OP_PUSH, slot_choice, op);
}

static void shm_u32(struct stream *s, uint8_t op, uint32_t v) {
        SHM(s, op, v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, v >> 24);
}

static void shm_emit(const char *name, const struct stream *s) {
        write_seed("shm-ring", name, 0xff, s);
}

static void shm_seeds(struct stream *s) {
        /* What the library does: threads demand, are granted, go idle. */
        memset(s, 0, sizeof(*s));
        shm_push(s, 0, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        shm_push(s, 0, CMWQ_SHM_OP_IDLE);
        SHM0(s, SHM_OP_DOORBELL);
        shm_push(s, 1, CMWQ_SHM_OP_DEMAND);
        shm_push(s, 2, CMWQ_SHM_OP_DEMAND);
        shm_push(s, 3, CMWQ_SHM_OP_DEMAND);
        shm_push(s, 0, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        shm_push(s, 0, CMWQ_SHM_OP_IDLE);
        shm_push(s, 1, CMWQ_SHM_OP_IDLE);
        SHM0(s, SHM_OP_SYNC);
        shm_push(s, 2, CMWQ_SHM_OP_IDLE);
        shm_push(s, 3, CMWQ_SHM_OP_IDLE);
        SHM0(s, SHM_OP_DOORBELL);
        shm_emit("demand-idle", s);

        /* A CPU_INTENSIVE item: the grant stops counting, another starts. */
        memset(s, 0, sizeof(*s));
        shm_push(s, 0, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        shm_push(s, 2, CMWQ_SHM_OP_DEMAND);
        shm_push(s, 0, CMWQ_SHM_OP_INTENSIVE);
        SHM0(s, SHM_OP_DOORBELL);
        shm_push(s, 0, CMWQ_SHM_OP_IDLE);
        shm_push(s, 2, CMWQ_SHM_OP_INTENSIVE);
        shm_push(s, 2, CMWQ_SHM_OP_IDLE);
        shm_push(s, 1, CMWQ_SHM_OP_INTENSIVE);         /* not granted: nothing to stop */
        SHM0(s, SHM_OP_DOORBELL);
        shm_emit("intensive", s);

        /* Threads come and go, queues freeze and thaw. */
        memset(s, 0, sizeof(*s));
        SHM(s, SHM_OP_REGISTER, 4, 5, 0xff, 0);         /* no such CPU */
        SHM(s, SHM_OP_REGISTER, 4, 4, 0, 0);
        SHM(s, SHM_OP_REGISTER, 5, 4, 1, 0);            /* slot taken */
        SHM(s, SHM_OP_REGISTER, 5, SLOT_LAST, 1, 1);
        SHM(s, SHM_OP_REGISTER, 0, 5, 0, 0);            /* registered already */
        shm_push(s, 4, CMWQ_SHM_OP_DEMAND);
        shm_push(s, SLOT_LAST, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        SHM(s, SHM_OP_FREEZE, 0);
        SHM(s, SHM_OP_UNREGISTER, 4);                   /* while granted */
        SHM(s, SHM_OP_FREEZE, 1);
        shm_push(s, SLOT_LAST, CMWQ_SHM_OP_IDLE);
        SHM0(s, SHM_OP_DOORBELL);
        shm_emit("register-unregister", s);

        /* Threads move to another CPU: one granted, one that demands, one
         * idle; then one to a CPU with no pool, which breaks the ring. */
        memset(s, 0, sizeof(*s));
        shm_push(s, 0, CMWQ_SHM_OP_DEMAND);
        shm_push(s, 1, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        shm_u32(s, SHM_OP_PUSH_RAW, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_MOVE, CMWQ_SHM_MOVE_ARG(0, 1)));
        shm_u32(s, SHM_OP_PUSH_RAW, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_MOVE, CMWQ_SHM_MOVE_ARG(1, 0)));
        shm_u32(s, SHM_OP_PUSH_RAW, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_MOVE, CMWQ_SHM_MOVE_ARG(2, 1)));
        SHM0(s, SHM_OP_DOORBELL);
        shm_push(s, 0, CMWQ_SHM_OP_IDLE);
        shm_push(s, 2, CMWQ_SHM_OP_IDLE);
        SHM0(s, SHM_OP_DOORBELL);
        shm_u32(s, SHM_OP_PUSH_RAW, CMWQ_SHM_ENTRY(CMWQ_SHM_OP_MOVE, CMWQ_SHM_MOVE_ARG(3, 0x3fff)));
        SHM0(s, SHM_OP_DOORBELL);
        shm_emit("move", s);

        /* A freeze the client answers (notice 1), then one it does not and
         * breaks its ring: the freeze must not wait for it any more. */
        memset(s, 0, sizeof(*s));
        shm_push(s, 0, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        SHM(s, SHM_OP_FREEZE, 0);
        shm_push(s, 1, CMWQ_SHM_OP_FREEZE_ACK);         /* of notice 1 */
        SHM0(s, SHM_OP_DOORBELL);
        SHM(s, SHM_OP_FREEZE, 1);
        SHM(s, SHM_OP_FREEZE, 0);
        shm_push(s, SLOT_PAST, CMWQ_SHM_OP_IDLE);
        SHM0(s, SHM_OP_DOORBELL);
        SHM(s, SHM_OP_FREEZE, 1);
        shm_emit("freeze-ack-then-broken", s);

        /* Scribbles the daemon must shrug off: its own words, the records. */
        memset(s, 0, sizeof(*s));
        shm_push(s, 0, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        SHM(s, SHM_OP_WRITE, 0, 0, 0, 16, 0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 2, 3, 4);
        SHM(s, SHM_OP_WRITE, 64, 0, 0, 8, 0x10, 0x20, 0x30, 0x40, 0, 0, 0, 0);     /* sq_head, need_wakeup */
        SHM(s, SHM_OP_WRITE, 0xc0, 0x40, 0, 24, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff);  /* slot 0 */
        shm_push(s, 0, CMWQ_SHM_OP_IDLE);
        shm_push(s, 1, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        shm_emit("scribble-header-and-slots", s);

        /* Broken, one way each. */
        memset(s, 0, sizeof(*s));
        shm_push(s, 0, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        shm_u32(s, SHM_OP_PUSH_RAW, 0x07000001u);
        shm_push(s, 1, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        SHM0(s, SHM_OP_SYNC);
        shm_push(s, 1, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        shm_emit("bad-op", s);

        memset(s, 0, sizeof(*s));
        shm_push(s, 0, CMWQ_SHM_OP_DEMAND);
        shm_push(s, SLOT_PAST, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        SHM(s, SHM_OP_REGISTER, 4, 4, 0, 0);
        shm_emit("slot-out-of-range", s);

        memset(s, 0, sizeof(*s));
        shm_push(s, 0, CMWQ_SHM_OP_DEMAND);
        shm_push(s, 5, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        SHM0(s, SHM_OP_SYNC);
        shm_emit("unregistered-slot", s);

        memset(s, 0, sizeof(*s));
        shm_push(s, 1, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        shm_u32(s, SHM_OP_TAIL, 100000);
        SHM0(s, SHM_OP_DOORBELL);
        SHM0(s, SHM_OP_DOORBELL);
        shm_emit("tail-far-ahead", s);

        memset(s, 0, sizeof(*s));
        shm_u32(s, SHM_OP_TAIL, 0xffffffffu);           /* behind the head */
        SHM0(s, SHM_OP_SYNC);
        shm_emit("tail-behind", s);

        /* A full ring is fine, read over turns of the loop. */
        memset(s, 0, sizeof(*s));
        SHM(s, SHM_OP_FILL, 0, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        SHM0(s, SHM_OP_TURN);
        SHM(s, SHM_OP_FILL, 0, CMWQ_SHM_OP_IDLE);
        SHM0(s, SHM_OP_SYNC);
        SHM0(s, SHM_OP_DOORBELL);
        shm_emit("full-ring", s);

        /* Another thread refilling the ring as fast as the daemon reads. */
        memset(s, 0, sizeof(*s));
        SHM(s, SHM_OP_RACE, 0x00, 0x30, 0, CMWQ_SHM_OP_DEMAND);     /* 3 rings' worth */
        shm_push(s, 0, CMWQ_SHM_OP_DEMAND);
        SHM0(s, SHM_OP_DOORBELL);
        SHM0(s, SHM_OP_TURN);
        SHM0(s, SHM_OP_TURN);
        shm_emit("race", s);

        /* Credits of unbound queues (entries 0-2 are named by the target):
         * a claim, one bounded by max_active, a bound queue refused, credits
         * given back across a freeze, an unknown queue, then more given back
         * than held, which breaks the region. */
#define SHM_AT(off) (uint8_t) ((off) & 0xff), (uint8_t) ((off) >> 8 & 0xff), (uint8_t) ((off) >> 16 & 0xff)
        memset(s, 0, sizeof(*s));
        shm_push(s, 0, CMWQ_SHM_OP_CREDITS);
        shm_push(s, 2, CMWQ_SHM_OP_CREDITS);
        shm_push(s, 1, CMWQ_SHM_OP_CREDITS);
        SHM0(s, SHM_OP_DOORBELL);
        SHM(s, SHM_OP_FREEZE, 0);
        SHM(s, SHM_OP_WRITE, SHM_AT(offsetof(struct cmwq_shm, credits[0].returned)), 4, 2, 0, 0, 0);
        shm_push(s, 0, CMWQ_SHM_OP_CREDITS);
        SHM(s, SHM_OP_FREEZE, 1);
        SHM0(s, SHM_OP_DOORBELL);
        SHM(s, SHM_OP_WRITE, SHM_AT(offsetof(struct cmwq_shm, credits[3].name)), 4, 'x', 'y', 'z', 0);
        shm_push(s, 3, CMWQ_SHM_OP_CREDITS);
        SHM(s, SHM_OP_WRITE, SHM_AT(offsetof(struct cmwq_shm, credits[0].returned)), 4, 50, 0, 0, 0);
        shm_push(s, 0, CMWQ_SHM_OP_CREDITS);
        SHM0(s, SHM_OP_DOORBELL);
        shm_emit("credits", s);
#undef SHM_AT
}

int main(int argc, char **argv) {
        struct stream *s = calloc(1, sizeof(*s));

        if (argc != 2 || !s) {
                fprintf(stderr, "Usage: gen-seeds DIR\n");
                return 2;
        }
        out_dir = argv[1];

#define BEGIN() (memset(s, 0, sizeof(*s)), hello(s, CMWQ_PROTOCOL_VERSION))

        BEGIN();
        emit("hello", s, false);

        BEGIN();
        empty(s, CMWQ__REQUEST__BODY_LIST);
        empty(s, CMWQ__REQUEST__BODY_POOLS);
        empty(s, CMWQ__REQUEST__BODY_STATS);
        emit("list-pools-stats", s, true);

        /* cmwqctl top: one Snapshot per refresh, with work about */
        BEGIN();
        create(s, "mine", 0, 0);
        submit(s, "mine", "/bin/true", &(struct submit_opts) { .cpu = 1 });
        empty(s, CMWQ__REQUEST__BODY_SNAPSHOT);
        empty(s, CMWQ__REQUEST__BODY_SNAPSHOT);
        emit("snapshot", s, true);

        /* the completion of item IDs: one unfinished, one in the history */
        BEGIN();
        create(s, "mine", 0, 0);
        submit(s, "mine", "/bin/true", &(struct submit_opts) { .wait = true });
        submit(s, "mine", "/bin/true", &(struct submit_opts) { .cpu = 1 });
        empty(s, CMWQ__REQUEST__BODY_ITEMS);
        emit("items", s, true);

        BEGIN();
        submit(s, "system", "/bin/true", &(struct submit_opts) { .wait = true, .payload = "hello" });
        by_id(s, CMWQ__REQUEST__BODY_SHOW, 1);
        emit("submit-wait", s, true);

        BEGIN();
        create(s, "build", 0, 4);
        for (int k = 0; k < 6; k++)
                submit(s, "build", k % 2 ? "sleeper" : "/bin/true", &(struct submit_opts) { .cpu = 1 });
        by_name(s, CMWQ__REQUEST__BODY_FLUSH, "build");
        empty(s, CMWQ__REQUEST__BODY_STATS);
        by_name(s, CMWQ__REQUEST__BODY_DESTROY, "build");
        emit("create-submit-flush-destroy", s, true);

        BEGIN();
        create(s, "ord", 1 << 17, 0);
        submit(s, "ord", "hang", NULL);
        submit(s, "ord", "/bin/true", NULL);
        by_id(s, CMWQ__REQUEST__BODY_WAIT, 2);
        by_id(s, CMWQ__REQUEST__BODY_CANCEL, 1);
        by_name(s, CMWQ__REQUEST__BODY_DRAIN, "ord");
        empty(s, CMWQ__REQUEST__BODY_LIST);
        emit("ordered-hang-cancel-drain", s, true);

        BEGIN();
        create(s, "fz", 2 | 1, 2);
        submit(s, "fz", "hang", NULL);
        by_name(s, CMWQ__REQUEST__BODY_FREEZE, "fz");
        submit(s, "fz", "/bin/true", NULL);
        by_name(s, CMWQ__REQUEST__BODY_THAW, "fz");
        by_name(s, CMWQ__REQUEST__BODY_FREEZE, "");
        by_name(s, CMWQ__REQUEST__BODY_THAW, "");
        emit("freeze-thaw", s, true);

        BEGIN();
        create(s, "cpu", 32, 1);
        submit(s, "cpu", "nofork", &(struct submit_opts) { .cpu = 1 });
        submit(s, "cpu", "/bin/true", &(struct submit_opts) { .cpu = 2 });
        set_max_active(s, "cpu", 8);
        empty(s, CMWQ__REQUEST__BODY_STATS);
        empty(s, CMWQ__REQUEST__BODY_POOLS);
        emit("nofork-max-active", s, true);

        BEGIN();
        create(s, "reclaim", 4, 1);
        submit(s, "reclaim", "nofork", &(struct submit_opts) { .cpu = 1, .wait = true });
        submit(s, "reclaim", "nofork", &(struct submit_opts) { .cpu = 1 });
        empty(s, CMWQ__REQUEST__BODY_STATS);
        emit("mem-reclaim-rescuer", s, true);

        BEGIN();
        create(s, "keys", 4 | 16, 0);
        submit(s, "keys", "tempfail", &(struct submit_opts) { .key = "nightly", .delay_usec = 1 });
        submit(s, "keys", "tempfail", &(struct submit_opts) { .key = "nightly", .delay_usec = 1, .wait = true });
        submit(s, "keys", "false", &(struct submit_opts) { .key = "other", .timeout_usec = 1000000,
                                                           .env = "A=B", .cwd = "/tmp" });
        by_id(s, CMWQ__REQUEST__BODY_CANCEL, 1);
        by_id(s, CMWQ__REQUEST__BODY_SHOW, 3);
        emit("keys-delay-tempfail", s, true);

        BEGIN();
        submit(s, "system_unbound", "hang", &(struct submit_opts) { .wait = true });
        submit(s, "system_unbound", "sleeper", &(struct submit_opts) { .wait = true });
        by_name(s, CMWQ__REQUEST__BODY_FLUSH, "system_unbound");
        emit("unbound-wait-left-open", s, true);

        /* Refused at the door. */
        memset(s, 0, sizeof(*s));
        empty(s, CMWQ__REQUEST__BODY_LIST);
        emit("no-hello", s, false);

        memset(s, 0, sizeof(*s));
        hello(s, 99);
        emit("bad-version", s, false);

        BEGIN();
        hello(s, CMWQ_PROTOCOL_VERSION);
        emit("hello-twice", s, false);

        BEGIN();
        put_raw(s, "\x05\x00\x00\x00\xff\xff\xff\xff\xff", 9);
        emit("malformed", s, false);

        BEGIN();
        put_raw(s, "\xff\xff\xff\x7f", 4);
        emit("oversized", s, false);

        BEGIN();
        {
                Cmwq__Request req = CMWQ__REQUEST__INIT;
                put(s, &req);   /* no body */
        }
        emit("no-body", s, false);

        shm_seeds(s);
        return 0;
}
