/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The shared region of a callback client, see callback_shm.h and proto/shm.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "callback_shm.h"
#include "log.h"
#include "util.h"

struct callback_shm {
        struct cmwq_shm *shm;           /* mapped, shared with the client */
        int eventfd;
        struct event *doorbell;
        struct event *resume;           /* a ring's worth was read: the rest on a later turn */
        uint32_t head;                  /* ours: the client may scribble on sq_head */
        callback_shm_op_fn op;
        callback_shm_broken_fn broken;
        void *userdata;
        bool is_broken;
};

int callback_shm_consume(struct cmwq_shm *shm, uint32_t *head, unsigned max, callback_shm_op_fn op,
                         void *userdata, const char **why) {
        uint32_t tail = __atomic_load_n(&shm->sq_tail, __ATOMIC_ACQUIRE);
        uint32_t n = tail - *head;
        unsigned done = 0;

        if (n > CMWQ_SHM_RING) {
                *why = "its submission ring holds more entries than it has room for";
                return -EBADMSG;
        }
        for (; done < n && done < max; done++) {
                uint32_t e = __atomic_load_n(&shm->sq[*head & (CMWQ_SHM_RING - 1)], __ATOMIC_RELAXED);
                uint32_t o = CMWQ_SHM_ENTRY_OP(e), slot = CMWQ_SHM_ENTRY_SLOT(e);

                (*head)++;
                if (o < CMWQ_SHM_OP_DEMAND || o > CMWQ_SHM_OP_FREEZE_ACK) {
                        *why = "an entry of its submission ring has an unknown op";
                        return -EBADMSG;
                }
                if (o != CMWQ_SHM_OP_FREEZE_ACK && slot >= CMWQ_SHM_SLOTS) {
                        *why = "an entry of its submission ring names a slot out of range";
                        return -EBADMSG;
                }
                if (op((enum cmwq_shm_op) o, slot, userdata) < 0) {
                        *why = "an entry of its submission ring names a slot with no registered thread";
                        return -EBADMSG;
                }
        }
        /* Room for the client only once the entries are read. */
        __atomic_store_n(&shm->sq_head, *head, __ATOMIC_RELEASE);
        return (int) done;
}

static void callback_shm_break(struct callback_shm *s, const char *why) {
        if (s->is_broken)
                return;
        s->is_broken = true;
        event_del(s->doorbell);
        event_del(s->resume);
        s->broken(why, s->userdata);
}

int callback_shm_drain(struct callback_shm *s) {
        unsigned budget = CMWQ_SHM_RING;
        const char *why = NULL;
        int r;

        if (s->is_broken)
                return -EBADMSG;
        /* This turn's ring's worth is spent (a well-behaved client never
         * has that many entries out): no request on the socket buys more. */
        if (evtimer_pending(s->resume, NULL))
                return 0;
        for (;;) {
                r = callback_shm_consume(s->shm, &s->head, budget, s->op, s->userdata, &why);
                if (r < 0) {
                        callback_shm_break(s, why);
                        return r;
                }
                budget -= (unsigned) r;
                if (budget == 0) {
                        /* A ring's worth in one go (the client may refill it
                         * as fast as we read): the rest on a later turn of
                         * the loop, after everyone else.  A timer, not
                         * event_active(), which would run us again in this
                         * same pass, before the loop looks at anyone's fd. */
                        static const struct timeval now = { 0, 0 };

                        evtimer_add(s->resume, &now);
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

        evtimer_del(s->resume);         /* a new turn, a new ring's worth */
        (void) callback_shm_drain(s);
}

static void callback_shm_doorbell(evutil_socket_t fd, short what, void *userdata) {
        struct callback_shm *s = userdata;
        uint64_t count;
        struct iovec iov = { .iov_base = &count, .iov_len = sizeof(count) };

        /* The client holds the same eventfd and may have made it blocking:
         * RWF_NOWAIT reads it without blocking whatever its flags say. */
        (void) preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
        (void) callback_shm_drain(s);
}

static void futex_wake(uint32_t *word) {
        /* Not FUTEX_PRIVATE: the client waits on its own mapping of the page. */
        (void) syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

void callback_shm_grant(struct callback_shm *s, unsigned slot, uint32_t seq) {
        struct cmwq_shm_slot *sl = &s->shm->slots[slot];

        __atomic_store_n(&sl->grant, seq, __ATOMIC_RELEASE);
        futex_wake(&sl->grant);
}

void callback_shm_reset_slot(struct callback_shm *s, unsigned slot) {
        __atomic_store_n(&s->shm->slots[slot].grant, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&s->shm->slots[slot].yield, 0, __ATOMIC_RELEASE);
}

void callback_shm_yield(struct callback_shm *s, unsigned slot, uint32_t seq) {
        __atomic_store_n(&s->shm->slots[slot].yield, seq, __ATOMIC_RELEASE);
}

void callback_shm_records(struct callback_shm *s, unsigned slot, uint64_t *started, uint64_t *finished) {
        *started = __atomic_load_n(&s->shm->slots[slot].started, __ATOMIC_RELAXED);
        *finished = __atomic_load_n(&s->shm->slots[slot].finished, __ATOMIC_RELAXED);
}

static int check_memfd(int fd, struct core_error *e) {
        struct stat st;
        int seals;

        if (fstat(fd, &st) < 0)
                return core_error_set(e, -errno, "cannot look at the shared memory: %s", strerror(errno));
        seals = fcntl(fd, F_GET_SEALS);
        if (!S_ISREG(st.st_mode) || seals < 0)
                return core_error_set(e, -EINVAL, "the shared memory is not a memfd");
        /* Shrunk under our mapping, it would be SIGBUS in the daemon. */
        if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
                return core_error_set(e, -EINVAL, "the shared memory is not sealed against resizing");
        if (st.st_size != (off_t) sizeof(struct cmwq_shm))
                return core_error_set(e, -EINVAL, "the shared memory has %lld bytes, not %zu",
                                      (long long) st.st_size, sizeof(struct cmwq_shm));
        return 0;
}

static int check_eventfd(int fd, struct core_error *e) {
        char path[64], target[64];
        uint64_t count;
        struct iovec iov = { .iov_base = &count, .iov_len = sizeof(count) };
        ssize_t n;

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n = readlink(path, target, sizeof(target) - 1);
        if (n < 0)
                return core_error_set(e, -errno, "cannot look at the doorbell: %s", strerror(errno));
        target[n] = '\0';
        if (strcmp(target, "anon_inode:[eventfd]") != 0)
                return core_error_set(e, -EINVAL, "the doorbell is not an eventfd");
        if (preadv2(fd, &iov, 1, -1, RWF_NOWAIT) < 0 && errno != EAGAIN)
                return core_error_set(e, -EOPNOTSUPP,
                                      "this kernel cannot read an eventfd without blocking (RWF_NOWAIT, Linux 5.12)");
        return 0;
}

int callback_shm_new(struct event_base *base, int memfd, int eventfd, callback_shm_op_fn op,
                     callback_shm_broken_fn broken, void *userdata, struct callback_shm **ret,
                     struct core_error *e) {
        _cleanup_(closep) int mfd = memfd, efd = eventfd;
        struct callback_shm *s;
        struct cmwq_shm *shm;
        int r;

        r = check_memfd(mfd, e);
        if (r < 0)
                return r;
        r = check_eventfd(efd, e);
        if (r < 0)
                return r;
        shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        if (shm == MAP_FAILED)
                return core_error_set(e, -errno, "cannot map the shared memory: %s", strerror(errno));
        if (__atomic_load_n(&shm->magic, __ATOMIC_RELAXED) != CMWQ_SHM_MAGIC ||
            __atomic_load_n(&shm->version, __ATOMIC_RELAXED) != CMWQ_SHM_VERSION ||
            __atomic_load_n(&shm->nr_slots, __ATOMIC_RELAXED) != CMWQ_SHM_SLOTS ||
            __atomic_load_n(&shm->ring_size, __ATOMIC_RELAXED) != CMWQ_SHM_RING) {
                munmap(shm, sizeof(*shm));
                return core_error_set(e, -EPROTONOSUPPORT,
                                      "the shared memory's layout is not version %u of cmwqd's", CMWQ_SHM_VERSION);
        }

        s = calloc(1, sizeof(*s));
        if (!s) {
                munmap(shm, sizeof(*shm));
                return core_error_set(e, -ENOMEM, "out of memory");
        }
        s->shm = shm;
        s->op = op;
        s->broken = broken;
        s->userdata = userdata;
        s->head = __atomic_load_n(&shm->sq_tail, __ATOMIC_ACQUIRE);    /* nothing before the attach counts */
        __atomic_store_n(&shm->sq_head, s->head, __ATOMIC_RELEASE);
        s->doorbell = event_new(base, efd, EV_READ | EV_PERSIST, callback_shm_doorbell, s);
        s->resume = evtimer_new(base, callback_shm_resume, s);
        if (!s->doorbell || !s->resume || event_add(s->doorbell, NULL) < 0) {
                if (s->doorbell)
                        event_free(s->doorbell);
                if (s->resume)
                        event_free(s->resume);
                munmap(shm, sizeof(*shm));
                free(s);
                return core_error_set(e, -ENOMEM, "out of memory");
        }
        s->eventfd = TAKE_FD(efd);
        __atomic_store_n(&shm->need_wakeup, 1, __ATOMIC_SEQ_CST);
        /* The mapping holds the memory: the memfd closes here. */
        *ret = s;
        return 0;
}

struct callback_shm *callback_shm_free(struct callback_shm *s) {
        if (!s)
                return NULL;
        event_free(s->doorbell);
        event_free(s->resume);
        close(s->eventfd);
        munmap(s->shm, sizeof(*s->shm));
        free(s);
        return NULL;
}
