/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The core rebuilt from the durable log (store/store.c) at start-up: the
 * replay of its records, then core_store_attach(), which settles what was
 * running, starts writing (core/core-store.c) and queues the recovered
 * items.
 *
 * Rebuilt: queues are recreated, items keep their ids and their order.  An
 * item that was pending is queued again (a delay that has not passed is
 * armed for what is left of it); one that was running or claimed is
 * interrupted: run again from the start if its queue's policy is "rerun",
 * otherwise retired as ITEM_INTERRUPTED.  Finished items are back in the history.  A
 * connection-owned queue is destroyed once its recovered items have run:
 * no connection survives a restart.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/core-internal.h"
#include "util.h"

static int restore_workqueue(struct core *c, const CmwqStore__Workqueue *w) {
        struct workqueue *wq = core_find_workqueue(c, w->owner, w->name);
        struct core_caller owner = { .uid = w->owner };
        struct core_error e = {};
        int r;

        if (!wq) {
                r = core_workqueue_create(c, &owner, w->name, w->flags, (w->flags & WQ_ORDERED) ? 0 : w->max_active,
                                          &e);
                if (r < 0) {
                        log_fields_errno(LOG_WARNING, 0,
                                         &(const struct log_fields) { .queue = w->name, .has_uid = true,
                                                                      .uid = w->owner },
                                         "Cannot recreate workqueue %s from the state log: %s", w->name, e.message);
                        return 0;
                }
                wq = core_find_workqueue(c, w->owner, w->name);
        } else if (!(wq->flags & WQ_ORDERED) && w->max_active > 0 && w->max_active <= WQ_MAX_ACTIVE)
                wq->max_active = w->max_active;
        if (w->has_on_interrupt && w->on_interrupt < _INTERRUPT_POLICY_MAX)
                wq->on_interrupt = w->on_interrupt;
        /* Its connection did not outlive the cmwqd that served it:
         * core_store_orphans() destroys it after the replay. */
        if (w->has_owned_by_connection && w->owned_by_connection && !wq->builtin) {
                wq->connection_owned = true;
                wq->owner_pid = (pid_t) w->owner_pid;
        }
        return 0;
}

/* The log's environments by id, while it is read back: open addressing on
 * the id, a table a power of two in size and at most half full. */
struct restore_env {
        uint64_t id;                    /* 0: a free slot */
        struct item_env *env;
};

static struct restore_env *restore_env_slot(struct core *c, uint64_t id) {
        size_t mask = c->restore_envs_size - 1;

        for (size_t k = (size_t) (id * 0x9e3779b97f4a7c15ull) & mask;; k = (k + 1) & mask)
                if (c->restore_envs[k].id == id || c->restore_envs[k].id == 0)
                        return &c->restore_envs[k];
}

static int restore_env_grow(struct core *c) {
        struct restore_env *old = c->restore_envs;
        size_t old_size = c->restore_envs_size;

        c->restore_envs_size = old_size ? old_size * 2 : 64;
        c->restore_envs = calloc(c->restore_envs_size, sizeof(*c->restore_envs));
        if (!c->restore_envs) {
                c->restore_envs = old;
                c->restore_envs_size = old_size;
                return -ENOMEM;
        }
        for (size_t k = 0; k < old_size; k++)
                if (old[k].id)
                        *restore_env_slot(c, old[k].id) = old[k];
        free(old);
        return 0;
}

static int restore_environment(struct core *c, const CmwqStore__Environment *r) {
        struct restore_env *slot;
        struct item_env *env;
        int k;

        if (r->id == 0)
                return 0;       /* never written: damage, the items naming it get none */
        if ((c->nr_restore_envs + 1) * 2 > c->restore_envs_size && (k = restore_env_grow(c)) < 0)
                return k;
        k = item_env_get(&c->envs, r->env, r->n_env, &env);
        if (k < 0)
                return k;
        slot = restore_env_slot(c, r->id);
        if (slot->id)
                item_env_put(&c->envs, slot->env);      /* named again: the later one counts */
        else
                c->nr_restore_envs++;
        *slot = (struct restore_env) { .id = r->id, .env = env };
        return 0;
}

/* Read back: the references of the log's environments go (the items hold
 * their own). */
void core_store_restore_envs_done(struct core *c) {
        for (size_t k = 0; k < c->restore_envs_size; k++)
                if (c->restore_envs[k].id)
                        item_env_put(&c->envs, c->restore_envs[k].env);
        free(c->restore_envs);
        c->restore_envs = NULL;
        c->restore_envs_size = c->nr_restore_envs = 0;
}

/* The item, with its environment named by id or written out. */
static int restore_item_new(struct core *c, struct workqueue *wq, const CmwqStore__ItemQueued *q, const char *program,
                            struct item **ret) {
        const char *cwd = q->cwd ? q->cwd : "/";
        struct restore_env *slot;

        if (!q->has_env_id)
                return item_new(c, wq, q->argv, q->n_argv, q->env, q->n_env, cwd, program, ret);
        slot = c->restore_envs_size ? restore_env_slot(c, q->env_id) : NULL;
        if (!slot || slot->id == 0) {
                log_fields_errno(LOG_WARNING, 0, &(const struct log_fields) { .queue = q->workqueue, .item = q->id },
                                 "The state log names environment %" PRIu64 " for item %" PRIu64
                                 ", which it does not hold; the item gets an empty environment", q->env_id, q->id);
                return item_new(c, wq, q->argv, q->n_argv, NULL, 0, cwd, program, ret);
        }
        return item_new_shared(c, wq, q->argv, q->n_argv, slot->env, cwd, program, ret);
}

/* An item as it was queued; @wq NULL: it goes to the history. */
static int restore_item(struct core *c, struct workqueue *wq, const CmwqStore__ItemQueued *q, struct item **ret) {
        _cleanup_(freep) char *program = NULL;
        struct item *i;
        int resolved = 0, r;

        if (q->n_argv == 0 || core_item_lookup(c, q->id))
                return -EBADMSG;
        if (wq)
                resolved = exec_resolve_program(q->argv[0], c->config.plugin_dirs, &program);
        r = restore_item_new(c, wq, q, program, &i);
        if (r < 0)
                return r;
        r = -ENOMEM;
        /* It fails when it is due, as the log says it was queued. */
        if (resolved < 0 && !item_run_get(i))
                goto fail;
        if (resolved < 0)
                i->run->exec_errno = -resolved;
        i->id = q->id;
        i->uid = q->uid;
        i->cpu = q->has_cpu && q->cpu >= 0 && q->cpu <= INT16_MAX ? (int16_t) q->cpu : -1;
        if (wq && !(wq->flags & WQ_UNBOUND) && (i->cpu < 0 || (unsigned) i->cpu >= c->nr_cpus))
                i->cpu = 0;     /* the machine has fewer CPUs now */
        i->queued_usec = q->queued_usec;
        if (q->deadline_usec || q->requeues || q->interruptions) {
                struct item_extras *x = item_extras_get(i);

                if (!x)
                        goto fail;
                x->deadline_usec = q->deadline_usec;
                x->requeues = q->requeues;
                x->interruptions = q->interruptions;
        }
        if (!wq) {
                struct item_extras *x = item_extras_get(i);

                if (!x || !(x->wq_name = strdup(q->workqueue)))
                        goto fail;
        }
        if (item_set_timeout(i, q->timeout_usec) < 0 ||
            (q->has_payload && item_set_payload(i, q->payload.data, (uint32_t) q->payload.len) < 0))
                goto fail;
        /* Out of memory after this is out of memory at start-up: fatal
         * enough that the charge is not taken back. */
        r = item_restore_charge(i);
        if (r < 0)
                goto fail;
        if (q->key && !wq) {
                /* In the history: its name only, as far as memory goes. */
                struct item_extras *x = item_extras_get(i);

                if (x)
                        x->key_name = strdup(q->key);
        } else if (q->key && (r = item_attach_key(i, q->key)) < 0)
                goto fail;
        core_item_hash(c, i);
        if (c->next_id <= i->id)
                c->next_id = i->id + 1;
        *ret = i;
        return 0;

fail:
        item_free(i);
        return r;
}

static int restore_result(struct item *i, const CmwqStore__ItemResult *res) {
        struct item_run *run = item_run_get(i);
        struct item_extras *x;

        if (!run)
                return -ENOMEM;
        run->exit_status = res->exit_status;
        run->signal = res->signal;
        run->exec_errno = res->exec_errno;
        run->cpu_usec = res->cpu_usec;
        i->timed_out = res->timed_out;
        i->cpu_intensive = res->cpu_intensive;
        free(run->out);
        free(run->err);
        run->out = run->err = NULL;
        run->out_len = run->err_len = 0;
        if (res->has_out && res->out.len > 0 && (run->out = malloc(res->out.len))) {
                memcpy(run->out, res->out.data, res->out.len);
                run->out_len = res->out.len;
        }
        if (res->has_err && res->err.len > 0 && (run->err = malloc(res->err.len))) {
                memcpy(run->err, res->err.data, res->err.len);
                run->err_len = res->err.len;
        }
        i->out_truncated = res->out_truncated;
        i->err_truncated = res->err_truncated;
        run->started_usec = res->started_usec;
        x = item_extras_get(i);
        if (!x)
                return -ENOMEM;
        x->finished_usec = res->finished_usec ? res->finished_usec : now_usec(CLOCK_REALTIME);
        if (res->has_requeues)
                x->requeues = res->requeues;
        return 0;
}

static struct item *restore_lookup_live(struct core *c, uint64_t id) {
        struct item *i = core_item_lookup(c, id);

        return i && i->wq && !item_is_finished(i) ? i : NULL;
}

int core_store_replay(const CmwqStore__Record *rec, void *userdata) {
        struct core *c = userdata;
        struct item_extras *x;
        struct workqueue *wq;
        struct item *i;
        int r;

        c->restoring = true;
        switch (rec->body_case) {
        case CMWQ_STORE__RECORD__BODY_HEADER:
                if (rec->header->version > STORE_FORMAT_VERSION)
                        return log_error_errno(-EPROTONOSUPPORT,
                                               "The state log was written by a newer cmwqd (format %u, this one "
                                               "reads %u)", rec->header->version, STORE_FORMAT_VERSION);
                if (c->next_id < rec->header->next_id)
                        c->next_id = rec->header->next_id;
                break;
        case CMWQ_STORE__RECORD__BODY_WORKQUEUE:
                return restore_workqueue(c, rec->workqueue);
        case CMWQ_STORE__RECORD__BODY_ENVIRONMENT:
                /* Ids of this log are not given again while it is the log. */
                item_env_table_reserve_ids(&c->envs, rec->environment->id);
                return restore_environment(c, rec->environment);
        case CMWQ_STORE__RECORD__BODY_WORKQUEUE_DESTROYED:
                wq = core_find_workqueue(c, rec->workqueue_destroyed->has_owner ? rec->workqueue_destroyed->owner
                                                                                : getuid(),
                                         rec->workqueue_destroyed->name);
                if (wq && !wq->builtin)
                        workqueue_free(wq);
                break;
        case CMWQ_STORE__RECORD__BODY_ITEM_QUEUED:
                wq = core_find_workqueue(c, rec->item_queued->has_workqueue_owner
                                                    ? rec->item_queued->workqueue_owner : getuid(),
                                         rec->item_queued->workqueue);
                if (!wq) {
                        log_fields_errno(LOG_WARNING, 0,
                                         &(const struct log_fields) { .queue = rec->item_queued->workqueue,
                                                                      .item = rec->item_queued->id },
                                         "The state log queues item %" PRIu64 " on workqueue %s, which does not exist; "
                                         "dropping it", rec->item_queued->id, rec->item_queued->workqueue);
                        break;
                }
                r = restore_item(c, wq, rec->item_queued, &i);
                if (r < 0) {
                        log_fields_errno(LOG_WARNING, r,
                                         &(const struct log_fields) { .queue = wq->name, .item = rec->item_queued->id },
                                         "Cannot restore item %" PRIu64 ": %m", rec->item_queued->id);
                        break;
                }
                i->state = ITEM_DELAYED;        /* placeholder until recovery queues it */
                list_add_tail(&i->wq_entry, &wq->items);
                wq->nr_items++;
                break;
        case CMWQ_STORE__RECORD__BODY_ITEM_STARTED:
                /* Started, or claimed ahead (it may have started since
                 * without a record): either way it may have run. */
                i = restore_lookup_live(c, rec->item_started->id);
                if (i) {
                        i->restored_running = true;
                        if (rec->item_started->started_usec && !item_run_get(i))
                                return -ENOMEM;
                        if (i->run)
                                i->run->started_usec = rec->item_started->started_usec;
                        if (i->extras)
                                i->extras->deadline_usec = 0;
                }
                break;
        case CMWQ_STORE__RECORD__BODY_ITEM_RELEASED:
                /* Its claim was given back before it started. */
                i = restore_lookup_live(c, rec->item_released->id);
                if (i) {
                        i->restored_running = false;
                        if (i->run)
                                i->run->started_usec = 0;
                }
                break;
        case CMWQ_STORE__RECORD__BODY_ITEM_REQUEUED:
                i = restore_lookup_live(c, rec->item_requeued->id);
                if (i) {
                        i->restored_running = false;
                        x = item_extras_get(i);
                        if (!x || !item_run_get(i))
                                return -ENOMEM;
                        x->requeues = rec->item_requeued->requeues;
                        x->deadline_usec = rec->item_requeued->deadline_usec;
                        i->run->cpu_usec = rec->item_requeued->cpu_usec;
                }
                break;
        case CMWQ_STORE__RECORD__BODY_ITEM_RESULT:
                i = restore_lookup_live(c, rec->item_result->id);
                if (i) {
                        r = restore_result(i, rec->item_result);
                        if (r < 0)
                                return r;
                        item_retire(i, rec->item_result->state <= ITEM_INTERRUPTED &&
                                               rec->item_result->state >= ITEM_FINISHED
                                               ? (enum item_state) rec->item_result->state : ITEM_FAILED);
                }
                break;
        case CMWQ_STORE__RECORD__BODY_ITEM_HISTORY:
                r = restore_item(c, NULL, rec->item_history->item, &i);
                if (r < 0) {
                        log_fields_errno(LOG_WARNING, r,
                                         &(const struct log_fields) { .item = rec->item_history->item->id },
                                         "Cannot restore item %" PRIu64 " of the history: %m",
                                         rec->item_history->item->id);
                        break;
                }
                r = restore_result(i, rec->item_history->result);
                if (r < 0)
                        return r;       /* out of memory at start-up */
                i->state = rec->item_history->result->state >= ITEM_FINISHED &&
                                           rec->item_history->result->state <= ITEM_INTERRUPTED
                                   ? (enum item_state) rec->item_history->result->state : ITEM_FAILED;
                item_restore_history(i);
                break;
        default:
                /* A record of a newer cmwqd that this one does not know: skip it. */
                break;
        }
        return 0;
}

/* After the replay: interrupted items are settled before the snapshot. */
static void core_store_settle(struct core *c) {
        struct workqueue *wq;
        struct item *i, *n;

        list_for_each_entry(wq, &c->workqueues, entry)
                list_for_each_entry_safe(i, n, &wq->items, wq_entry) {
                        if (!i->restored_running)
                                continue;
                        i->restored_running = false;
                        /* Out of memory at start-up: the count is what is lost. */
                        if (item_extras_get(i))
                                i->extras->interruptions++;
                        if (wq->on_interrupt == INTERRUPT_RERUN) {
                                log_item(LOG_NOTICE, i,
                                         "Item %" PRIu64 " of workqueue %s was running when cmwqd stopped; "
                                         "running it again (its queue's policy is rerun)", i->id, wq->name);
                                if (i->run)
                                        i->run->started_usec = 0;
                                continue;
                        }
                        log_item(LOG_NOTICE, i, "Item %" PRIu64 " of workqueue %s was running when cmwqd stopped; "
                                 "it is reported as interrupted", i->id, wq->name);
                        item_retire(i, ITEM_INTERRUPTED);
                }
}

/* After the settling: a connection-owned queue outlives its connection
 * only to run what it accepted.  The empty ones go before the snapshot (so
 * the new log never names them); the others are in the snapshot, still
 * connection-owned, and go once their items have run, writing their
 * WorkqueueDestroyed then.  Dying again before that only repeats this. */
static void core_store_orphans(struct core *c) {
        struct workqueue *wq, *n;

        list_for_each_entry_safe(wq, n, &c->workqueues, entry)
                if (wq->connection_owned && !wq->owner_conn)
                        workqueue_orphan(wq);
}

/* Queues the recovered items, in each queue's order. */
static void core_store_requeue(struct core *c) {
        uint64_t now = now_usec(CLOCK_REALTIME);
        struct workqueue *wq, *wn;
        struct item *i, *n;
        uint64_t deadline;
        size_t count = 0;

        list_for_each_entry_safe(wq, wn, &c->workqueues, entry) {
                list_for_each_entry_safe(i, n, &wq->items, wq_entry) {
                        count++;
                        if (item_ran(i)->exec_errno) {
                                item_retire(i, ITEM_FAILED);
                                continue;
                        }
                        deadline = item_extra(i)->deadline_usec;
                        if (deadline > now && item_delay(i, deadline - now) >= 0)
                                continue;
                        if (i->extras)
                                i->extras->deadline_usec = 0;
                        item_queue(i);
                }
                workqueue_check_waiters(wq);
        }
        if (count > 0)
                log_info("Recovered %zu queued items", count);
}

/* Item ids given out after a damaged record are nowhere cmwqd can read them
 * any more: new ones continue this far above the last recovered, so that no
 * id a client holds names another item ('cmwqctl wait ID' of a lost item
 * says it does not exist, rather than report someone else's).  IDs are 64
 * bits: the gap costs nothing. */
#define STORE_DAMAGE_ID_GAP (UINT64_C(1) << 32)

int core_store_attach(struct core *c, struct store *s) {
        int r;

        if (store_damaged(s)) {
                c->next_id += STORE_DAMAGE_ID_GAP;
                log_warning("Item ids continue from %" PRIu64 ": ids given out after the damage in the state log "
                            "are not given again", c->next_id);
        }
        c->restoring = false;
        core_store_restore_envs_done(c);
        core_store_settle(c);
        core_store_orphans(c);
        r = core_store_start(c, s);
        if (r < 0)
                return r;
        core_store_requeue(c);
        return 0;
}
