/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Workqueues: the front ends that carry attributes (flags, max_active) and
 * feed items to the pools, with the kernel's flush, drain, freeze and
 * max_active rules.  Each queue has one pwq per pool it uses; a pwq lets at
 * most max_active of the queue's items be active (pending on the pool or
 * running) at once, the rest wait in order on its inactive list.
 *
 * The built-in queues are shared by every user, and there max_active is
 * each user's: a pwq counts each uid's items against a share of that uid's
 * own (struct pwq_share), so one user's 512 sleeping items on
 * system_unbound leave another user's item free to start at once, while a
 * user alone sees the kernel's rules.  That gives no user more than it has
 * anyway: a queue of its own has a max_active of its own.
 */
#include <ctype.h>
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/core-internal.h"
#include "util.h"

/*
 * Workqueue names are per owner: each uid has a namespace of its own, so
 * that nobody can take a name another user wants, and nobody learns from a
 * refused create which names others use.  The built-in queues' names are
 * reserved in every namespace.  Root (the privileged caller) finds its own
 * queues, the built-ins, and any user's queue by its bare name when only
 * one user has that name; "UID/NAME" names one exactly ('/' is never part
 * of a name).
 */
struct workqueue *core_find_workqueue(struct core *c, uid_t owner, const char *name) {
        struct workqueue *wq = NULL;

        list_for_each_entry(wq, &c->workqueues, entry)
                if (wq->owner == owner && strcmp(wq->name, name) == 0)
                        return wq;
        return NULL;
}

static struct workqueue *find_builtin(struct core *c, const char *name) {
        struct workqueue *wq = NULL;

        list_for_each_entry(wq, &c->workqueues, entry)
                if (wq->builtin && strcmp(wq->name, name) == 0)
                        return wq;
        return NULL;
}

bool workqueue_visible_to(const struct workqueue *wq, const struct core_caller *caller) {
        return wq->builtin || wq->owner == caller->uid || caller_is_privileged(caller);
}

void core_workqueue_info(const struct workqueue *wq, struct core_workqueue_info *ret) {
        *ret = (struct core_workqueue_info) {
                .name = wq->name,
                .flags = wq->flags,
                .max_active = wq->max_active,
                .owner = wq->owner,
                .builtin = wq->builtin,
                .frozen = wq->frozen,
                .draining = wq->draining,
                .on_interrupt = wq->on_interrupt,
                .connection_owned = wq->connection_owned,
                .owner_gone = wq->connection_owned && !wq->owner_conn,
                .owner_pid = wq->owner_pid,
                .pending = workqueue_nr_pending(wq),
                .running = workqueue_nr_running(wq),
                .in_flight = wq->nr_items,
                .stats = wq->stats,
        };
}

void core_workqueue_name_for(const struct core_workqueue_info *wq, const struct core_caller *caller, char *buf,
                             size_t size) {
        if (wq->builtin || (caller && wq->owner == caller->uid))
                snprintf(buf, size, "%s", wq->name);
        else
                snprintf(buf, size, "%u/%s", (unsigned) wq->owner, wq->name);
}

size_t core_nr_workqueues(const struct core *c) {
        return list_count(&c->workqueues);
}

int core_for_each_workqueue(struct core *c, const struct core_caller *caller,
                            int (*fn)(struct workqueue *wq, const struct core_workqueue_info *info, void *userdata),
                            void *userdata) {
        struct workqueue *wq;

        list_for_each_entry(wq, &c->workqueues, entry) {
                struct core_workqueue_info info;
                int r;

                if (caller && !workqueue_visible_to(wq, caller))
                        continue;
                core_workqueue_info(wq, &info);
                r = fn(wq, &info, userdata);
                if (r != 0)
                        return r;
        }
        return 0;
}

static bool workqueue_owned_by(const struct workqueue *wq, const struct core_caller *caller) {
        return caller_is_privileged(caller) || (!wq->builtin && wq->owner == caller->uid);
}

/* "UID/NAME": true and the parts when @name has that form. */
static bool split_qualified(const char *name, uid_t *ret_uid, const char **ret_name) {
        const char *slash = strchr(name, '/');
        unsigned long v;
        char *end;

        if (!slash || slash == name || !isdigit((unsigned char) name[0]))
                return false;
        errno = 0;
        v = strtoul(name, &end, 10);
        if (errno || end != slash || v >= (uid_t) -1)
                return false;
        *ret_uid = (uid_t) v;
        *ret_name = slash + 1;
        return true;
}

/* Finds @name for @caller (see above): -ENOENT also for queues the caller
 * may not see, so that another user's queue names do not leak. */
int core_workqueue_lookup(struct core *c, const struct core_caller *caller, const char *name,
                          struct workqueue **ret, struct core_error *e) {
        bool privileged = caller_is_privileged(caller);
        struct workqueue *wq = NULL, *w;
        const char *bare;
        uid_t owner;

        if (split_qualified(name, &owner, &bare)) {
                if (privileged || owner == caller->uid)
                        wq = core_find_workqueue(c, owner, bare);
        } else {
                wq = core_find_workqueue(c, caller->uid, name);
                if (!wq)
                        wq = find_builtin(c, name);
                if (!wq && privileged) {
                        unsigned n = 0;

                        list_for_each_entry(w, &c->workqueues, entry)
                                if (strcmp(w->name, name) == 0) {
                                        wq = w;
                                        n++;
                                }
                        if (n > 1)
                                return core_error_set(e, -EINVAL,
                                                      "several users have a workqueue named '%s'; name one as UID/%s",
                                                      name, name);
                }
        }
        if (!wq)
                return core_error_set(e, -ENOENT, "no workqueue named '%s'", name);
        *ret = wq;
        return 0;
}

static int workqueue_lookup_owned(struct core *c, const struct core_caller *caller, const char *name,
                                  struct workqueue **ret, struct core_error *e) {
        struct workqueue *wq = NULL;
        int r;

        r = core_workqueue_lookup(c, caller, name, &wq, e);
        if (r < 0)
                return r;
        if (!workqueue_owned_by(wq, caller))
                return core_error_set(e, -EPERM, "workqueue '%s' belongs to %s", name,
                                      wq->builtin ? "the system" : "another user");
        *ret = wq;
        return 0;
}

static int workqueue_create(struct core *c, const struct core_caller *caller, const char *name,
                            unsigned flags, unsigned max_active, struct core_conn_owner *owner,
                            struct core_error *e) {
        struct workqueue *wq = NULL;
        struct user_usage *u;
        int r;

        r = core_store_refuse_change(c, e);
        if (r < 0)
                return r;
        if (!cmwq_workqueue_name_valid(name))
                return core_error_set(e, -EINVAL,
                                      "invalid workqueue name '%.64s': 1-%u characters of A-Z a-z 0-9 _ - . : @",
                                      name, CMWQ_WORKQUEUE_NAME_MAX);
        if (flags & ~WQ_FLAGS_ALL)
                return core_error_set(e, -EINVAL, "unknown workqueue flags 0x%x", flags & ~WQ_FLAGS_ALL);
        if (max_active > WQ_MAX_ACTIVE)
                return core_error_set(e, -EINVAL, "max_active %u is above the limit of %u", max_active,
                                      WQ_MAX_ACTIVE);
        if ((flags & WQ_ORDERED) && max_active > 1)
                return core_error_set(e, -EINVAL, "an ordered workqueue runs one item at a time (max_active 1)");
        if (find_builtin(c, name))
                return core_error_set(e, -EEXIST, "workqueue '%s' already exists (built in)", name);
        wq = core_find_workqueue(c, caller->uid, name);
        if (wq && wq->connection_owned && !wq->owner_conn)
                return core_error_set(e, -EEXIST,
                                      "workqueue '%s' still exists: the connection of pid %d that made it has "
                                      "ended, and it goes once its %" PRIu64 " items have run",
                                      name, (int) wq->owner_pid, wq->nr_items);
        if (wq)
                return core_error_set(e, -EEXIST, "workqueue '%s' already exists", name);

        /* ORDERED is unbound with max_active 1, as alloc_ordered_workqueue(). */
        if (flags & WQ_ORDERED) {
                flags |= WQ_UNBOUND;
                max_active = 1;
        }
        if (max_active == 0)
                max_active = WQ_DFL_ACTIVE;

        u = user_usage_get(&c->users, caller->uid);
        if (!u)
                return core_error_set(e, -ENOMEM, "out of memory");
        if (!caller_is_privileged(caller) && u->nr_workqueues >= c->config.limits.value[LIMIT_WORKQUEUES]) {
                user_usage_put(&c->users, u);
                return limit_refuse(&c->config.limits, LIMIT_WORKQUEUES, caller->uid, e);
        }

        wq = calloc(1, sizeof(*wq));
        if (!wq) {
                user_usage_put(&c->users, u);
                return core_error_set(e, -ENOMEM, "out of memory");
        }
        wq->core = c;
        wq->flags = flags;
        wq->max_active = max_active;
        wq->owner = caller->uid;
        list_init(&wq->inflight);
        list_init(&wq->items);
        list_init(&wq->flushers);
        list_init(&wq->drainers);
        list_init(&wq->callback_holds);
        list_init(&wq->claims);
        list_init(&wq->claim_waiters);
        list_init(&wq->owner_entry);
        if (owner) {
                wq->connection_owned = true;
                wq->owner_pid = owner->pid;
                wq->owner_conn = owner;
                list_add_tail(&wq->owner_entry, &owner->workqueues);
        }
        wq->name = strdup(name);
        wq->n_pwqs = (flags & WQ_UNBOUND) ? 1 : c->nr_cpus;
        wq->pwqs = calloc(wq->n_pwqs, sizeof(struct pwq));
        if (!wq->name || !wq->pwqs) {
                list_del_init(&wq->owner_entry);
                free(wq->name);
                free(wq->pwqs);
                free(wq);
                user_usage_put(&c->users, u);
                return core_error_set(e, -ENOMEM, "out of memory");
        }
        for (size_t n = 0; n < wq->n_pwqs; n++) {
                struct pwq *pwq = &wq->pwqs[n];

                pwq->wq = wq;
                pwq->pool = core_pool_for(c, (flags & WQ_UNBOUND) ? -1 : (int) n, flags & WQ_HIGHPRI);
                list_init(&pwq->inactive);
                list_init(&pwq->shared.inactive);
        }
        list_add_tail(&wq->entry, &c->workqueues);
        u->nr_workqueues++;
        core_store_workqueue(wq);
        if (owner)
                log_queue(LOG_DEBUG, wq,
                          "Created workqueue %s (flags 0x%x, max_active %u, owner %u, for the connection of pid %d)",
                          name, flags, max_active, (unsigned) caller->uid, (int) owner->pid);
        else
                log_queue(LOG_DEBUG, wq, "Created workqueue %s (flags 0x%x, max_active %u, owner %u)", name, flags,
                          max_active, (unsigned) caller->uid);
        workqueue_rescuer_replenish(wq);
        core_notify_workqueue_added(wq);
        return 0;
}

int core_workqueue_create(struct core *c, const struct core_caller *caller, const char *name,
                          unsigned flags, unsigned max_active, struct core_error *e) {
        return workqueue_create(c, caller, name, flags, max_active, NULL, e);
}

int core_workqueue_create_owned(struct core *c, const struct core_caller *caller, const char *name,
                                unsigned flags, unsigned max_active, struct core_conn_owner *owner,
                                struct core_error *e) {
        return workqueue_create(c, caller, name, flags, max_active, owner, e);
}

void core_conn_owner_init(struct core_conn_owner *o, pid_t pid) {
        list_init(&o->workqueues);
        o->pid = pid;
}

void core_conn_owner_release(struct core_conn_owner *o) {
        while (!list_empty(&o->workqueues)) {
                struct workqueue *wq = list_first_entry(&o->workqueues, struct workqueue, owner_entry);

                list_del_init(&wq->owner_entry);
                wq->owner_conn = NULL;
                workqueue_orphan(wq);
        }
}

/* Nobody waits for this destroy: it ends when the last item has, as
 * core_workqueue_destroy() does for a caller that went away. */
void workqueue_orphan(struct workqueue *wq) {
        if (wq->destroying)
                return;         /* destroyed explicitly already; that goes on */
        if (wq->nr_items > 0)
                log_queue(LOG_INFO, wq,
                          "The connection of pid %d has ended: destroying its workqueue %s once its %" PRIu64
                          " items have run", (int) wq->owner_pid, wq->name, wq->nr_items);
        else
                log_queue(LOG_DEBUG, wq, "The connection of pid %d has ended: destroying its workqueue %s",
                          (int) wq->owner_pid, wq->name);
        wq->draining = true;
        wq->destroying = true;
        core_notify_workqueue_changed(wq);
        if (wq->nr_items == 0)
                workqueue_check_waiters(wq);
}

/* MEM_RECLAIM: the queue keeps a rescuer (exec/exec.h), made with the queue and
 * again after each use, as soon as a process can be made. */
void workqueue_rescuer_replenish(struct workqueue *wq) {
        int r;

        if (!(wq->flags & WQ_MEM_RECLAIM) || wq->rescuer || !wq->core->base || wq->core->shutting_down)
                return;
        r = exec_rescuer_new(&wq->rescuer);
        if (r < 0)
                log_queue_errno(wq->stats.pool.rescued ? LOG_DEBUG : LOG_WARNING, r, wq,
                                "Workqueue %s has no rescuer for now (%m); it gets one once a process can be made",
                                wq->name);
}

static void waiters_complete(struct list_head *waiters, int r) {
        while (!list_empty(waiters)) {
                struct core_waiter *w = list_first_entry(waiters, struct core_waiter, entry);

                list_del_init(&w->entry);
                w->done(w, r);
        }
}

void workqueue_free(struct workqueue *wq) {
        struct user_usage *u;

        if (!wq)
                return;

        core_notify_workqueue_removed(wq);
        /* Only at daemon shutdown does a queue still hold items here. */
        while (!list_empty(&wq->items)) {
                struct item *i = list_first_entry(&wq->items, struct item, wq_entry);
                item_abort(i);
        }
        waiters_complete(&wq->flushers, -ENOENT);
        waiters_complete(&wq->drainers, -ENOENT);
        workqueue_claims_detach(wq);
        while (!list_empty(&wq->callback_holds))
                workqueue_callback_hold_free(list_first_entry(&wq->callback_holds, struct callback_hold, wq_entry));
        list_del_init(&wq->owner_entry);
        list_del_init(&wq->entry);
        u = user_usage_get(&wq->core->users, wq->owner);
        if (u) {
                u->nr_workqueues--;
                user_usage_put(&wq->core->users, u);
        }
        wq->rescuer = exec_rescuer_free(wq->rescuer);
        free(wq->pwqs);
        free(wq->name);
        free(wq);
}

struct pwq *workqueue_pwq_for_cpu(struct workqueue *wq, int cpu) {
        if (wq->flags & WQ_UNBOUND)
                return &wq->pwqs[0];
        return &wq->pwqs[cpu];
}

void core_number_builtin_pwqs(struct core *c) {
        struct workqueue *wq;

        c->nr_builtin_pwqs = 0;
        list_for_each_entry(wq, &c->workqueues, entry)
                if (wq->builtin)
                        for (size_t k = 0; k < wq->n_pwqs; k++)
                                wq->pwqs[k].share_index = c->nr_builtin_pwqs++;
}

/* The share @i counts against on its pwq: its uid's own on a built-in
 * queue, the queue's otherwise.  Should the uid's shares not fit in
 * memory, the item shares the queue's (the kernel's rule) rather than
 * wait. */
struct pwq_share *workqueue_share_of(struct pwq *pwq, uid_t uid) {
        struct core *c = pwq->wq->core;
        struct user_usage *u;

        if (!pwq->wq->builtin || c->nr_builtin_pwqs == 0)
                return &pwq->shared;
        u = user_usage_get(&c->users, uid);
        if (!u)
                return NULL;
        if (!u->builtin_shares) {
                u->builtin_shares = calloc(c->nr_builtin_pwqs, sizeof(struct pwq_share));
                if (!u->builtin_shares)
                        return NULL;
                for (size_t k = 0; k < c->nr_builtin_pwqs; k++)
                        list_init(&u->builtin_shares[k].inactive);
        }
        return &u->builtin_shares[pwq->share_index];
}

static struct pwq_share *item_pwq_share(struct item *i) {
        struct pwq_share *share = workqueue_share_of(i->pwq, i->uid);   /* the uid exists: the item is charged to it */

        if (share)
                return share;
        log_item(LOG_WARNING, i,
                 "Out of memory for uid %u's shares of the built-in queues; its item %" PRIu64
                 " counts against %s's max_active with everybody's",
                 (unsigned) i->uid, i->id, i->pwq->wq->name);
        return &i->pwq->shared;
}

static bool pwq_share_may_activate(const struct pwq *pwq, const struct pwq_share *share) {
        /* Claims wait for room and its exec items have their fair part:
         * the room goes to the claims (core/claim.c). */
        if (share->exec_limit && share->nr_active - share->claims_held >= share->exec_limit)
                return false;
        return !pwq->wq->frozen && share->nr_active < pwq->wq->max_active;
}

static void pwq_activate(struct pwq *pwq, struct item *i) {
        pwq->nr_active++;
        i->share->nr_active++;
        i->state = ITEM_PENDING;
        pool_queue_work(pwq->pool, &i->work);
        core_watchdog_kick(pwq->wq->core, pwq->pool);
}

void workqueue_item_unqueue(struct item *i) {
        list_del_init(&i->work.entry);
        list_del_init(&i->share_entry);
        i->share = NULL;
}

/* Starts what waits on @share, in order, as far as max_active allows. */
void workqueue_share_activate(struct pwq *pwq, struct pwq_share *share) {
        while (pwq_share_may_activate(pwq, share) && !list_empty(&share->inactive)) {
                struct item *i = list_first_entry(&share->inactive, struct item, share_entry);

                list_del_init(&i->work.entry);
                list_del_init(&i->share_entry);
                pwq_activate(pwq, i);
        }
}

/* Thawed, or max_active raised: every share may start what waits.  In the
 * order the items were queued; a share at its max_active keeps the rest of
 * its own, the others go on. */
static void pwq_activate_inactive(struct pwq *pwq) {
        struct item *i, *n;

        list_for_each_entry_safe(i, n, &pwq->inactive, work.entry) {
                if (pwq->wq->frozen)
                        return;
                if (!pwq_share_may_activate(pwq, i->share))
                        continue;
                list_del_init(&i->work.entry);
                list_del_init(&i->share_entry);
                pwq_activate(pwq, i);
        }
        workqueue_claims_changed_all(pwq->wq);
}

/* Puts a queued item on its pwq: active if max_active and the freezer allow
 * and nobody of its share is waiting before it, inactive otherwise. */
void workqueue_item_activate(struct item *i) {
        struct pwq *pwq = i->pwq;

        i->share = item_pwq_share(i);
        if (pwq_share_may_activate(pwq, i->share) && list_empty(&i->share->inactive))
                pwq_activate(pwq, i);
        else {
                i->state = ITEM_INACTIVE;
                list_add_tail(&i->work.entry, &pwq->inactive);
                list_add_tail(&i->share_entry, &i->share->inactive);
                core_watchdog_kick(pwq->wq->core, pwq->pool);
                /* Claims of the share may have to make room for it. */
                workqueue_claims_changed(pwq, i->share);
        }
}

void workqueue_item_finished(struct item *i) {
        struct pwq *pwq = i->pwq;
        struct pwq_share *share = i->share;

        pwq->nr_active--;
        share->nr_active--;
        i->share = NULL;
        workqueue_share_activate(pwq, share);
        workqueue_claims_changed(pwq, share);
}

uint64_t workqueue_nr_running(const struct workqueue *wq) {
        uint64_t n = 0;

        for (size_t k = 0; k < wq->n_pwqs; k++)
                n += wq->pwqs[k].nr_running;
        return n;
}

uint64_t core_nr_running(const struct core *c) {
        const struct workqueue *wq;
        uint64_t n = 0;

        list_for_each_entry(wq, &c->workqueues, entry)
                n += workqueue_nr_running(wq);
        return n;
}

uint64_t workqueue_nr_pending(const struct workqueue *wq) {
        return wq->nr_items - workqueue_nr_running(wq);
}

static bool workqueue_flushed(const struct workqueue *wq, const struct core_waiter *w) {
        if (w->flush_own)
                return w->flush_left == 0;
        if (list_empty(&wq->inflight))
                return true;
        return list_first_entry(&wq->inflight, struct item, inflight_entry)->seq > w->flush_seq;
}

void workqueue_item_left_inflight(struct item *i) {
        struct core_waiter *w;

        if (!list_linked(&i->inflight_entry))
                return;
        list_del_init(&i->inflight_entry);
        list_for_each_entry(w, &i->wq->flushers, entry)
                if (w->flush_own && w->flush_uid == i->uid && i->seq <= w->flush_seq && w->flush_left > 0)
                        w->flush_left--;
}

void workqueue_callback_hold_add(struct workqueue *wq, struct callback_hold *h) {
        h->wq = wq;
        list_add_tail(&h->wq_entry, &wq->callback_holds);
}

void workqueue_callback_hold_free(struct callback_hold *h) {
        if (!h)
                return;
        list_del_init(&h->wq_entry);
        list_del_init(&h->owner_entry);
        free(h);
}

static bool core_frozen_queues_idle(struct core *c) {
        struct workqueue *wq = NULL;

        list_for_each_entry(wq, &c->workqueues, entry)
                if (wq->frozen && (workqueue_nr_running(wq) > 0 || !list_empty(&wq->callback_holds)))
                        return false;
        return true;
}

void core_check_freezers(struct core *c) {
        if (list_empty(&c->freezers) || !core_frozen_queues_idle(c))
                return;
        if (c->freeze_timer)
                evtimer_del(c->freeze_timer);
        waiters_complete(&c->freezers, 0);
}

/* Called whenever items of @wq ended or moved: completes whatever waited.
 * May free @wq (a finished destroy). */
void workqueue_check_waiters(struct workqueue *wq) {
        struct core *c = wq->core;
        struct core_waiter *w, *n;

        core_notify_workqueue_changed(wq);
        list_for_each_entry_safe(w, n, &wq->flushers, entry)
                if (workqueue_flushed(wq, w)) {
                        list_del_init(&w->entry);
                        w->done(w, 0);
                }

        if (wq->nr_items == 0 && wq->draining) {
                bool destroy = wq->destroying;

                wq->draining = false;
                if (!destroy)
                        core_notify_workqueue_changed(wq);
                waiters_complete(&wq->drainers, 0);
                if (destroy) {
                        log_queue(LOG_DEBUG, wq, "Destroyed workqueue %s", wq->name);
                        core_store_workqueue_destroyed(wq);
                        workqueue_free(wq);
                }
        }

        core_check_freezers(c);
}

int core_workqueue_destroy(struct core *c, const struct core_caller *caller, const char *name,
                           struct core_waiter *w, struct core_error *e) {
        struct workqueue *wq = NULL;
        int r;

        r = workqueue_lookup_owned(c, caller, name, &wq, e);
        if (r < 0)
                return r;
        if (wq->builtin)
                return core_error_set(e, -EPERM, "'%s' is a built-in workqueue and cannot be destroyed", name);
        r = core_store_refuse_change(c, e);
        if (r < 0)
                return r;

        /* destroy_workqueue() drains first; new work is refused meanwhile. */
        wq->draining = true;
        wq->destroying = true;
        core_notify_workqueue_changed(wq);
        if (wq->nr_items == 0) {
                workqueue_check_waiters(wq);
                return 0;
        }
        list_add_tail(&w->entry, &wq->drainers);
        return 1;
}

int core_workqueue_set_max_active(struct core *c, const struct core_caller *caller, const char *name,
                                  unsigned max_active, struct core_error *e) {
        struct workqueue *wq = NULL;
        int r;

        r = workqueue_lookup_owned(c, caller, name, &wq, e);
        if (r < 0)
                return r;
        r = core_store_refuse_change(c, e);
        if (r < 0)
                return r;
        if (wq->flags & WQ_ORDERED)
                return core_error_set(e, -EINVAL, "the max_active of ordered workqueue '%s' is fixed at 1", name);
        if (max_active > WQ_MAX_ACTIVE)
                return core_error_set(e, -EINVAL, "max_active %u is above the limit of %u", max_active,
                                      WQ_MAX_ACTIVE);

        wq->max_active = max_active ? max_active : WQ_DFL_ACTIVE;
        core_store_workqueue(wq);
        for (size_t k = 0; k < wq->n_pwqs; k++)
                pwq_activate_inactive(&wq->pwqs[k]);
        core_notify_workqueue_changed(wq);
        return 0;
}

int core_workqueue_set_on_interrupt(struct core *c, const struct core_caller *caller, const char *name,
                                    enum interrupt_policy policy, struct core_error *e) {
        struct workqueue *wq = NULL;
        int r;

        if ((unsigned) policy >= _INTERRUPT_POLICY_MAX)
                return core_error_set(e, -EINVAL, "unknown interrupt policy %u", (unsigned) policy);
        r = workqueue_lookup_owned(c, caller, name, &wq, e);
        if (r < 0)
                return r;
        if (wq->on_interrupt != policy) {
                r = core_store_refuse_change(c, e);
                if (r < 0)
                        return r;
                wq->on_interrupt = policy;
                core_store_workqueue(wq);
        }
        return 0;
}

int core_workqueue_flush(struct core *c, const struct core_caller *caller, const char *name,
                         struct core_waiter *w, struct core_error *e) {
        struct workqueue *wq = NULL;
        int r;

        r = core_workqueue_lookup(c, caller, name, &wq, e);
        if (r < 0)
                return r;

        /* Everything queued so far, and nothing queued after this call. */
        w->flush_seq = wq->next_seq - 1;
        w->flush_own = false;
        /* A built-in queue is every user's: a user's flush waits for that
         * user's items, as another's are invisible to it (cmwqd(8),
         * SECURITY) -- and may run for up to 30 days. */
        if (wq->builtin && !caller_is_privileged(caller)) {
                struct item *i;

                w->flush_own = true;
                w->flush_uid = caller->uid;
                w->flush_left = 0;
                list_for_each_entry(i, &wq->inflight, inflight_entry)
                        if (i->uid == caller->uid)
                                w->flush_left++;
        }
        if (workqueue_flushed(wq, w))
                return 0;
        list_add_tail(&w->entry, &wq->flushers);
        log_queue(LOG_DEBUG, wq, "Flush of %s waits for its items up to number %" PRIu64, wq->name, w->flush_seq);
        return 1;
}

int core_workqueue_drain(struct core *c, const struct core_caller *caller, const char *name,
                         struct core_waiter *w, struct core_error *e) {
        struct workqueue *wq = NULL;
        int r;

        r = workqueue_lookup_owned(c, caller, name, &wq, e);
        if (r < 0)
                return r;

        if (wq->nr_items == 0)
                return 0;
        wq->draining = true;
        core_notify_workqueue_changed(wq);
        w->drain_wq = wq;
        list_add_tail(&w->entry, &wq->drainers);
        return 1;
}

/* Takes the queue's not-yet-started items back from the pools, so that a
 * frozen queue starts nothing new; they wait at the head of their pwq's
 * inactive list in their original order. */
static void workqueue_deactivate_pending(struct workqueue *wq) {
        struct item *i;

        for (size_t k = 0; k < wq->n_pwqs; k++) {
                struct pwq *pwq = &wq->pwqs[k];
                struct list_head taken;

                list_init(&taken);
                list_for_each_entry(i, &wq->inflight, inflight_entry) {
                        if (i->pwq != pwq || i->state != ITEM_PENDING)
                                continue;
                        pool_cancel_pending(pwq->pool, &i->work);
                        pwq->nr_active--;
                        i->share->nr_active--;
                        i->state = ITEM_INACTIVE;
                        list_add_tail(&i->work.entry, &taken);
                }
                /* At the head of both lists, the pwq's and its share's. */
                while (!list_empty(&taken)) {
                        i = list_entry(taken.prev, struct item, work.entry);
                        list_del_init(&i->work.entry);
                        list_add(&i->work.entry, &pwq->inactive);
                        list_add(&i->share_entry, &i->share->inactive);
                }
        }
}

/* Each freezer has its own deadline (a suspend's freeze and a short
 * "cmwqctl freeze --timeout" must not cut each other short or stretch each
 * other): the one timer follows the earliest. */
static void core_arm_freeze_timer(struct core *c) {
        struct core_waiter *w;
        uint64_t first = UINT64_MAX, now = now_usec(CLOCK_MONOTONIC);

        list_for_each_entry(w, &c->freezers, entry)
                if (w->freeze_deadline_usec < first)
                        first = w->freeze_deadline_usec;
        if (first == UINT64_MAX) {
                evtimer_del(c->freeze_timer);
                return;
        }
        struct timeval tv = timeval_from_usec(first > now ? first - now : 0);
        evtimer_add(c->freeze_timer, &tv);
}

int core_freeze_holders(struct core *c, int (*fn)(const struct core_freeze_holder *h, void *userdata),
                        void *userdata) {
        struct workqueue *wq;
        int r;

        list_for_each_entry(wq, &c->workqueues, entry) {
                struct callback_hold *h;
                struct item *i;

                if (!wq->frozen)
                        continue;
                list_for_each_entry(i, &wq->items, wq_entry)
                        if (i->state == ITEM_RUNNING) {
                                r = fn(&(const struct core_freeze_holder) { .wq = wq, .workqueue = wq->name,
                                                                            .item = i },
                                       userdata);
                                if (r < 0)
                                        return r;
                        }
                list_for_each_entry(h, &wq->callback_holds, wq_entry) {
                        r = fn(&(const struct core_freeze_holder) { .wq = wq, .workqueue = wq->name,
                                                                    .pid = h->pid },
                               userdata);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

static int freeze_holder_log(const struct core_freeze_holder *h, void *userdata) {
        if (h->item)
                log_item(LOG_WARNING, h->item,
                         "Freeze timed out: item %" PRIu64 " of workqueue %s (%s) is still running", h->item->id,
                         h->workqueue, h->item->argv[0]);
        else
                log_queue(LOG_WARNING, h->wq,
                          "Freeze timed out: PID %d has not said that its callbacks of workqueue %s have returned",
                          (int) h->pid, h->workqueue);
        return 0;
}

static void core_freeze_timer_fired(evutil_socket_t fd, short what, void *userdata) {
        struct core *c = userdata;
        struct core_waiter *w, *n;
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        struct list_head expired = LIST_HEAD_INIT(expired);

        list_for_each_entry_safe(w, n, &c->freezers, entry)
                if (w->freeze_deadline_usec <= now)
                        list_move_tail(&w->entry, &expired);
        if (list_empty(&expired)) {
                core_arm_freeze_timer(c);
                return;
        }

        (void) core_freeze_holders(c, freeze_holder_log, NULL);
        core_arm_freeze_timer(c);
        waiters_complete(&expired, -ETIMEDOUT);
}

static void workqueue_freeze(struct workqueue *wq) {
        struct item *i;

        if (wq->frozen)
                return;
        wq->frozen = true;
        workqueue_deactivate_pending(wq);
        /* A claim to start is for what starts soon; a crash while frozen
         * (a suspend that never resumes) leaves these pending. */
        list_for_each_entry(i, &wq->items, wq_entry)
                item_release_claim(i);
        if (wq->core->freeze_changed)
                wq->core->freeze_changed(wq, wq->core->callback_hooks_userdata);
        core_notify_workqueue_changed(wq);
}

static void workqueue_thaw(struct workqueue *wq) {
        if (!wq->frozen)
                return;
        wq->frozen = false;
        /* A thawed queue waits for nobody's answer. */
        while (!list_empty(&wq->callback_holds))
                workqueue_callback_hold_free(list_first_entry(&wq->callback_holds, struct callback_hold, wq_entry));
        for (size_t k = 0; k < wq->n_pwqs; k++)
                pwq_activate_inactive(&wq->pwqs[k]);
        if (wq->core->freeze_changed)
                wq->core->freeze_changed(wq, wq->core->callback_hooks_userdata);
        core_notify_workqueue_changed(wq);
}

/* Freezing and thawing are root's: applies @apply to the queue @name, or to
 * every FREEZABLE queue when @name is NULL. */
static int freezer_apply(struct core *c, const struct core_caller *caller, const char *name, const char *verb,
                         void (*apply)(struct workqueue *wq), struct core_error *e) {
        struct workqueue *wq = NULL;
        int r;

        if (!caller_is_privileged(caller))
                return core_error_set(e, -EPERM, "only root may %s workqueues", verb);

        if (name) {
                r = core_workqueue_lookup(c, caller, name, &wq, e);
                if (r < 0)
                        return r;
                if (!(wq->flags & WQ_FREEZABLE))
                        return core_error_set(e, -EINVAL, "workqueue '%s' is not freezable", name);
                apply(wq);
        } else
                list_for_each_entry(wq, &c->workqueues, entry)
                        if (wq->flags & WQ_FREEZABLE)
                                apply(wq);
        return 0;
}

int core_freeze(struct core *c, const struct core_caller *caller, const char *name,
                uint64_t timeout_usec, struct core_waiter *w, struct core_error *e) {
        int r;

        /* Before anything is frozen; a deadline past UINT64_MAX came at once. */
        if (timeout_usec > CMWQ_FREEZE_TIMEOUT_MAX_USEC)
                return core_error_set(e, -EINVAL, "freeze timeout is over the limit of 30 days");
        r = freezer_apply(c, caller, name, "freeze", workqueue_freeze, e);
        if (r < 0)
                return r;
        log_fields_errno(LOG_INFO, 0, &(const struct log_fields) { .queue = name }, "Froze %s",
                         name ? name : "all freezable workqueues");

        if (core_frozen_queues_idle(c))
                return 0;

        if (!c->freeze_timer) {
                c->freeze_timer = evtimer_new(c->base, core_freeze_timer_fired, c);
                if (!c->freeze_timer)
                        return core_error_set(e, -ENOMEM, "out of memory");
        }
        w->freeze_deadline_usec = now_usec(CLOCK_MONOTONIC) +
                (timeout_usec ? timeout_usec : c->config.freeze_timeout_usec);
        list_add_tail(&w->entry, &c->freezers);
        core_arm_freeze_timer(c);
        return 1;
}

int core_thaw(struct core *c, const struct core_caller *caller, const char *name, struct core_error *e) {
        int r;

        r = freezer_apply(c, caller, name, "thaw", workqueue_thaw, e);
        if (r < 0)
                return r;
        log_fields_errno(LOG_INFO, 0, &(const struct log_fields) { .queue = name }, "Thawed %s",
                         name ? name : "all freezable workqueues");
        core_check_freezers(c);
        return 0;
}
