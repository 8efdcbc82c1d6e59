/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <sched.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "base/log.h"
#include "core/core-internal.h"
#include "util.h"

void core_waiter_init(struct core_waiter *w, void (*done)(struct core_waiter *w, int r)) {
        *w = (struct core_waiter) { .done = done };
        list_init(&w->entry);
}

void core_waiter_cancel(struct core_waiter *w) {
        struct workqueue *wq;

        if (!w || !list_linked(&w->entry))
                return;
        list_del_init(&w->entry);

        /* drain_workqueue() refuses new work only while someone drains: with
         * the last drainer gone the queue takes work again.  A destroy goes
         * on whether or not its caller waits for it. */
        wq = w->drain_wq;
        if (wq && list_empty(&wq->drainers) && !wq->destroying && wq->draining) {
                wq->draining = false;
                core_notify_workqueue_changed(wq);
        }
}

void core_observer_add(struct core *c, struct core_observer *o) {
        list_add_tail(&o->entry, &c->observers);
}

void core_observer_remove(struct core_observer *o) {
        if (o && list_linked(&o->entry))
                list_del_init(&o->entry);
}

/* One place that calls every observer; nothing to tell while the daemon
 * tears its queues down. */
#define CORE_NOTIFY(core, callback, ...)                                        \
        do {                                                                    \
                struct core_observer *_o, *_n;                                  \
                if ((core)->shutting_down)                                      \
                        break;                                                  \
                list_for_each_entry_safe(_o, _n, &(core)->observers, entry)     \
                        if (_o->callback)                                       \
                                _o->callback(_o, __VA_ARGS__);                  \
        } while (0)

void core_notify_workqueue_added(struct workqueue *wq) {
        CORE_NOTIFY(wq->core, workqueue_added, wq);
}

void core_notify_workqueue_removed(struct workqueue *wq) {
        CORE_NOTIFY(wq->core, workqueue_removed, wq);
}

void core_notify_workqueue_changed(struct workqueue *wq) {
        CORE_NOTIFY(wq->core, workqueue_changed, wq);
}

void core_notify_item_finished(struct item *i) {
        CORE_NOTIFY(i->core, item_finished, i);
}

/* Root, and the user the daemon runs as: the owner of a --user instance may
 * do there what root may do in the system instance. */
bool caller_is_privileged(const struct core_caller *caller) {
        return caller->uid == 0 || caller->uid == geteuid();
}

int core_user_connect(struct core *c, const struct core_caller *caller, struct core_error *e) {
        struct user_usage *u = user_usage_get(&c->users, caller->uid);

        if (!u)
                return core_error_set(e, -ENOMEM, "out of memory");
        if (!caller_is_privileged(caller) && u->nr_connections >= c->config.limits.value[LIMIT_CONNECTIONS]) {
                user_usage_put(&c->users, u);
                return limit_refuse(&c->config.limits, LIMIT_CONNECTIONS, caller->uid, e);
        }
        u->nr_connections++;
        return 0;
}

void core_user_disconnect(struct core *c, uid_t uid) {
        struct user_usage *u = user_usage_get(&c->users, uid);

        if (!u)
                return;
        if (u->nr_connections > 0)
                u->nr_connections--;
        user_usage_put(&c->users, u);
}

/* The built-in queues of the kernel that make sense for a shell user. */
static const struct {
        const char *name;
        unsigned flags;
        unsigned max_active;
} builtin_workqueues[] = {
        { "system",                0,                                WQ_DFL_ACTIVE },
        { "system_highpri",        WQ_HIGHPRI,                       WQ_DFL_ACTIVE },
        { "system_long",           0,                                WQ_DFL_ACTIVE },
        { "system_unbound",        WQ_UNBOUND,                       WQ_MAX_ACTIVE },
        { "system_freezable",      WQ_FREEZABLE,                     WQ_DFL_ACTIVE },
        { "system_freezable_unbound", WQ_UNBOUND | WQ_FREEZABLE,     WQ_MAX_ACTIVE },
};

/* A bound pool's block must be seen at once only while it is busy. */
static void core_pool_busy_changed(struct pool *p, bool busy, void *userdata) {
        struct core *c = userdata;

        if (sleepwatch_cpu_busy(c->sleepwatch, p->cpu, busy) && c->cpu_watch_changed)
                c->cpu_watch_changed(p->cpu, c->callback_hooks_userdata);
}

struct pool *core_pool_for(struct core *c, int cpu, bool highpri) {
        if (cpu < 0)
                return &c->unbound_pools[highpri];
        return &c->cpu_pools[(size_t) cpu * 2 + highpri];
}

const struct core_config *core_get_config(const struct core *c) {
        return &c->config;
}

struct event_base *core_event_base(const struct core *c) {
        return c->base;
}

struct sleepwatch *core_sleepwatch(const struct core *c) {
        return c->sleepwatch;
}

struct user_table *core_users(struct core *c) {
        return &c->users;
}

unsigned core_nr_cpus(const struct core *c) {
        return c->nr_cpus;
}

bool core_cpu_allowed(const struct core *c, unsigned cpu) {
        return cpu < c->nr_cpus && CPU_ISSET(cpu, &c->cpus_allowed);
}

void core_set_callback_hooks(struct core *c, const struct core_callback_hooks *hooks, void *userdata) {
        static const struct core_callback_hooks none = {};

        if (!hooks)
                hooks = &none;
        if (c->sleepwatch)
                sleepwatch_set_batch_hook(c->sleepwatch, hooks->switches_seen, userdata);
        c->freeze_changed = hooks->freeze_changed;
        c->count_callbacks = hooks->count_callbacks;
        c->cpu_watch_changed = hooks->cpu_watch_changed;
        c->callback_hooks_userdata = userdata;
        /* The CPU pools only: an unbound pool runs no callbacks. */
        for (unsigned cpu = 0; cpu < c->nr_cpus; cpu++)
                for (int hi = 0; hi < 2; hi++) {
                        struct pool *p = core_pool_for(c, (int) cpu, hi);

                        p->contended = hooks->pool_contended;
                        p->contended_userdata = userdata;
                }
}

void core_refresh_pool_counts(struct core *c) {
        if (c->count_callbacks)
                c->count_callbacks(c->callback_hooks_userdata);
}

size_t core_nr_pools(const struct core *c) {
        return (size_t) c->nr_cpus * 2 + ELEMENTSOF(c->unbound_pools);
}

/* The one place that knows the order: CPU pools, then unbound pools. */
struct pool *core_pool_at(const struct core *c, size_t n) {
        size_t nr_cpu_pools = (size_t) c->nr_cpus * 2;

        if (n < nr_cpu_pools)
                return &c->cpu_pools[n];
        return (struct pool *) &c->unbound_pools[n - nr_cpu_pools];
}

static void core_pool_info_fill(const struct pool *p, struct core_pool_info *ret) {
        *ret = (struct core_pool_info) {
                .cpu = p->cpu,
                .highpri = p->highpri,
                .workers = p->nr_workers,
                .running = p->nr_running,
                .idle = p->nr_idle,
                .busy = p->nr_workers - p->nr_idle,
                .blocked = p->nr_blocked,
                .callback_threads = p->nr_callback_threads,
                .pending = p->nr_pending,
                .callbacks = p->callbacks_returned,
                .counters = p->counters,
        };
}

int core_for_each_pool(const struct core *c, int (*fn)(const struct core_pool_info *p, void *userdata),
                       void *userdata) {
        for (size_t n = 0; n < core_nr_pools(c); n++) {
                struct core_pool_info info;
                int r;

                core_pool_info_fill(core_pool_at(c, n), &info);
                r = fn(&info, userdata);
                if (r < 0)
                        return r;
        }
        return 0;
}

int core_new(struct event_base *base, struct sleepwatch *sw, const struct core_config *config,
             struct core **ret) {
        struct core *c;
        int r;

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->base = base;
        c->sleepwatch = sw;
        c->config = *config;
        if (c->config.limits.value[LIMIT_HISTORY] == 0)
                limits_init_default(&c->config.limits);
        if (c->config.freeze_timeout_usec == 0)
                c->config.freeze_timeout_usec = FREEZE_TIMEOUT_DEFAULT_USEC;
        if (c->config.watchdog_usec == 0)
                c->config.watchdog_usec = WATCHDOG_DEFAULT_USEC;
        c->next_id = 1;
        list_init(&c->workqueues);
        list_init(&c->history);
        list_init(&c->freezers);
        list_init(&c->starting);
        list_init(&c->observers);

        /* Bound pools exist for every CPU the kernel knows of; a queue to an
         * offline CPU is refused at submission. */
        c->nr_cpus = (unsigned) get_nprocs_conf();
        if (sched_getaffinity(0, sizeof(c->cpus_allowed), &c->cpus_allowed) < 0)
                for (unsigned cpu = 0; cpu < c->nr_cpus && cpu < CPU_SETSIZE; cpu++)
                        CPU_SET(cpu, &c->cpus_allowed);
        c->cpu_pools = calloc((size_t) c->nr_cpus * 2, sizeof(struct pool));
        item_env_table_init(&c->envs);
        c->item_hash_size = 1024;
        c->item_hash = calloc(c->item_hash_size, sizeof(struct item *));
        if (!c->cpu_pools || !c->item_hash || core_watchdog_init(c) < 0) {
                core_free(c);
                return -ENOMEM;
        }
        for (unsigned cpu = 0; cpu < c->nr_cpus; cpu++)
                for (int hp = 0; hp < 2; hp++) {
                        struct pool *p = core_pool_for(c, (int) cpu, hp);

                        r = pool_init(p, base, (int) cpu, hp);
                        if (r < 0) {
                                core_free(c);
                                return r;
                        }
                        p->busy_changed = core_pool_busy_changed;
                        p->busy_userdata = c;
                }
        for (int hp = 0; hp < 2; hp++) {
                r = pool_init(&c->unbound_pools[hp], base, -1, hp);
                if (r < 0) {
                        core_free(c);
                        return r;
                }
        }

        struct core_caller owner = { .uid = getuid() };
        for (size_t i = 0; i < ELEMENTSOF(builtin_workqueues); i++) {
                struct core_error e = {};

                r = core_workqueue_create(c, &owner, builtin_workqueues[i].name, builtin_workqueues[i].flags,
                                          builtin_workqueues[i].max_active, &e);
                if (r < 0) {
                        log_fields_errno(LOG_ERR, r, &(const struct log_fields) { .queue = builtin_workqueues[i].name },
                                         "Failed to create built-in workqueue %s: %s", builtin_workqueues[i].name,
                                         e.message);
                        core_free(c);
                        return r;
                }
                core_find_workqueue(c, owner.uid, builtin_workqueues[i].name)->builtin = true;
        }
        core_number_builtin_pwqs(c);

        *ret = c;
        return 0;
}

struct core *core_free(struct core *c) {
        if (!c)
                return NULL;

        c->shutting_down = true;
        core_store_detach(c);
        while (!list_empty(&c->workqueues))
                workqueue_free(list_first_entry(&c->workqueues, struct workqueue, entry));
        while (!list_empty(&c->history)) {
                struct item *i = list_first_entry(&c->history, struct item, history_entry);
                list_del_init(&i->history_entry);
                core_item_unhash(c, i);
                item_free(i);
        }
        if (c->cpu_pools)
                for (unsigned n = 0; n < c->nr_cpus * 2; n++)
                        pool_done(&c->cpu_pools[n]);
        for (int hp = 0; hp < 2; hp++)
                pool_done(&c->unbound_pools[hp]);
        if (c->freeze_timer)
                event_free(c->freeze_timer);
        user_table_done(&c->users);
        core_store_restore_envs_done(c);
        item_env_table_done(&c->envs);
        core_watchdog_done(c);
        free(c->cpu_pools);
        free(c->item_hash);
        free(c);
        return NULL;
}

/* Items are found by id through a chained hash that doubles as it fills. */
static size_t item_hash_slot(const struct core *c, uint64_t id) {
        return (size_t) ((id * UINT64_C(0x9E3779B97F4A7C15)) >> 20) & (c->item_hash_size - 1);
}

static void core_item_rehash(struct core *c) {
        size_t new_size = c->item_hash_size * 2;
        struct item **old = c->item_hash, **table;
        size_t old_size = c->item_hash_size;

        table = calloc(new_size, sizeof(struct item *));
        if (!table)
                return;         /* chains just get longer */
        c->item_hash = table;
        c->item_hash_size = new_size;
        for (size_t n = 0; n < old_size; n++)
                for (struct item *i = old[n], *next; i; i = next) {
                        size_t slot = item_hash_slot(c, i->id);
                        next = i->hash_next;
                        i->hash_next = table[slot];
                        table[slot] = i;
                }
        free(old);
}

void core_item_hash(struct core *c, struct item *i) {
        size_t slot;

        if (c->nr_items >= c->item_hash_size)
                core_item_rehash(c);
        slot = item_hash_slot(c, i->id);
        i->hash_next = c->item_hash[slot];
        c->item_hash[slot] = i;
        c->nr_items++;
}

void core_item_unhash(struct core *c, struct item *i) {
        for (struct item **p = &c->item_hash[item_hash_slot(c, i->id)]; *p; p = &(*p)->hash_next)
                if (*p == i) {
                        *p = i->hash_next;
                        c->nr_items--;
                        return;
                }
}

struct item *core_item_lookup(struct core *c, uint64_t id) {
        for (struct item *i = c->item_hash[item_hash_slot(c, id)]; i; i = i->hash_next)
                if (i->id == id)
                        return i;
        return NULL;
}
