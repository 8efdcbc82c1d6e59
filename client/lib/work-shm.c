/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libcmwq-client: the shared-memory protocol, the client's side
 * (proto/shm.h, doc/design.md section 6).
 *
 * Everything the library says to cmwqd about its bound worker threads
 * without a socket message lives here: attaching the region and its
 * doorbell, the futex words, the submission ring (demand, idle, intensive,
 * freeze acknowledgements), and what a thread reports in its slot (the
 * CPU time a callback starts from, the yield the daemon asked for); and
 * the two socket requests that give a thread its slot.  It is apart from
 * the pools (work-pool.c) because it is a protocol with the daemon, with its
 * own reference and its own fuzz target on the daemon's side, and the pools'
 * logic does not depend on how a demand reaches cmwqd.
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "work-internal.h"

/* The calling thread's CPU time (ns); only differences of it reach cmwqd,
 * whose clock of it has another origin. */
static uint64_t thread_cpu_ns(void) {
        struct timespec ts;

        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
                return 0;       /* "none reported": counted from the grant */
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

void work_futex_wake_all(uint32_t *word) {
        /* Not FUTEX_PRIVATE: the daemon wakes the same word in its mapping. */
        (void) syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void work_futex_wait(uint32_t *word, uint32_t val, const struct timespec *timeout) {
        (void) syscall(SYS_futex, word, FUTEX_WAIT, val, timeout, NULL, 0);
}

/* Tells the daemon what a bound thread does: an entry in the submission
 * ring, and the doorbell only if the daemon sleeps (need_wakeup), so that a
 * burst of entries costs it one wake-up.  A @lazy entry rings no doorbell
 * at all where the daemon allows it for the @lazy thread (proto/shm.h,
 * lazy_doorbell): it matters only once that thread switches out, and the
 * daemon reads the ring before it acts on that.  @arg: the entry's low 24
 * bits, a slot for a thread's entries.  Work lock held: one producer. */
void work_ring_push(struct client_work *cw, enum cmwq_shm_op op, unsigned arg, const struct work_thread *lazy) {
        struct cmwq_shm *shm = cw->shm;
        uint32_t tail = cw->sq_tail;

        /* Never full with a live daemon (at most three entries per thread,
         * see proto/shm.h); a stuck one gets the doorbell until it reads. */
        while (tail - __atomic_load_n(&shm->sq_head, __ATOMIC_ACQUIRE) >= CMWQ_SHM_RING) {
                if (cw->dead || __atomic_load_n(&cw->c->dead, __ATOMIC_RELAXED))
                        return;
                (void) eventfd_write(cw->doorbell, 1);
                usleep(1000);
        }
        __atomic_store_n(&shm->sq[tail & (CMWQ_SHM_RING - 1)], CMWQ_SHM_ENTRY(op, arg), __ATOMIC_RELAXED);
        cw->sq_tail = tail + 1;
        __atomic_store_n(&shm->sq_tail, cw->sq_tail, __ATOMIC_SEQ_CST);
        /* Sequentially consistent with the store of sq_tail above: cmwqd
         * reads the ring after it turns the word to 0, so either it sees
         * this entry then or we see the 0 now. */
        if (lazy && __atomic_load_n(&shm->slots[lazy->slot].lazy_doorbell, __ATOMIC_SEQ_CST) == 1)
                return;
        if (__atomic_load_n(&shm->need_wakeup, __ATOMIC_SEQ_CST) &&
            __atomic_exchange_n(&shm->need_wakeup, 0, __ATOMIC_SEQ_CST))
                (void) eventfd_write(cw->doorbell, 1);
}

/* Freezing is the daemon's decision, but only the library sees the items:
 * it keeps those of a frozen queue from starting.  That concerns this
 * client's own items only; nothing of other clients depends on it. */
void client_work_freeze(struct cmwq *c, const char *name, bool frozen, uint32_t seq) {
        struct cmwq_workqueue *wq;

        list_for_each_entry(wq, &c->workqueues, entry)
                if (strcmp(wq->name, name) == 0)
                        __atomic_store_n(&wq->cb_frozen, frozen, __ATOMIC_RELEASE);
        for (unsigned i = 0; i < CLIENT_NR_SYSTEM_QUEUES; i++)
                if (c->system[i].name && strcmp(c->system[i].name, name) == 0)
                        __atomic_store_n(&c->system[i].cb_frozen, frozen, __ATOMIC_RELEASE);
        if (frozen && seq)
                __atomic_store_n(&c->freeze_notice, seq, __ATOMIC_RELEASE);
        if (!frozen || seq) {
                /* Kicking the pools and answering the freeze take the work
                 * lock, which must not be taken under the connection's:
                 * the manager does it. */
                c->work_kick = true;
                pthread_cond_broadcast(&c->cond);
        }
}

/* Answers the daemon's last freeze notice once no callback of a frozen
 * queue runs: its freeze waits for that.  Work lock held: no thread starts
 * or ends an item meanwhile, and none starts one of a frozen queue. */
void work_freeze_answer_locked(struct client_work *cw) {
        uint32_t notice = __atomic_load_n(&cw->c->freeze_notice, __ATOMIC_ACQUIRE);

        if (notice == 0 || notice == cw->freeze_answered || !cw->shm)
                return;
        for (unsigned i = 0; i < cw->nr_slots; i++) {
                const struct work_thread *t = cw->threads[i];

                if (t && t->current && wq_frozen(t->current_wq))
                        return;         /* answered when it returns */
        }
        work_ring_push(cw, CMWQ_SHM_OP_FREEZE_ACK, notice & CMWQ_SHM_SEQ_MASK, NULL);
        cw->freeze_answered = notice;
}

int work_credits_entry(struct client_work *cw, struct cmwq_workqueue *wq) {
        int free_at = -1;

        if (wq->cb_credits != 0)
                return wq->cb_credits > 0 ? wq->cb_credits - 1 : -1;
        wq->cb_credits = -1;            /* none, unless one is found below */
        /* A bound queue's callbacks are its CPUs' grants' (cmwqd refuses). */
        if (!cw->has_credits || !wq_unbound(wq) || strlen(wq->name) >= CMWQ_SHM_CREDIT_NAME)
                return -1;
        for (unsigned k = 0; k < CMWQ_SHM_CREDIT_QUEUES; k++) {
                const char *name = cw->shm->credits[k].name;

                /* Its own, given back by a handle before, unless refused
                 * (the queue went, or was not unbound): then it is spent. */
                if (!cw->credits[k].wq && strcmp(name, wq->name) == 0) {
                        if (__atomic_load_n(&cw->shm->credits[k].refused, __ATOMIC_ACQUIRE))
                                continue;
                        free_at = (int) k;
                        break;
                }
                if (free_at < 0 && name[0] == 0)
                        free_at = (int) k;
        }
        if (free_at < 0)
                return -1;
        /* Written once, before the entry's first CREDITS. */
        strcpy(cw->shm->credits[free_at].name, wq->name);
        cw->credits[free_at].wq = wq;
        wq->cb_credits = free_at + 1;
        return free_at;
}

void client_workqueue_forget(struct cmwq_workqueue *wq) {
        struct client_work *cw = __atomic_load_n(&wq->c->work, __ATOMIC_ACQUIRE);
        int e;

        if (!cw || wq->cb_credits <= 0)
                return;
        pthread_mutex_lock(&cw->lock);
        e = wq->cb_credits - 1;
        if (!cw->dead)
                work_credits_tell(cw, e, 0, work_credits_held(cw, e));
        /* Kept, named, for the next handle of the queue. */
        cw->credits[e].wq = NULL;
        if (cw->credits[e].waiter) {
                /* Its waiter finds nothing to run and goes idle. */
                struct work_thread *t = cw->credits[e].waiter;

                pthread_mutex_lock(&t->lock);
                t->grant = true;
                pthread_cond_signal(&t->cond);
                pthread_mutex_unlock(&t->lock);
                work_futex_wake_all(&cw->shm->credits[e].granted);
        }
        wq->cb_credits = 0;
        pthread_mutex_unlock(&cw->lock);
}

uint32_t work_credits_granted(const struct client_work *cw, int e) {
        return __atomic_load_n(&cw->shm->credits[e].granted, __ATOMIC_ACQUIRE);
}

unsigned work_credits_held(const struct client_work *cw, int e) {
        return work_credits_granted(cw, e) - cw->credits[e].returned;
}

unsigned work_credits_limit(const struct client_work *cw, int e) {
        return __atomic_load_n(&cw->shm->credits[e].limit, __ATOMIC_ACQUIRE);
}

void work_credits_tell(struct client_work *cw, int e, unsigned want, unsigned back) {
        struct work_credits *cr = &cw->credits[e];

        if (want == cr->want && back == 0)
                return;
        cr->returned += back;
        cr->want = want;
        __atomic_store_n(&cw->shm->credits[e].returned, cr->returned, __ATOMIC_RELEASE);
        __atomic_store_n(&cw->shm->credits[e].want, want, __ATOMIC_RELEASE);
        /* An entry for every change: cmwqd may have read the words of an
         * earlier one already. */
        work_ring_push(cw, CMWQ_SHM_OP_CREDITS, (unsigned) e, NULL);
        cr->told_tail = cw->sq_tail;
}

/* The thread's CPU clock is read at most once per this much wall time. */
#define WORK_CPU_READ_PERIOD_USEC 1000u

/* @t took a new grant (t->seen_grant): it says when (proto/shm.h,
 * taken_ns), first, so that cmwqd can tell its way into the wait for the
 * grant from its work blocking; its callbacks' starts are reported
 * relative to now (run_cpu_ns), and nothing reported under the last grant
 * stands.  One CPU clock read per grant. */
void thread_report_grant(struct client_work *cw, struct work_thread *t) {
        struct cmwq_shm_slot *sl = &cw->shm->slots[t->slot];
        uint64_t taken_ns = now_nsec();

        __atomic_store_n(&sl->taken_ns, taken_ns, __ATOMIC_RELAXED);
        __atomic_store_n(&sl->taken_grant, t->seen_grant, __ATOMIC_RELEASE);
        t->grant_cpu_ns = thread_cpu_ns();
        t->cpu_read_usec = taken_ns / 1000;
        __atomic_store_n(&sl->run_cpu_ns, 0, __ATOMIC_RELAXED);
}

/* Tells cmwqd where the callback @t starts now counts its CPU time from:
 * the CPU time @t used under its grant so far.  The CPU-intensive
 * threshold is per callback, measured from its start (the kernel's
 * process_one_work() sets current_at), not from the grant, so that short
 * callbacks never add up to it however many of them one grant runs.
 * Reading the thread's CPU clock is a system call (about 1.4 us on a VM),
 * too dear for every callback: it is read again only once
 * WORK_CPU_READ_PERIOD_USEC have passed since the last read (a vDSO clock
 * read, tens of ns, decides).  The reported start is then at most 1 ms of
 * this thread's CPU time before the real one: a callback is marked at no
 * less than 9 ms of its own CPU time, and callbacks well short of 10 ms
 * never are.  The daemon reads it only when its threshold timer fires.
 * Outside the work lock: the slot is this thread's. */
void thread_report_run_start(struct client_work *cw, struct work_thread *t) {
        uint64_t now = mono_usec(), cpu;

        if (now - t->cpu_read_usec < WORK_CPU_READ_PERIOD_USEC)
                return;         /* the last report stands: at most 1 ms old */
        t->cpu_read_usec = now;
        cpu = thread_cpu_ns();
        __atomic_store_n(&cw->shm->slots[t->slot].run_cpu_ns, cpu > t->grant_cpu_ns ? cpu - t->grant_cpu_ns : 0,
                         __ATOMIC_RELAXED);
}

/* The daemon asked for this grant back: others wait for the CPU. */
bool thread_yield_asked(struct client_work *cw, struct work_thread *t) {
        return __atomic_load_n(&cw->shm->slots[t->slot].yield, __ATOMIC_ACQUIRE) == t->seen_grant;
}

int thread_register(struct client_work *cw, struct work_thread *t) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CallbackWorker reg = CMWQ__CALLBACK_WORKER__INIT;

        reg.tid = (uint32_t) t->tid;
        reg.slot = t->slot;
        reg.cpu = (uint32_t) t->pool->cpu;
        reg.has_highpri = true;
        reg.highpri = t->pool->highpri;
        req.body_case = CMWQ__REQUEST__BODY_CALLBACK_REGISTER;
        req.callback_register = &reg;
        return client_call_simple(cw->c, &req, "cannot register a callback worker thread");
}

int thread_unregister(struct client_work *cw, struct work_thread *t) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CallbackWorkerTid unreg = CMWQ__CALLBACK_WORKER_TID__INIT;

        unreg.tid = (uint32_t) t->tid;
        req.body_case = CMWQ__REQUEST__BODY_CALLBACK_UNREGISTER;
        req.callback_unregister = &unreg;
        return client_call_simple(cw->c, &req, "cannot unregister a callback worker thread");
}

/* Each CPU's work goes to a CPU cmwqd has a pool for: itself, or one of
 * those (a thread registered on another would be refused). */
static int work_map_cpus(struct client_work *cw, const Cmwq__CallbackAttached *a) {
        size_t n = 0;

        cw->cpu_map = calloc(cw->nr_cpus, sizeof(*cw->cpu_map));
        if (!cw->cpu_map)
                return client_error(-ENOMEM, "out of memory");
        for (size_t i = 0; i < a->n_cpus; i++)
                if (a->cpus[i] < cw->nr_cpus)
                        a->cpus[n++] = a->cpus[i];
        if (n == 0)
                return client_error(-EPROTO, "cmwqd has no pool on any CPU of this machine");
        for (unsigned cpu = 0; cpu < cw->nr_cpus; cpu++)
                cw->cpu_map[cpu] = a->cpus[cpu % n];
        for (size_t i = 0; i < n; i++)
                cw->cpu_map[a->cpus[i]] = a->cpus[i];
        return 0;
}

/* Asks cmwqd for the memory it shares with us and its doorbell
 * (proto/shm.h), passed with its answer, and maps it. */
int work_attach(struct client_work *cw) {
        _cleanup_(closep) int memfd = -1, doorbell = -1;
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CallbackAttach attach = CMWQ__CALLBACK_ATTACH__INIT;
        Cmwq__Response *resp = NULL;
        struct cmwq_shm *shm;
        struct stat st;
        int fds[2], n, r;

        attach.layout_version = CMWQ_SHM_VERSION;
        attach.has_credits = true;
        attach.credits = true;
        attach.has_grant_taken = true;
        attach.grant_taken = true;
        req.body_case = CMWQ__REQUEST__BODY_CALLBACK_ATTACH;
        req.callback_attach = &attach;
        r = client_call(cw->c, &req, &resp);
        if (r < 0)
                return r;
        n = client_take_fds(cw->c, fds, 2);
        if (n > 0)
                memfd = fds[0];
        if (n > 1)
                doorbell = fds[1];
        if (resp->error != CMWQ__ERROR__OK)
                r = client_response_error(resp, "cmwqd refused to share memory");
        else if (resp->body_case != CMWQ__RESPONSE__BODY_CALLBACK_ATTACHED || n != 2)
                r = client_error(-EPROTO, "cmwqd answered without the shared memory");
        else
                r = work_map_cpus(cw, resp->callback_attached);
        cmwq__response__free_unpacked(resp, NULL);
        if (r < 0)
                return r;

        /* A cmwqd older than credits makes it without them. */
        if (fstat(memfd, &st) < 0 ||
            (st.st_size != (off_t) sizeof(*shm) && st.st_size != (off_t) offsetof(struct cmwq_shm, credits)))
                return client_error(-EPROTO, "the shared memory from cmwqd has not the size of this library's layout");
        shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
        if (shm == MAP_FAILED)
                return client_error(-errno, "cannot map the memory shared with cmwqd: %s", strerror(errno));
        if (shm->magic != CMWQ_SHM_MAGIC || shm->version != CMWQ_SHM_VERSION) {
                munmap(shm, sizeof(*shm));
                return client_error(-EPROTO, "the shared memory from cmwqd has another layout");
        }
        cw->shm = shm;
        cw->has_credits = (shm->features & CMWQ_SHM_FEATURE_CREDITS) && st.st_size == (off_t) sizeof(*shm);
        cw->can_move = shm->features & CMWQ_SHM_FEATURE_MOVE;
        cw->doorbell = TAKE_FD(doorbell);
        return 0;
}
