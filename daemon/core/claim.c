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
 * most what it holds; credits freed go first to the exec items waiting on
 * the share, in order, then to the claims waiting, in the order they began
 * to wait.
 *
 * When the share's claimants (the claims, and the exec items counted as one)
 * want more than max_active, each claim gets a limit, its fair part (water
 * filling: nobody is given more than it wants, the rest is split evenly),
 * and gives back what it holds beyond it as its callbacks return.  A limit
 * of 0 (more claimants than max_active, e.g. an ordered queue) means that
 * a claim gives back every credit as soon as its callback returns, and
 * queues up again: the credit goes round, one claimant after another.
 *
 * A claim is its client's word, and believed only as far as it concerns
 * that client: a client that says it wants more than it uses holds credits
 * others could use, but never beyond its fair part once others ask; one that
 * runs more callbacks than it holds uses threads of its own, as it could
 * without cmwq.
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
        unsigned want;
        unsigned held;
        unsigned limit;
        core_claim_changed_fn changed;
        void *userdata;
};

static struct pwq_share *claim_share(const struct core_claim *cl) {
        return workqueue_share_of(&cl->wq->pwqs[0], cl->uid);
}

/* What @cl should hold now: what it wants, up to its limit, and a credit
 * in turn even when its fair part rounds to none. */
static unsigned claim_target(const struct core_claim *cl) {
        unsigned t = cl->want < cl->limit ? cl->want : cl->limit;

        return t == 0 && cl->want > 0 ? 1 : t;
}

/* The active exec items of @share, and how many more of them wait: all the
 * exec items want, counted up to max_active. */
static unsigned share_exec_want(const struct workqueue *wq, const struct pwq_share *share, unsigned claims_held) {
        unsigned want = share->nr_active > claims_held ? share->nr_active - claims_held : 0;
        const struct list_head *pos;

        for (pos = share->inactive.next; pos != &share->inactive && want < wq->max_active; pos = pos->next)
                want++;
        return want;
}

/* Sets the limit of every claim on @share: max_active while the claimants
 * want no more than it, their fair parts otherwise. */
static void claims_rebalance(struct workqueue *wq, struct pwq_share *share) {
        unsigned max = wq->max_active, held = 0, total, left, n = 0;
        unsigned wants[CORE_CLAIMS_MAX + 1];
        struct core_claim *cl;

        list_for_each_entry(cl, &wq->claims, wq_entry)
                if (claim_share(cl) == share)
                        held += cl->held;
        wants[n] = share_exec_want(wq, share, held);
        total = wants[n++];
        list_for_each_entry(cl, &wq->claims, wq_entry)
                if (claim_share(cl) == share && n < CORE_CLAIMS_MAX + 1) {
                        wants[n++] = cl->want;
                        total += cl->want;
                }
        if (total <= max) {
                list_for_each_entry(cl, &wq->claims, wq_entry)
                        if (claim_share(cl) == share)
                                cl->limit = max;
                return;
        }

        /* Water filling: the smallest wants are met whole while they are
         * below an even split of what is left; the rest share it evenly. */
        left = max;
        for (unsigned k = 0; k < n; k++) {
                unsigned min_at = k;

                for (unsigned j = k + 1; j < n; j++)
                        if (wants[j] < wants[min_at])
                                min_at = j;
                unsigned w = wants[min_at];
                wants[min_at] = wants[k];
                wants[k] = w;
                if (w > left / (n - k)) {
                        left /= n - k;
                        break;
                }
                left -= w;
        }
        list_for_each_entry(cl, &wq->claims, wq_entry)
                if (claim_share(cl) == share)
                        cl->limit = left;
}

static unsigned share_room(const struct workqueue *wq, const struct pwq_share *share) {
        if (wq->frozen || share->nr_active >= wq->max_active)
                return 0;
        return wq->max_active - share->nr_active;
}

static void claim_take(struct core_claim *cl, struct pwq_share *share, unsigned n) {
        cl->held += n;
        share->nr_active += n;
        cl->wq->pwqs[0].nr_active += n;
}

/* Whether another claim of @share waits before @cl: it goes first. */
static bool claim_waits_behind(const struct core_claim *cl, struct pwq_share *share) {
        const struct core_claim *w;

        list_for_each_entry(w, &cl->wq->claim_waiters, wait_entry) {
                if (w == cl)
                        return false;
                if (claim_share(w) == share)
                        return true;
        }
        return false;
}

static void claim_wait(struct core_claim *cl) {
        if (!list_linked(&cl->wait_entry))
                list_add_tail(&cl->wait_entry, &cl->wq->claim_waiters);
}

/* Hands the room @share has to the claims waiting on it, in order, once
 * its exec items have had theirs; tells every claim of @share whose credits
 * or limit changed.  @also: a claim to tell even if nothing of it changed
 * here (NULL: none). */
static void claims_settle(struct workqueue *wq, struct pwq_share *share, struct core_claim *also) {
        struct core_claim *cl, *n;
        unsigned before_held[CORE_CLAIMS_MAX], before_limit[CORE_CLAIMS_MAX], k = 0;

        list_for_each_entry(cl, &wq->claims, wq_entry)
                if (k < CORE_CLAIMS_MAX) {
                        before_held[k] = cl->held;
                        before_limit[k++] = cl->limit;
                }

        claims_rebalance(wq, share);
        /* A raised limit: those below it wait for more, after those waiting already. */
        list_for_each_entry(cl, &wq->claims, wq_entry)
                if (claim_share(cl) == share && cl->held < claim_target(cl))
                        claim_wait(cl);
        if (list_empty(&share->inactive))
                list_for_each_entry_safe(cl, n, &wq->claim_waiters, wait_entry) {
                        unsigned room = share_room(wq, share), target = claim_target(cl);

                        if (claim_share(cl) != share)
                                continue;
                        if (room == 0)
                                break;
                        if (cl->held < target)
                                claim_take(cl, share, target - cl->held < room ? target - cl->held : room);
                        if (cl->held >= target)
                                list_del_init(&cl->wait_entry);
                }

        k = 0;
        list_for_each_entry_safe(cl, n, &wq->claims, wq_entry) {
                bool moved = k >= CORE_CLAIMS_MAX || before_held[k] != cl->held || before_limit[k] != cl->limit;

                k++;
                if ((moved || cl == also) && cl->changed)
                        cl->changed(cl, cl->userdata);
        }
}

int core_claim_open(struct core *c, const struct core_caller *caller, const char *name, core_claim_changed_fn changed,
                    void *userdata, struct core_claim **ret, struct core_error *e) {
        struct workqueue *wq = NULL;
        struct core_claim *cl;
        unsigned n = 0;
        int r;

        r = core_workqueue_lookup(c, caller, name, &wq, e);
        if (r < 0)
                return r;
        if (!(wq->flags & WQ_UNBOUND))
                return core_error_set(e, -EINVAL, "workqueue '%s' is not unbound", name);
        list_for_each_entry(cl, &wq->claims, wq_entry)
                n++;
        if (n >= CORE_CLAIMS_MAX)
                return core_error_set(e, -EUSERS, "workqueue '%s' has %u clients running callbacks already", name,
                                      n);
        if (!workqueue_share_of(&wq->pwqs[0], caller->uid))
                return core_error_set(e, -ENOMEM, "out of memory");
        cl = calloc(1, sizeof(*cl));
        if (!cl)
                return core_error_set(e, -ENOMEM, "out of memory");
        cl->wq = wq;
        cl->uid = caller->uid;
        cl->limit = wq->max_active;
        cl->changed = changed;
        cl->userdata = userdata;
        list_init(&cl->wait_entry);
        list_add_tail(&cl->wq_entry, &wq->claims);
        *ret = cl;
        return 0;
}

/* Gives @n of @cl's credits back (no more than it holds). */
static void claim_put(struct core_claim *cl, struct pwq_share *share, unsigned n) {
        if (n > cl->held)
                n = cl->held;
        cl->held -= n;
        share->nr_active -= n;
        cl->wq->pwqs[0].nr_active -= n;
        if (n > 0)
                workqueue_share_activate(&cl->wq->pwqs[0], share);
}

void core_claim_update(struct core_claim *cl, unsigned want, unsigned returned) {
        struct workqueue *wq = cl->wq;
        struct pwq_share *share;
        unsigned target, room;

        if (!wq)
                return;
        share = claim_share(cl);
        claim_put(cl, share, returned);
        cl->want = want < wq->max_active ? want : wq->max_active;
        claims_rebalance(wq, share);
        target = claim_target(cl);
        room = list_empty(&share->inactive) ? share_room(wq, share) : 0;
        if (cl->held < target && !claim_waits_behind(cl, share))
                claim_take(cl, share, target - cl->held < room ? target - cl->held : room);
        if (cl->held < target)
                claim_wait(cl);
        else
                list_del_init(&cl->wait_entry);
        claims_settle(wq, share, cl);
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
                cl->want = 0;
                claim_put(cl, share, cl->held);
                claims_settle(wq, share, NULL);
        }
        free(cl);
}

/* Room came back on @share (an item finished, the queue was thawed or its
 * max_active raised), or exec items began to wait on it: the claims hear
 * of it once the exec items have taken theirs.  Cheap without claims. */
void workqueue_claims_changed(struct pwq *pwq, struct pwq_share *share) {
        if (!list_empty(&pwq->wq->claims))
                claims_settle(pwq->wq, share, NULL);
}

void workqueue_claims_changed_all(struct workqueue *wq) {
        struct core_claim *cl;

        /* Each share once would do; a share settled twice changes nothing the second time. */
        list_for_each_entry(cl, &wq->claims, wq_entry)
                claims_settle(wq, claim_share(cl), NULL);
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
