/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Claims: callback work's part of an unbound queue's max_active.
 *
 * The kernel (since 6.9) holds an unbound queue's max_active across every
 * CPU; cmwqd holds it across every client.  Exec items count on their pwq
 * share (core/workqueue.c); a libcmwq-client process that runs callbacks of
 * the queue holds a claim on the same share, with credits: each one is room
 * for one callback at once, counted in the share's nr_active as an active
 * exec item is.  The process asks for what it could use (want) and runs at
 * most what it holds.
 *
 * When the share's claimants (the claims, and the exec items counted as one)
 * want more than max_active, each gets a limit, its fair part (water
 * filling: nobody is given more than it wants, the rest is split evenly),
 * and a claim gives back what it holds beyond it as its callbacks return.
 * Freed room goes to the exec items waiting, in order, while they are below
 * their fair part, and to the claims waiting, in the order they began to
 * wait.  A limit of 0 (more claimants than max_active, e.g. an ordered
 * queue) means that a claim gives back every credit as soon as its callback
 * returns, and queues up again: the credit goes round.
 *
 * A claim is its client's word, and believed only as far as it concerns
 * that client: a client that says it wants more than it uses holds credits
 * others of its uid could use (on a built-in queue each uid has a share of
 * its own), up to max_active while nobody else asks, and keeps what it took
 * if it does not give back; one that runs more callbacks than it holds
 * uses threads of its own, as it could without cmwq.
 */
#include <errno.h>
#include <stdlib.h>

#include "base/log.h"
#include "core/core-internal.h"

struct core_claim {
        struct workqueue *wq;           /* NULL once the queue is gone */
        uid_t uid;
        struct list_head wq_entry;      /* wq->claims */
        struct list_head wait_entry;    /* wq->claim_waiters while held < its target */
        unsigned want;                  /* as the client said: bounded when used (claim_want()) */
        unsigned held;
        unsigned limit;
        /* As last told (changed()): it is told again when either moves. */
        unsigned told_held;
        unsigned told_limit;
        core_claim_changed_fn changed;
        core_claim_want_fn want_now;
        void *userdata;
};

static struct pwq_share *claim_share(const struct core_claim *cl) {
        /* Not NULL: it was made when the claim was opened, and the uid's
         * usage lives as long as its connection, which outlives the claim. */
        return workqueue_share_of(&cl->wq->pwqs[0], cl->uid);
}

/* What @cl wants, within its queue's max_active as it is now: a raised
 * max_active lets a claim that wanted more than the old one have it
 * without asking again. */
static unsigned claim_want(const struct core_claim *cl) {
        return cl->want < cl->wq->max_active ? cl->want : cl->wq->max_active;
}

/* What @cl should hold now: what it wants, up to its limit, and a credit
 * in turn even when its fair part rounds to none. */
static unsigned claim_target(const struct core_claim *cl) {
        unsigned want = claim_want(cl), t = want < cl->limit ? want : cl->limit;

        return t == 0 && want > 0 ? 1 : t;
}

/* All the exec items of @share want: those active and those waiting,
 * counted up to max_active. */
static unsigned share_exec_want(const struct workqueue *wq, const struct pwq_share *share) {
        unsigned want = share->nr_active - share->claims_held;
        const struct list_head *pos;

        for (pos = share->inactive.next; pos != &share->inactive && want < wq->max_active; pos = pos->next)
                want++;
        return want;
}

static int cmp_unsigned(const void *a, const void *b) {
        unsigned x = *(const unsigned *) a, y = *(const unsigned *) b;

        return x < y ? -1 : x > y;
}

/* Sets the limit of every claim on @share, and its exec items' part: all of
 * max_active while the claimants want no more than it, their fair parts
 * otherwise (the remainder of the even split to the first claims that
 * want more, so that no credit is left unused). */
static void claims_rebalance(struct workqueue *wq, struct pwq_share *share) {
        unsigned max = wq->max_active, total, left, level, extra, n = 0, k;
        unsigned wants[CORE_CLAIMS_MAX + 1];
        struct core_claim *cl;

        wants[n] = share_exec_want(wq, share);
        total = wants[n++];
        list_for_each_entry(cl, &wq->claims, wq_entry)
                if (claim_share(cl) == share && n < CORE_CLAIMS_MAX + 1) {
                        wants[n++] = claim_want(cl);
                        total += wants[n - 1];
                }
        if (total <= max) {
                list_for_each_entry(cl, &wq->claims, wq_entry)
                        if (claim_share(cl) == share)
                                cl->limit = max;
                share->exec_limit = 0;
                return;
        }

        /* Water filling: the smallest wants are met whole while they are
         * below an even split of what is left; the rest share it evenly. */
        qsort(wants, n, sizeof(wants[0]), cmp_unsigned);
        left = max;
        for (k = 0; k < n && wants[k] <= left / (n - k); k++)
                left -= wants[k];
        level = left / (n - k);
        extra = left % (n - k);
        list_for_each_entry(cl, &wq->claims, wq_entry)
                if (claim_share(cl) == share) {
                        cl->limit = level;
                        if (claim_want(cl) > level && extra > 0) {
                                cl->limit++;
                                extra--;
                        }
                }
        /* 0 would mean "no limit" (struct pwq_share). */
        share->exec_limit = level > 0 ? level : 1;
}

static unsigned share_room(const struct workqueue *wq, const struct pwq_share *share) {
        if (wq->frozen || share->nr_active >= wq->max_active)
                return 0;
        return wq->max_active - share->nr_active;
}

static void claim_take(struct core_claim *cl, struct pwq_share *share, unsigned n) {
        cl->held += n;
        share->nr_active += n;
        share->claims_held += n;
        cl->wq->pwqs[0].nr_active += n;
}

/* Gives @n of @cl's credits back (no more than it holds). */
static void claim_put(struct core_claim *cl, struct pwq_share *share, unsigned n) {
        if (n > cl->held)
                n = cl->held;
        cl->held -= n;
        share->nr_active -= n;
        share->claims_held -= n;
        cl->wq->pwqs[0].nr_active -= n;
}

static void claim_wait(struct core_claim *cl) {
        if (!list_linked(&cl->wait_entry))
                list_add_tail(&cl->wait_entry, &cl->wq->claim_waiters);
}

/* Rebalances @share, hands its room to the exec items and the claims
 * waiting on it, and tells every claim of @share whose credits or limit
 * moved since it was last told. */
static void claims_settle_once(struct workqueue *wq, struct pwq_share *share) {
        struct core_claim *cl, *n;
        bool waiting = false;

        /* What the waiting want now: a client may have wanted less since
         * its last word was read. */
        list_for_each_entry(cl, &wq->claim_waiters, wait_entry)
                if (cl->want_now && claim_share(cl) == share) {
                        cl->want = cl->want_now(cl, cl->userdata);
                }
        claims_rebalance(wq, share);
        /* A raised limit: those below it wait for more, after those waiting already. */
        list_for_each_entry(cl, &wq->claims, wq_entry)
                if (claim_share(cl) == share && cl->held < claim_target(cl))
                        claim_wait(cl);
        /* The exec items below their part first, then the claims. */
        workqueue_share_activate(&wq->pwqs[0], share);
        list_for_each_entry_safe(cl, n, &wq->claim_waiters, wait_entry) {
                unsigned room = share_room(wq, share), target = claim_target(cl);

                if (claim_share(cl) != share)
                        continue;
                if (cl->held < target && room > 0)
                        claim_take(cl, share, target - cl->held < room ? target - cl->held : room);
                if (cl->held >= target)
                        list_del_init(&cl->wait_entry);
                else
                        waiting = true;
        }
        /* With no claim left waiting, the exec items have no part to keep to. */
        if (!waiting && share->exec_limit) {
                share->exec_limit = 0;
                workqueue_share_activate(&wq->pwqs[0], share);
        }

        list_for_each_entry_safe(cl, n, &wq->claims, wq_entry)
                if (claim_share(cl) == share && (cl->held != cl->told_held || cl->limit != cl->told_limit)) {
                        cl->told_held = cl->held;
                        cl->told_limit = cl->limit;
                        if (cl->changed)
                                cl->changed(cl, cl->userdata);
                }
}

/* Starting an exec item may end one at once (a process that cannot be
 * made), which settles again: that call only asks for another round, so
 * that no list is changed under a walk. */
static void claims_settle(struct workqueue *wq, struct pwq_share *share) {
        if (wq->claims_settling) {
                wq->claims_resettle = true;
                return;
        }
        wq->claims_settling = true;
        claims_settle_once(wq, share);
        while (wq->claims_resettle) {
                struct core_claim *cl;

                /* The nested call may have been about another uid's share. */
                wq->claims_resettle = false;
                list_for_each_entry(cl, &wq->claims, wq_entry)
                        claims_settle_once(wq, claim_share(cl));
        }
        wq->claims_settling = false;
}

int core_claim_open(struct core *c, const struct core_caller *caller, const char *name,
                    core_claim_changed_fn changed, core_claim_want_fn want_now, void *userdata,
                    struct core_claim **ret, struct core_error *e) {
        struct workqueue *wq = NULL;
        struct pwq_share *share;
        struct core_claim *cl;
        unsigned n = 0;
        int r;

        r = core_workqueue_lookup(c, caller, name, &wq, e);
        if (r < 0)
                return r;
        if (!(wq->flags & WQ_UNBOUND))
                return core_error_set(e, -EINVAL, "workqueue '%s' is not unbound", name);
        share = workqueue_share_of(&wq->pwqs[0], caller->uid);
        if (!share)
                return core_error_set(e, -ENOMEM, "out of memory");
        /* Per share: one uid's clients never crowd out another's. */
        list_for_each_entry(cl, &wq->claims, wq_entry)
                if (claim_share(cl) == share)
                        n++;
        if (n >= CORE_CLAIMS_MAX)
                return core_error_set(e, -EUSERS, "workqueue '%s' has %u clients of uid %u running callbacks already",
                                      name, n, (unsigned) caller->uid);
        cl = calloc(1, sizeof(*cl));
        if (!cl)
                return core_error_set(e, -ENOMEM, "out of memory");
        cl->wq = wq;
        cl->uid = caller->uid;
        cl->limit = cl->told_limit = wq->max_active;
        cl->changed = changed;
        cl->want_now = want_now;
        cl->userdata = userdata;
        list_init(&cl->wait_entry);
        list_add_tail(&cl->wq_entry, &wq->claims);
        *ret = cl;
        return 0;
}

void core_claim_update(struct core_claim *cl, unsigned want, unsigned returned) {
        struct workqueue *wq = cl->wq;
        struct pwq_share *share;

        if (!wq)
                return;
        share = claim_share(cl);
        claim_put(cl, share, returned);
        cl->want = want;
        /* It asks again: behind those waiting already. */
        if (cl->held < claim_want(cl))
                claim_wait(cl);
        else
                list_del_init(&cl->wait_entry);
        claims_settle(wq, share);
}

unsigned core_claim_held(const struct core_claim *cl) {
        return cl->held;
}

unsigned core_claim_limit(const struct core_claim *cl) {
        return cl->wq ? cl->limit : 0;
}

bool core_claim_gone(const struct core_claim *cl) {
        return !cl->wq;
}

bool core_claim_same_queue(const struct core_claim *a, const struct core_claim *b) {
        return a->wq && a->wq == b->wq;
}

void core_claim_close(struct core_claim *cl) {
        struct workqueue *wq;
        struct pwq_share *share;

        if (!cl)
                return;
        wq = cl->wq;
        if (wq) {
                share = claim_share(cl);
                list_del_init(&cl->wait_entry);
                list_del_init(&cl->wq_entry);
                claim_put(cl, share, cl->held);
                claims_settle(wq, share);
        }
        free(cl);
}

/* Room came back on @share (an item finished, the queue was thawed or its
 * max_active raised), or exec items began to wait on it: the claims hear
 * of it.  Cheap without claims. */
void workqueue_claims_changed(struct pwq *pwq, struct pwq_share *share) {
        if (!list_empty(&pwq->wq->claims))
                claims_settle(pwq->wq, share);
}

void workqueue_claims_changed_all(struct workqueue *wq) {
        struct core_claim *cl;

        /* Each share once would do; a share settled twice changes nothing the second time. */
        list_for_each_entry(cl, &wq->claims, wq_entry)
                claims_settle(wq, claim_share(cl));
}

/* The queue goes: its claims stay with their clients, empty, gone. */
void workqueue_claims_detach(struct workqueue *wq) {
        while (!list_empty(&wq->claims)) {
                struct core_claim *cl = list_first_entry(&wq->claims, struct core_claim, wq_entry);

                list_del_init(&cl->wq_entry);
                list_del_init(&cl->wait_entry);
                cl->wq = NULL;
                cl->held = 0;
                if (cl->changed)
                        cl->changed(cl, cl->userdata);
        }
}
