/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the core keeps in the durable log (store/store.c): the records the
 * core's files write as its state changes, and the snapshot.  The rebuild
 * from the log at start-up is core/store-recovery.c's.
 *
 * Written: a queue's state when it is created or changed and when it is
 * gone; an item when it is queued (all it needs to run again), when its
 * start is claimed ahead and when it starts (ItemStarted; core/item.c,
 * "Claims"), when a claim is given back (ItemReleased), when it is requeued
 * after exiting 75, and its result when it ends for good; before the first
 * item that names a shared environment, that environment.  A snapshot is
 * the same records for the live state: a Header, every queue, every shared
 * environment, the history (ItemHistory), every unfinished item in queue
 * order (and ItemStarted for those that run or are claimed).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/core-internal.h"
#include "store/compact.h"
#include "util.h"

static bool core_store_on(const struct core *c) {
        return c->store && !c->restoring && !c->shutting_down;
}

int core_store_refuse_change(struct core *c, struct core_error *e) {
        if (!c->store || !store_is_full(c->store))
                return 0;
        return core_error_set(e, -ENOSPC, "the state directory %s is full", store_dir(c->store));
}

/* @lazy: nobody waits for the record (store_append_lazy()). */
static int64_t core_store_add(struct core *c, const CmwqStore__Record *rec, bool lazy) {
        int64_t seq = lazy ? store_append_lazy(c->store, rec) : store_append(c->store, rec);

        /* Out of memory: the state on disk falls behind, but nothing that
         * was acknowledged is lost by going on.  A full state directory
         * with its backlog at the limit: the store said so already. */
        if (seq < 0 && seq != -ENOSPC)
                log_warning_errno((int) seq, "Cannot add to the state log: %m");
        return seq;
}

static int64_t core_store_append(struct core *c, const CmwqStore__Record *rec) {
        return core_store_add(c, rec, false);
}

static void workqueue_record_fill(CmwqStore__Workqueue *w, const struct workqueue *wq) {
        cmwq_store__workqueue__init(w);
        w->name = wq->name;
        w->flags = wq->flags;
        w->max_active = wq->max_active;
        w->owner = wq->owner;
        w->has_on_interrupt = true;
        w->on_interrupt = wq->on_interrupt;
        if (wq->connection_owned) {
                w->has_owned_by_connection = true;
                w->owned_by_connection = true;
                w->has_owner_pid = true;
                w->owner_pid = (uint32_t) wq->owner_pid;
        }
}

void core_store_workqueue(struct workqueue *wq) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__Workqueue w;

        if (!core_store_on(wq->core))
                return;
        workqueue_record_fill(&w, wq);
        rec.body_case = CMWQ_STORE__RECORD__BODY_WORKQUEUE;
        rec.workqueue = &w;
        (void) core_store_append(wq->core, &rec);
}

void core_store_workqueue_destroyed(struct workqueue *wq) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__WorkqueueDestroyed d = CMWQ_STORE__WORKQUEUE_DESTROYED__INIT;

        if (!core_store_on(wq->core))
                return;
        d.name = wq->name;
        d.has_owner = true;
        d.owner = wq->owner;
        rec.body_case = CMWQ_STORE__RECORD__BODY_WORKQUEUE_DESTROYED;
        rec.workqueue_destroyed = &d;
        (void) core_store_append(wq->core, &rec);
}

/* @rec, an Environment record of @e, in @r. */
static void environment_record_fill(CmwqStore__Record *rec, CmwqStore__Environment *r, struct item_env *e) {
        cmwq_store__environment__init(r);
        r->id = item_env_id(e);
        r->env = item_env_strv(e);
        r->n_env = strv_length(r->env);
        rec->body_case = CMWQ_STORE__RECORD__BODY_ENVIRONMENT;
        rec->environment = r;
}

/* Whether an item may name @e by id in a log this cmwqd wrote: a private
 * one (item_env_in_table()) is not in the snapshot. */
static bool environment_nameable(const struct item_env *e) {
        return e && item_env_in_table(e);
}

/* Appends @e's Environment record unless it was: whether items may name
 * it by its id in the log.  Not in a log of an older format, kept because
 * the disk was full at start-up. */
static bool core_store_environment(struct core *c, struct item_env *e) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__Environment r;

        if (!environment_nameable(e) || !store_log_is_ours(c->store))
                return false;
        if (item_env_logged(&c->envs, e))
                return true;
        environment_record_fill(&rec, &r, e);
        if (core_store_append(c, &rec) < 0)
                return false;
        item_env_set_logged(&c->envs, e);
        return true;
}

/* @env_named: its environment is named by id (an Environment record comes
 * before this one in the log), rather than written out. */
static void item_queued_fill(CmwqStore__ItemQueued *q, const struct item *i, bool env_named) {
        const struct item_extras *x = item_extra(i);

        cmwq_store__item_queued__init(q);
        q->id = i->id;
        q->workqueue = (char *) item_wq_name(i);
        if (i->wq) {
                q->has_workqueue_owner = true;
                q->workqueue_owner = i->wq->owner;
        }
        q->n_argv = strv_length(i->argv);
        q->argv = (char **) i->argv;
        if (env_named) {
                q->has_env_id = true;
                q->env_id = item_env_id(item_env(i));
        } else {
                q->env = item_envp(i);
                q->n_env = strv_length(q->env);
        }
        q->cwd = (char *) item_cwd(i);
        if (x->payload_len > 0) {
                q->has_payload = true;
                q->payload = (ProtobufCBinaryData) { x->payload_len, x->payload };
        }
        q->has_cpu = true;
        q->cpu = i->cpu;
        q->key = x->key_name;
        q->has_timeout_usec = x->timeout_usec > 0;
        q->timeout_usec = x->timeout_usec;
        q->uid = i->uid;
        /* Not used since an item's groups come from the user database
         * when it runs: a group that grants nothing, should an older
         * cmwqd read this. */
        q->gid = 65534;
        q->has_deadline_usec = x->deadline_usec > 0;
        q->deadline_usec = x->deadline_usec;
        q->has_queued_usec = true;
        q->queued_usec = i->queued_usec;
        q->has_requeues = x->requeues > 0;
        q->requeues = x->requeues;
        q->has_interruptions = x->interruptions > 0;
        q->interruptions = x->interruptions;
}

static void item_result_fill(CmwqStore__ItemResult *res, const struct item *i) {
        const struct item_run *run = item_ran(i);

        cmwq_store__item_result__init(res);
        res->id = i->id;
        res->state = i->state;
#define SET(field, value) do { res->has_##field = true; res->field = (value); } while (0)
        /* An interrupted item has neither (item_has_exit()). */
        if (item_has_exit(i) && !run->signal)
                SET(exit_status, run->exit_status);
        if (item_has_exit(i) && run->signal)
                SET(signal, run->signal);
        if (run->exec_errno)
                SET(exec_errno, run->exec_errno);
        SET(cpu_usec, run->cpu_usec);
        if (i->timed_out)
                SET(timed_out, true);
        if (i->cpu_intensive)
                SET(cpu_intensive, true);
        if (run->out_len > 0)
                SET(out, ((ProtobufCBinaryData) { run->out_len, (uint8_t *) run->out }));
        if (i->out_truncated)
                SET(out_truncated, true);
        if (run->err_len > 0)
                SET(err, ((ProtobufCBinaryData) { run->err_len, (uint8_t *) run->err }));
        if (i->err_truncated)
                SET(err_truncated, true);
        if (run->started_usec)
                SET(started_usec, run->started_usec);
        SET(finished_usec, item_extra(i)->finished_usec);
        if (item_extra(i)->requeues)
                SET(requeues, item_extra(i)->requeues);
#undef SET
}

void core_store_item_queued(struct item *i) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__ItemQueued q;

        if (!core_store_on(i->core))
                return;
        item_queued_fill(&q, i, core_store_environment(i->core, item_env(i)));
        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_QUEUED;
        rec.item_queued = &q;
        (void) core_store_append(i->core, &rec);
}

bool core_store_at_most_once(const struct item *i) {
        return core_store_on(i->core) && i->wq && i->wq->on_interrupt != INTERRUPT_RERUN;
}

bool core_store_is_durable(const struct core *c, uint64_t seq) {
        return !c->store || seq <= store_durable_seq(c->store);
}

static int64_t core_store_append_started(struct item *i, bool ahead, bool lazy) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__ItemStarted st = CMWQ_STORE__ITEM_STARTED__INIT;

        st.id = i->id;
        if (ahead) {
                st.has_ahead = true;
                st.ahead = true;
        } else {
                st.has_started_usec = true;
                st.started_usec = now_usec(CLOCK_REALTIME);
        }
        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_STARTED;
        rec.item_started = &st;
        return core_store_add(i->core, &rec, lazy);
}

uint64_t core_store_item_claim(struct item *i) {
        int64_t seq;

        if (!core_store_at_most_once(i))
                return 0;
        seq = core_store_append_started(i, true, false);
        return seq > 0 ? (uint64_t) seq : 0;
}

void core_store_item_released(struct item *i) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__ItemReleased rl = CMWQ_STORE__ITEM_RELEASED__INIT;

        if (!core_store_on(i->core))
                return;
        rl.id = i->id;
        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_RELEASED;
        rec.item_released = &rl;
        (void) core_store_append(i->core, &rec);
}

uint64_t core_store_item_started(struct item *i) {
        bool rerun = i->wq->on_interrupt == INTERRUPT_RERUN;
        uint64_t claim = item_start_seq(i);
        int64_t seq;

        if (!core_store_on(i->core))
                return 0;
        /* At most once (drop): the item must not run before a record that
         * says it may have is on disk, or a crash in between would run it
         * a second time: its claim, or else this record, which is then
         * the only one waited for (not lazy).  At least once (rerun): such
         * a second run is what the queue asked for. */
        seq = core_store_append_started(i, false, rerun || claim > 0);
        if (rerun)
                return 0;
        if (claim > 0)
                return core_store_is_durable(i->core, claim) ? 0 : claim;
        return seq > 0 && !core_store_is_durable(i->core, (uint64_t) seq) ? (uint64_t) seq : 0;
}

void core_store_item_requeued(struct item *i) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__ItemRequeued rq = CMWQ_STORE__ITEM_REQUEUED__INIT;

        if (!core_store_on(i->core))
                return;
        rq.id = i->id;
        rq.requeues = item_extra(i)->requeues;
        rq.deadline_usec = item_extra(i)->deadline_usec;
        rq.has_cpu_usec = true;
        rq.cpu_usec = item_ran(i)->cpu_usec;
        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_REQUEUED;
        rec.item_requeued = &rq;
        (void) core_store_append(i->core, &rec);
}

void core_store_item_result(struct item *i) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__ItemResult res;

        if (!core_store_on(i->core))
                return;
        item_result_fill(&res, i);
        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_RESULT;
        rec.item_result = &res;
        /* Nobody waits for it: a crash before its commit reports the item
         * interrupted (or runs it again on a rerun queue), as one during
         * the commit would. */
        (void) core_store_add(i->core, &rec, true);
}

static int snapshot_environment(struct item_env *e, void *userdata) {
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__Environment r;

        environment_record_fill(&rec, &r, e);
        return store_writer_append(userdata, &rec);
}

static int environment_set_logged(struct item_env *e, void *userdata) {
        item_env_set_logged(userdata, e);
        return 0;
}

/* The snapshot: the live state as records. */
static int core_store_snapshot(struct store_writer *b, void *userdata) {
        struct core *c = userdata;
        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
        CmwqStore__Header hdr = CMWQ_STORE__HEADER__INIT;
        struct workqueue *wq;
        struct item *i;
        int r;

        hdr.version = STORE_FORMAT_VERSION;
        hdr.next_id = c->next_id;
        rec.body_case = CMWQ_STORE__RECORD__BODY_HEADER;
        rec.header = &hdr;
        r = store_writer_append(b, &rec);
        if (r < 0)
                return r;

        list_for_each_entry(wq, &c->workqueues, entry) {
                CmwqStore__Workqueue w;

                if (wq->destroying && wq->nr_items == 0)
                        continue;
                workqueue_record_fill(&w, wq);
                rec.body_case = CMWQ_STORE__RECORD__BODY_WORKQUEUE;
                rec.workqueue = &w;
                r = store_writer_append(b, &rec);
                if (r < 0)
                        return r;
        }

        /* Every shared environment, named by the items below and by
         * those appended while a compaction's child writes this. */
        r = item_env_table_foreach(&c->envs, snapshot_environment, b);
        if (r < 0)
                return r;

        list_for_each_entry(i, &c->history, history_entry) {
                CmwqStore__ItemHistory h = CMWQ_STORE__ITEM_HISTORY__INIT;
                CmwqStore__ItemQueued q;
                CmwqStore__ItemResult res;

                item_queued_fill(&q, i, false);      /* no environment kept */
                item_result_fill(&res, i);
                h.item = &q;
                h.result = &res;
                rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_HISTORY;
                rec.item_history = &h;
                r = store_writer_append(b, &rec);
                if (r < 0)
                        return r;
        }

        list_for_each_entry(wq, &c->workqueues, entry)
                list_for_each_entry(i, &wq->items, wq_entry) {
                        CmwqStore__ItemQueued q;

                        item_queued_fill(&q, i, environment_nameable(item_env(i)));
                        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_QUEUED;
                        rec.item_queued = &q;
                        r = store_writer_append(b, &rec);
                        if (r < 0)
                                return r;
                        /* Running, or claimed ahead: it may run without
                         * another record (a claim on disk only in the old
                         * log must be in the new one). */
                        if (i->state == ITEM_RUNNING || item_start_seq(i) > 0) {
                                CmwqStore__ItemStarted st = CMWQ_STORE__ITEM_STARTED__INIT;

                                st.id = i->id;
                                if (i->state == ITEM_RUNNING) {
                                        st.has_started_usec = true;
                                        st.started_usec = item_ran(i)->started_usec;
                                } else {
                                        st.has_ahead = true;
                                        st.ahead = true;
                                }
                                rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_STARTED;
                                rec.item_started = &st;
                                r = store_writer_append(b, &rec);
                                if (r < 0)
                                        return r;
                        }
                }
        return 0;
}

/* A compaction starts (store/compact.h): the history as it is now, and
 * every environment is written again before the next item that names it
 * (the compaction keeps only those its live items name). */
static int core_store_plan(struct store_compact_plan *plan, void *userdata) {
        struct core *c = userdata;
        struct item *i;
        size_t n = 0;

        plan->next_id = c->next_id;
        plan->history = malloc((c->nr_history + 1) * sizeof(*plan->history));
        if (!plan->history)
                return -ENOMEM;
        list_for_each_entry(i, &c->history, history_entry)
                plan->history[n++] = i->id;
        plan->n_history = n;
        item_env_table_forget_logged(&c->envs);
        return 0;
}

static void core_store_durable(struct store_listener *l, uint64_t seq) {
        struct core *c = container_of(l, struct core, store_listener);

        core_items_start_durable(c, seq);
}

/* Starts writing to @s, once the core's state is rebuilt: the store's first
 * snapshot is that state, and the items that wait for their records to be
 * durable are told when they are. */
int core_store_start(struct core *c, struct store *s) {
        int r;

        r = store_start(s, c->base, core_store_snapshot, core_store_plan, c);
        if (r < 0)
                return r;
        /* That snapshot, written here, holds every shared environment. */
        if (store_log_is_ours(s))
                (void) item_env_table_foreach(&c->envs, environment_set_logged, &c->envs);
        c->store = s;
        c->store_listener.durable = core_store_durable;
        c->store_listener.full = NULL;
        store_add_listener(s, &c->store_listener);
        return 0;
}

/* Stopping: the claims of items that did not start are given back, so
 * that they come back pending rather than interrupted.  So are the starts
 * still waiting for the disk (core->starting): their processes never got
 * to run their programs. */
static void core_store_release_claims(struct core *c) {
        struct workqueue *wq;
        struct item *i;

        list_for_each_entry(wq, &c->workqueues, entry)
                list_for_each_entry(i, &wq->items, wq_entry) {
                        CmwqStore__Record rec = CMWQ_STORE__RECORD__INIT;
                        CmwqStore__ItemReleased rl = CMWQ_STORE__ITEM_RELEASED__INIT;

                        if (item_start_seq(i) == 0 || item_proc(i))
                                continue;
                        rl.id = i->id;
                        rec.body_case = CMWQ_STORE__RECORD__BODY_ITEM_RELEASED;
                        rec.item_released = &rl;
                        (void) core_store_append(c, &rec);
                }
}

void core_store_detach(struct core *c) {
        if (!c->store)
                return;
        core_store_release_claims(c);
        store_remove_listener(c->store, &c->store_listener);
        c->store = NULL;
}
