/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The shared region of a callback client, see callback/callback-shm.h and proto/shm.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/log.h"
#include "callback/callback-shm.h"
#include "cm/sleepwatch.h"
#include "util.h"

/*
 * Each client's budget of ring entries: a token bucket, refilled at
 * CALLBACK_SHM_RATE entries a second up to a ring's worth (CMWQ_SHM_RING);
 * each entry read costs one, a MOVE two.  A well-behaved client needs about two entries
 * per grant (DEMAND, IDLE), and the block-heavy library benchmark makes at
 * most ~20,000 grants a second per process: 50,000 entries a second leaves
 * it room, and the burst a whole ring (all its threads' outstanding
 * requests at once, see proto/shm.h).  A client spending faster than that
 * (IDLE/DEMAND pairs in a loop) is read at that rate and no faster: it only
 * slows itself down, and cmwqd spends a bounded share of a CPU on it.
 */
#define CALLBACK_SHM_RATE 50000u
/* An empty bucket is looked at again this much later (500 entries' worth),
 * not at once: at most 100 extra turns of the loop a second per client. */
#define CALLBACK_SHM_RESUME_USEC 10000u

struct callback_shm {
        struct cmwq_shm *shm;           /* mapped, shared with the client */
        size_t size;                    /* without the credits entries for an older client */
        int eventfd;
        struct event *doorbell;         /* not listened to while out of budget */
        struct event *resume;           /* out of budget: read again when there is some */
        struct event *recheck;          /* a lazy_doorbell turned 0: read before the loop sleeps */
        struct sleepwatch *sleepwatch;  /* caught up before a doorbell's entries are acted on */
        uint32_t head;                  /* ours: the client may scribble on sq_head */
        callback_shm_op_fn op;
        callback_shm_broken_fn broken;
        void *userdata;
        pid_t pid;                      /* for the log */
        unsigned tokens;                /* entries it may still have read, <= CMWQ_SHM_RING */
        uint64_t refilled_usec;         /* when tokens were last added */
        bool is_broken;
        bool warned;                    /* it was logged as over its budget */
};

/* The reader itself: consumes entries after *@head until they cost @max,
 * checks each and passes it to @op, and publishes the new head.  An entry
 * costs 1, a MOVE 2 (it gives back and demands, as IDLE and DEMAND do), so
 * the last may go 1 over @max.  Returns the cost, or -EBADMSG with *@why
 * set when the ring or an entry is broken (or the op function's error). */
static int callback_shm_consume(struct cmwq_shm *shm, bool credits, uint32_t *head, unsigned max, callback_shm_op_fn op,
                                void *userdata, const char **why) {
        uint32_t tail = __atomic_load_n(&shm->sq_tail, __ATOMIC_ACQUIRE);
        uint32_t n = tail - *head;
        unsigned done = 0, cost = 0;
        int r;

        if (n > CMWQ_SHM_RING) {
                *why = "its submission ring holds more entries than it has room for";
                return -EBADMSG;
        }
        for (; done < n && cost < max; done++) {
                uint32_t e = __atomic_load_n(&shm->sq[*head & (CMWQ_SHM_RING - 1)], __ATOMIC_RELAXED);
                uint32_t o = CMWQ_SHM_ENTRY_OP(e), slot = CMWQ_SHM_ENTRY_SLOT(e);

                (*head)++;
                cost += o == CMWQ_SHM_OP_MOVE ? 2 : 1;
                if (o < CMWQ_SHM_OP_DEMAND || o > CMWQ_SHM_OP_MOVE) {
                        *why = "an entry of its submission ring has an unknown op";
                        return -EBADMSG;
                }
                if (o != CMWQ_SHM_OP_FREEZE_ACK && o != CMWQ_SHM_OP_CREDITS && o != CMWQ_SHM_OP_MOVE &&
                    slot >= CMWQ_SHM_SLOTS) {
                        *why = "an entry of its submission ring names a slot out of range";
                        return -EBADMSG;
                }
                if (o == CMWQ_SHM_OP_CREDITS && (!credits || slot >= CMWQ_SHM_CREDIT_QUEUES)) {
                        *why = "an entry of its submission ring names a credits entry out of range, "
                               "or one its region has not";
                        return -EBADMSG;
                }
                r = op((enum cmwq_shm_op) o, slot, userdata);
                if (r < 0) {
                        *why = r == -EINVAL ? "an entry of its submission ring moves a thread to a CPU cmwqd has "
                                              "no pool on"
                                            : "an entry of its submission ring names a slot with no registered "
                                              "thread";
                        return -EBADMSG;
                }
        }
        /* Room for the client only once the entries are read. */
        __atomic_store_n(&shm->sq_head, *head, __ATOMIC_RELEASE);
        return (int) cost;
}

void callback_shm_break(struct callback_shm *s, const char *why) {
        if (s->is_broken)
                return;
        s->is_broken = true;
        event_del(s->doorbell);
        event_del(s->resume);
        s->broken(why, s->userdata);
}

/* Adds what the time since the last refill bought.  The time is the loop's,
 * taken once a turn (libevent's cached time): whoever drains more than once
 * in a turn (a doorbell, a batch of switches, a request on the socket) gets
 * no more than a ring's worth in it. */
static void callback_shm_refill(struct callback_shm *s) {
        struct timeval tv;
        uint64_t now, credit;

        if (event_base_gettimeofday_cached(event_get_base(s->resume), &tv) < 0)
                return;
        now = (uint64_t) tv.tv_sec * 1000000u + (uint64_t) tv.tv_usec;
        if (now < s->refilled_usec) {   /* the clock went back: start from now */
                s->refilled_usec = now;
                return;
        }
        credit = (now - s->refilled_usec) * CALLBACK_SHM_RATE / 1000000u;
        if (credit == 0)
                return;
        if (credit >= CMWQ_SHM_RING - s->tokens) {
                s->tokens = CMWQ_SHM_RING;
                s->refilled_usec = now;
        } else {
                s->tokens += (unsigned) credit;
                /* Keep the fraction of an entry not paid out yet. */
                s->refilled_usec += credit * 1000000u / CALLBACK_SHM_RATE;
        }
}

int callback_shm_drain(struct callback_shm *s) {
        const char *why = NULL;
        int r;

        if (s->is_broken)
                return -EBADMSG;
        /* Out of budget: nothing until the timer, whatever asks (a doorbell,
         * a batch of switches, a request on the socket). */
        if (evtimer_pending(s->resume, NULL))
                return 0;
        callback_shm_refill(s);
        for (;;) {
                r = callback_shm_consume(s->shm, s->size == sizeof(*s->shm), &s->head, s->tokens, s->op, s->userdata,
                                         &why);
                if (r < 0) {
                        callback_shm_break(s, why);
                        return r;
                }
                s->tokens -= (unsigned) r < s->tokens ? (unsigned) r : s->tokens;
                if (s->tokens == 0) {
                        /* The rest later, when the bucket has some again: a
                         * timer, not an immediate turn, and its doorbell
                         * unheard meanwhile (ringing it costs us nothing). */
                        static const struct timeval later = { 0, CALLBACK_SHM_RESUME_USEC };

                        if (!s->warned) {
                                s->warned = true;
                                log_warning("Client PID %d exceeded its budget of %u shared memory ring entries a "
                                            "second; its entries are read at that rate",
                                            (int) s->pid, CALLBACK_SHM_RATE);
                        }
                        event_del(s->doorbell);
                        evtimer_add(s->resume, &later);
                        return 0;
                }
                /* Asleep from now on: the client's next entry rings.  Then
                 * look again, for an entry added before it could see that. */
                __atomic_store_n(&s->shm->need_wakeup, 1, __ATOMIC_SEQ_CST);
                if (__atomic_load_n(&s->shm->sq_tail, __ATOMIC_SEQ_CST) == s->head)
                        return 0;
        }
}

static void callback_shm_resume(evutil_socket_t fd, short what, void *userdata) {
        struct callback_shm *s = userdata;

        evtimer_del(s->resume);
        if (s->is_broken)
                return;
        /* A ring made while we did not listen is heard now. */
        (void) event_add(s->doorbell, NULL);
        sleepwatch_catch_up(s->sleepwatch);
        (void) callback_shm_drain(s);
}

static void callback_shm_doorbell(evutil_socket_t fd, short what, void *userdata) {
        struct callback_shm *s = userdata;
        uint64_t count;
        struct iovec iov = { .iov_base = &count, .iov_len = sizeof(count) };

        /* The client holds the same eventfd and may have made it blocking:
         * RWF_NOWAIT reads it without blocking whatever its flags say. */
        if (preadv2(fd, &iov, 1, -1, RWF_NOWAIT) < 0) {
                /* EAGAIN (rung and read already): the ring is read anyway. */
        }
        /* A DEMAND is decided from who runs on its CPU now. */
        sleepwatch_catch_up(s->sleepwatch);
        (void) callback_shm_drain(s);
}

static void callback_shm_recheck(evutil_socket_t fd, short what, void *userdata) {
        struct callback_shm *s = userdata;

        sleepwatch_catch_up(s->sleepwatch);
        (void) callback_shm_drain(s);
}

/* How many waiters it woke (0 on an error). */
static int futex_wake(uint32_t *word) {
        /* Not FUTEX_PRIVATE: the client waits on its own mapping of the page. */
        long r = syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);

        return r > 0 ? (int) r : 0;
}

bool callback_shm_grant(struct callback_shm *s, unsigned slot, uint32_t seq) {
        struct cmwq_shm_slot *sl = &s->shm->slots[slot];

        /* Before the grant is seen: it may linger on this one. */
        __atomic_store_n(&sl->linger, CMWQ_SHM_LINGER_NONE, __ATOMIC_RELEASE);
        __atomic_store_n(&sl->grant, seq, __ATOMIC_RELEASE);
        return futex_wake(&sl->grant) > 0;
}

uint64_t callback_shm_grant_taken_ns(struct callback_shm *s, unsigned slot, uint32_t seq) {
        const struct cmwq_shm_slot *sl = &s->shm->slots[slot];

        if (__atomic_load_n(&sl->taken_grant, __ATOMIC_ACQUIRE) != seq)
                return UINT64_MAX;
        return __atomic_load_n(&sl->taken_ns, __ATOMIC_RELAXED);
}

void callback_shm_reset_slot(struct callback_shm *s, unsigned slot) {
        __atomic_store_n(&s->shm->slots[slot].grant, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&s->shm->slots[slot].yield, 0, __ATOMIC_RELEASE);
        /* Not a take of the new thread's grants by the one before. */
        __atomic_store_n(&s->shm->slots[slot].taken_grant, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&s->shm->slots[slot].lazy_doorbell, 0, __ATOMIC_SEQ_CST);
}

void callback_shm_set_lazy_doorbell(struct callback_shm *s, unsigned slot, bool lazy) {
        /* Sequentially consistent, as the client's store of sq_tail and its
         * load of this word (proto/shm.h): after a 0 here, either the
         * client saw it and rings, or the drain below sees its entry. */
        __atomic_store_n(&s->shm->slots[slot].lazy_doorbell, lazy, __ATOMIC_SEQ_CST);
        if (!lazy)
                event_active(s->recheck, EV_TIMEOUT, 1);
}

enum cmwq_shm_linger callback_shm_linger_revoke(struct callback_shm *s, unsigned slot) {
        uint32_t *word = &s->shm->slots[slot].linger;
        uint32_t v = __atomic_load_n(word, __ATOMIC_ACQUIRE);

        /* The client may change the word at any moment: exchange from
         * what was read, and read again if it moved. */
        for (;;) {
                if (v == CMWQ_SHM_LINGER_TAKEN)
                        return CMWQ_SHM_LINGER_TAKEN;
                if (v != CMWQ_SHM_LINGER_NONE && v != CMWQ_SHM_LINGER_IDLE)
                        return CMWQ_SHM_LINGER_BARRED;
                if (__atomic_compare_exchange_n(word, &v,
                                                v == CMWQ_SHM_LINGER_IDLE ? CMWQ_SHM_LINGER_REVOKED
                                                                          : CMWQ_SHM_LINGER_BARRED,
                                                false, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
                        return v;
        }
}

void callback_shm_linger_settle(struct callback_shm *s, unsigned slot, bool runs) {
        uint32_t *word = &s->shm->slots[slot].linger;
        uint32_t v = CMWQ_SHM_LINGER_TAKEN;

        (void) __atomic_compare_exchange_n(word, &v, runs ? CMWQ_SHM_LINGER_NONE : CMWQ_SHM_LINGER_BARRED, false,
                                           __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
        /* Still asleep on the word, it is runnable from here on. */
        futex_wake(word);
}

void callback_shm_yield(struct callback_shm *s, unsigned slot, uint32_t seq) {
        __atomic_store_n(&s->shm->slots[slot].yield, seq, __ATOMIC_RELEASE);
}

void callback_shm_records(struct callback_shm *s, unsigned slot, uint64_t *started, uint64_t *finished) {
        *started = __atomic_load_n(&s->shm->slots[slot].started, __ATOMIC_RELAXED);
        *finished = __atomic_load_n(&s->shm->slots[slot].finished, __ATOMIC_RELAXED);
}

bool callback_shm_credits_read(struct callback_shm *s, unsigned entry, char *name, uint32_t *want,
                               uint32_t *returned) {
        struct cmwq_shm_credits *cr = &s->shm->credits[entry];

        if (name) {
                memcpy(name, cr->name, CMWQ_SHM_CREDIT_NAME);
                if (!memchr(name, 0, CMWQ_SHM_CREDIT_NAME))
                        return false;
        }
        *want = __atomic_load_n(&cr->want, __ATOMIC_ACQUIRE);
        *returned = __atomic_load_n(&cr->returned, __ATOMIC_ACQUIRE);
        return true;
}

void callback_shm_credits_write(struct callback_shm *s, unsigned entry, uint32_t granted, uint32_t limit,
                                bool refused) {
        struct cmwq_shm_credits *cr = &s->shm->credits[entry];
        bool woke = __atomic_load_n(&cr->granted, __ATOMIC_RELAXED) != granted ||
                    __atomic_load_n(&cr->refused, __ATOMIC_RELAXED) != (uint32_t) refused;

        __atomic_store_n(&cr->limit, limit, __ATOMIC_RELEASE);
        __atomic_store_n(&cr->refused, refused, __ATOMIC_RELEASE);
        __atomic_store_n(&cr->granted, granted, __ATOMIC_RELEASE);
        if (woke)
                futex_wake(&cr->granted);
}

uint64_t callback_shm_run_cpu_ns(struct callback_shm *s, unsigned slot) {
        return __atomic_load_n(&s->shm->slots[slot].run_cpu_ns, __ATOMIC_RELAXED);
}

int callback_shm_new(struct event_base *base, struct sleepwatch *sw, pid_t pid, bool credits, callback_shm_op_fn op,
                     callback_shm_broken_fn broken,
                     void *userdata, struct callback_shm **ret, int *ret_memfd, int *ret_eventfd,
                     struct core_error *e) {
        _cleanup_(closep) int memfd = -1, efd = -1;
        size_t size = credits ? sizeof(struct cmwq_shm) : offsetof(struct cmwq_shm, credits);
        struct callback_shm *s;
        struct cmwq_shm *shm;

        memfd = memfd_create("cmwq-callbacks", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (memfd < 0)
                return core_error_set(e, -errno, "cannot make the shared memory: %s", strerror(errno));
        /* The client cannot resize it under our mapping (SIGBUS), nor
         * unseal it. */
        if (ftruncate(memfd, size) < 0 ||
            fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                return core_error_set(e, -errno, "cannot size the shared memory: %s", strerror(errno));
        /* Not a semaphore: one read empties it whatever the client writes. */
        efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (efd < 0)
                return core_error_set(e, -errno, "cannot make the doorbell: %s", strerror(errno));
        shm = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
        if (shm == MAP_FAILED)
                return core_error_set(e, -errno, "cannot map the shared memory: %s", strerror(errno));
        shm->magic = CMWQ_SHM_MAGIC;
        shm->version = CMWQ_SHM_VERSION;
        shm->nr_slots = CMWQ_SHM_SLOTS;
        shm->ring_size = CMWQ_SHM_RING;
        shm->features = CMWQ_SHM_FEATURE_LINGER | CMWQ_SHM_FEATURE_MOVE | (credits ? CMWQ_SHM_FEATURE_CREDITS : 0);
        shm->need_wakeup = 1;

        s = calloc(1, sizeof(*s));
        if (!s) {
                munmap(shm, size);
                return core_error_set(e, -ENOMEM, "out of memory");
        }
        s->shm = shm;
        s->size = size;
        s->sleepwatch = sw;
        s->op = op;
        s->broken = broken;
        s->userdata = userdata;
        s->pid = pid;
        s->tokens = CMWQ_SHM_RING;
        s->refilled_usec = now_usec(CLOCK_REALTIME);
        s->doorbell = event_new(base, efd, EV_READ | EV_PERSIST, callback_shm_doorbell, s);
        s->resume = evtimer_new(base, callback_shm_resume, s);
        s->recheck = event_new(base, -1, 0, callback_shm_recheck, s);
        if (!s->doorbell || !s->resume || !s->recheck || event_add(s->doorbell, NULL) < 0) {
                if (s->doorbell)
                        event_free(s->doorbell);
                if (s->resume)
                        event_free(s->resume);
                if (s->recheck)
                        event_free(s->recheck);
                munmap(shm, size);
                free(s);
                return core_error_set(e, -ENOMEM, "out of memory");
        }
        s->eventfd = efd;
        *ret_eventfd = TAKE_FD(efd);
        *ret_memfd = TAKE_FD(memfd);
        *ret = s;
        return 0;
}

struct callback_shm *callback_shm_free(struct callback_shm *s) {
        if (!s)
                return NULL;
        event_free(s->doorbell);
        event_free(s->resume);
        event_free(s->recheck);
        close(s->eventfd);
        munmap(s->shm, s->size);
        free(s);
        return NULL;
}
