/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Requests of the Unix socket protocol, mapped onto the core.  Replies borrow
 * the core's strings (they are packed at once), so building one allocates
 * only the arrays of repeated fields.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/errno-map.h"
#include "ipc/socket.h"
#include "util.h"

/* A request whose reply waits for the core. */
struct ipc_call {
        struct core_waiter waiter;
        struct list_head entry;
        struct ipc_client *client;
        uint64_t request_id;
        Cmwq__Request__BodyCase kind;
        bool already_pending;           /* a submit that waits for the item its key had pending */
};

static struct core *client_core(struct ipc_client *c) {
        return ipc_server_core(c->server);
}

/* @unlogged: for a reply that acknowledges nothing the state log keeps
 * (ipc_client_send_unlogged()). */
static void send_core_error_as(struct ipc_client *c, uint64_t id, const struct core_error *e, bool unlogged) {
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;

        resp.id = id;
        resp.error = errno_to_protocol_error(e->error);
        resp.message = (char *) (e->message[0] ? e->message : "request failed");
        resp.limit = (char *) e->limit;
        (void) (unlogged ? ipc_client_send_unlogged(c, &resp) : ipc_client_send(c, &resp));
}

static void send_core_error(struct ipc_client *c, uint64_t id, const struct core_error *e) {
        send_core_error_as(c, id, e, false);
}

static void send_done_as(struct ipc_client *c, uint64_t id, bool unlogged) {
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__Empty empty = CMWQ__EMPTY__INIT;

        resp.id = id;
        resp.body_case = CMWQ__RESPONSE__BODY_DONE;
        resp.done = &empty;
        (void) (unlogged ? ipc_client_send_unlogged(c, &resp) : ipc_client_send(c, &resp));
}

static void send_done(struct ipc_client *c, uint64_t id) {
        send_done_as(c, id, false);
}

/* Encodes the view @v as @info (which borrows its strings). */
static void item_info_encode(Cmwq__ItemInfo *info, const struct core_item_info *v) {
        cmwq__item_info__init(info);
        info->id = v->id;
        info->workqueue = (char *) v->workqueue;
        info->state = (Cmwq__ItemState) v->state;
        info->has_uid = true;
        info->uid = v->uid;
        info->n_argv = strv_length(v->argv);
        info->argv = v->argv;
        info->has_cpu = true;
        info->cpu = v->cpu;
        info->has_requeues = v->requeues > 0;
        info->requeues = v->requeues;
        info->has_interruptions = v->interruptions > 0;
        info->interruptions = v->interruptions;
        info->has_queued_usec = true;
        info->queued_usec = v->queued_usec;
        info->key = (char *) v->key;
        if (v->started_usec) {
                info->has_started_usec = true;
                info->started_usec = v->started_usec;
        }
        if (v->has_result) {
                if (v->has_exit) {
                        if (v->signal) {
                                info->has_signal = true;
                                info->signal = v->signal;
                        } else {
                                info->has_exit_status = true;
                                info->exit_status = v->exit_status;
                        }
                }
                info->has_cpu_usec = true;
                info->cpu_usec = v->cpu_usec;
                info->has_stdout_data = true;
                info->stdout_data = (ProtobufCBinaryData) { v->out_len, (uint8_t *) v->out };
                info->has_stderr_data = true;
                info->stderr_data = (ProtobufCBinaryData) { v->err_len, (uint8_t *) v->err };
                info->has_stdout_truncated = true;
                info->stdout_truncated = v->out_truncated;
                info->has_stderr_truncated = true;
                info->stderr_truncated = v->err_truncated;
                info->has_timed_out = true;
                info->timed_out = v->timed_out;
                info->has_cpu_intensive = true;
                info->cpu_intensive = v->cpu_intensive;
        }
        if (v->finished_usec) {
                info->has_finished_usec = true;
                info->finished_usec = v->finished_usec;
        }
        if (v->error[0])
                info->error = (char *) v->error;
}

/* @as_submit: a submit's reply, @already_pending its flag. */
static void send_item(struct ipc_client *c, uint64_t id, const struct item *i, bool as_submit, bool already_pending) {
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__SubmitReply submit = CMWQ__SUBMIT_REPLY__INIT;
        struct core_item_info v;
        Cmwq__ItemInfo info;

        core_item_info(i, &v);
        item_info_encode(&info, &v);
        resp.id = id;
        if (as_submit) {
                submit.id = v.id;
                submit.item = &info;
                submit.has_already_pending = true;
                submit.already_pending = already_pending;
                resp.body_case = CMWQ__RESPONSE__BODY_SUBMIT;
                resp.submit = &submit;
        } else {
                resp.body_case = CMWQ__RESPONSE__BODY_ITEM;
                resp.item = &info;
        }
        /* A reply over the frame limit is answered with an error there. */
        (void) ipc_client_send(c, &resp);
}

/* The holders of a freeze, counted (@views NULL), then encoded. */
struct freeze_holders {
        struct core_item_info *views;
        Cmwq__ItemInfo *infos;
        Cmwq__ItemInfo **ptrs;
        size_t n, total;
        Cmwq__CallbackHolder *holders;
        Cmwq__CallbackHolder **holder_ptrs;
        size_t nh, total_holds;
};

static int freeze_holder_encode(const struct core_freeze_holder *h, void *userdata) {
        struct freeze_holders *f = userdata;

        if (!f->views) {
                (void) (h->item ? f->total++ : f->total_holds++);
                return 0;
        }
        if (h->item && f->n < f->total) {
                core_item_info(h->item, &f->views[f->n]);
                item_info_encode(&f->infos[f->n], &f->views[f->n]);
                f->ptrs[f->n] = &f->infos[f->n];
                f->n++;
        } else if (!h->item && f->nh < f->total_holds) {
                cmwq__callback_holder__init(&f->holders[f->nh]);
                f->holders[f->nh].pid = (uint32_t) h->pid;
                f->holders[f->nh].workqueue = (char *) h->workqueue;
                f->holder_ptrs[f->nh] = &f->holders[f->nh];
                f->nh++;
        }
        return 0;
}

static void freeze_holders_done(struct freeze_holders *f) {
        free(f->views);
        free(f->infos);
        free(f->ptrs);
        free(f->holders);
        free(f->holder_ptrs);
}

/* A freeze that timed out: the reply names the items that held it (the
 * queues stay frozen). */
static void send_freeze_holders(struct ipc_client *c, uint64_t id) {
        struct core *core = client_core(c);
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__FreezeReply reply = CMWQ__FREEZE_REPLY__INIT;
        _cleanup_(freeze_holders_done) struct freeze_holders f = {};

        (void) core_freeze_holders(core, freeze_holder_encode, &f);
        f.views = calloc(f.total ? f.total : 1, sizeof(*f.views));
        f.infos = calloc(f.total ? f.total : 1, sizeof(*f.infos));
        f.ptrs = calloc(f.total ? f.total : 1, sizeof(*f.ptrs));
        f.holders = calloc(f.total_holds ? f.total_holds : 1, sizeof(*f.holders));
        f.holder_ptrs = calloc(f.total_holds ? f.total_holds : 1, sizeof(*f.holder_ptrs));
        if (!f.views || !f.infos || !f.ptrs || !f.holders || !f.holder_ptrs) {
                ipc_client_send_error(c, id, -ENOMEM, "out of memory", false);
                return;
        }
        (void) core_freeze_holders(core, freeze_holder_encode, &f);
        reply.n_holding = f.n;
        reply.holding = f.ptrs;
        reply.n_callbacks = f.nh;
        reply.callbacks = f.holder_ptrs;
        resp.id = id;
        resp.message = (char *) "freeze timed out: these items (or clients' callbacks) were still running; "
                                "the queues stay frozen";
        resp.body_case = CMWQ__RESPONSE__BODY_FREEZE;
        resp.freeze = &reply;
        (void) ipc_client_send(c, &resp);
}

static void ipc_call_done(struct core_waiter *w, int r) {
        struct ipc_call *call = container_of(w, struct ipc_call, waiter);
        struct ipc_client *c = call->client;
        struct item *i;

        list_del_init(&call->entry);
        c->nr_calls--;

        switch (call->kind) {
        case CMWQ__REQUEST__BODY_SUBMIT:
        case CMWQ__REQUEST__BODY_WAIT:
        case CMWQ__REQUEST__BODY_CANCEL:
                i = core_item_lookup(client_core(c), w->item_id);
                if (!i)
                        ipc_client_send_error(c, call->request_id, -ENOENT, "the item is gone from the history", false);
                else
                        send_item(c, call->request_id, i, call->kind == CMWQ__REQUEST__BODY_SUBMIT,
                                  call->already_pending);
                break;
        case CMWQ__REQUEST__BODY_FREEZE:
                if (r == -ETIMEDOUT)
                        send_freeze_holders(c, call->request_id);
                else if (r < 0)
                        ipc_client_send_error(c, call->request_id, r, strerror(-r), false);
                else
                        send_done(c, call->request_id);
                break;
        default:
                if (r < 0)
                        ipc_client_send_error(c, call->request_id, r, "the workqueue was destroyed meanwhile", false);
                else
                        send_done(c, call->request_id);
                break;
        }
        free(call);
}

void ipc_client_cancel_calls(struct ipc_client *c) {
        while (!list_empty(&c->calls)) {
                struct ipc_call *call = list_first_entry(&c->calls, struct ipc_call, entry);

                core_waiter_cancel(&call->waiter);
                list_del_init(&call->entry);
                free(call);
        }
        c->nr_calls = 0;
}

static struct ipc_call *ipc_call_new(struct ipc_client *c, const Cmwq__Request *req) {
        struct ipc_call *call;

        if (c->nr_calls >= IPC_CLIENT_CALLS_MAX) {
                ipc_client_send_error(c, req->id, -EMFILE, "too many requests waiting on this connection", false);
                return NULL;
        }
        call = calloc(1, sizeof(*call));
        if (!call) {
                ipc_client_send_error(c, req->id, -ENOMEM, "out of memory", false);
                return NULL;
        }
        core_waiter_init(&call->waiter, ipc_call_done);
        list_init(&call->entry);
        call->client = c;
        call->request_id = req->id;
        call->kind = req->body_case;
        return call;
}

/* The core queued the call's waiter: the client owns the call until the
 * reply (or until it goes away). */
static void ipc_call_park(struct ipc_client *c, struct ipc_call *call) {
        list_add_tail(&call->entry, &c->calls);
        c->nr_calls++;
}

/* Finishes a request that may wait: @r is what the core call returned. */
static void ipc_call_settle(struct ipc_client *c, struct ipc_call *call, int r, const struct core_error *e) {
        if (r == 1) {
                ipc_call_park(c, call);
                return;
        }
        if (r < 0)
                send_core_error(c, call->request_id, e);
        else
                send_done(c, call->request_id);
        free(call);
}

static void dispatch_submit(struct ipc_client *c, const Cmwq__Request *req) {
        const Cmwq__Submit *s = req->submit;
        struct ipc_call *call = NULL;
        struct core_error e = {};
        bool already = false;
        uint64_t id = 0;
        int r;

        struct submit_args a = {
                .workqueue = s->workqueue,
                .argv = s->argv,
                .argc = s->n_argv,
                .envp = s->env,
                .envc = s->n_env,
                .cwd = s->cwd,
                .payload = s->has_stdin_payload ? s->stdin_payload.data : NULL,
                .payload_len = s->has_stdin_payload ? s->stdin_payload.len : 0,
                .cpu = s->has_cpu ? s->cpu : -1,
                .delay_usec = s->has_delay_usec ? s->delay_usec : 0,
                .key = s->key,
                .timeout_usec = s->has_timeout_usec ? s->timeout_usec : 0,
        };

        if (s->has_wait && s->wait) {
                call = ipc_call_new(c, req);
                if (!call)
                        return;
        }

        r = core_submit(client_core(c), &c->caller, &a, call ? &call->waiter : NULL, &id, &already, &e);
        if (r == 1) {
                call->already_pending = already;
                if (already)
                        log_debug("Client pid %d waits for item %" PRIu64 ", which had its work key pending",
                                  (int) c->caller.pid, id);
                ipc_call_park(c, call);
                return;
        }
        free(call);
        if (r < 0) {
                send_core_error(c, req->id, &e);
                return;
        }

        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__SubmitReply reply = CMWQ__SUBMIT_REPLY__INIT;
        reply.id = id;
        reply.has_already_pending = true;
        reply.already_pending = already;
        resp.id = req->id;
        resp.body_case = CMWQ__RESPONSE__BODY_SUBMIT;
        resp.submit = &reply;
        (void) ipc_client_send(c, &resp);
}

static void dispatch_item(struct ipc_client *c, const Cmwq__Request *req) {
        struct core *core = client_core(c);
        struct core_error e = {};
        struct ipc_call *call;
        struct item *i;
        uint64_t id;
        int r;

        if (req->body_case == CMWQ__REQUEST__BODY_SHOW) {
                r = core_item_get(core, &c->caller, req->show->id, &i, &e);
                if (r < 0)
                        send_core_error(c, req->id, &e);
                else
                        send_item(c, req->id, i, false, false);
                return;
        }

        call = ipc_call_new(c, req);
        if (!call)
                return;
        if (req->body_case == CMWQ__REQUEST__BODY_WAIT) {
                id = req->wait->id;
                r = core_item_wait(core, &c->caller, id, &call->waiter, &e);
        } else {
                id = req->cancel->id;
                r = core_item_cancel(core, &c->caller, id, &call->waiter, &e);
        }
        if (r == 0) {
                /* Already ended: the reply is the item as it is now. */
                free(call);
                i = core_item_lookup(core, id);
                if (i)
                        send_item(c, req->id, i, false, false);
                else
                        send_done(c, req->id);
                return;
        }
        ipc_call_settle(c, call, r, &e);
}

static void dispatch_workqueue_wait(struct ipc_client *c, const Cmwq__Request *req) {
        struct core *core = client_core(c);
        struct core_error e = {};
        struct ipc_call *call;
        int r;

        call = ipc_call_new(c, req);
        if (!call)
                return;
        switch (req->body_case) {
        case CMWQ__REQUEST__BODY_FLUSH:
                r = core_workqueue_flush(core, &c->caller, req->flush->name, &call->waiter, &e);
                break;
        case CMWQ__REQUEST__BODY_DRAIN:
                r = core_workqueue_drain(core, &c->caller, req->drain->name, &call->waiter, &e);
                break;
        case CMWQ__REQUEST__BODY_DESTROY:
                r = core_workqueue_destroy(core, &c->caller, req->destroy->name, &call->waiter, &e);
                break;
        default: {
                const char *name = req->freeze->name && req->freeze->name[0] ? req->freeze->name : NULL;
                uint64_t timeout = req->freeze->has_timeout_usec ? req->freeze->timeout_usec : 0;

                r = core_freeze(core, &c->caller, name, timeout, &call->waiter, &e);
                break;
        }
        }
        ipc_call_settle(c, call, r, &e);
}

struct list_arrays {
        Cmwq__WorkqueueInfo *infos;
        Cmwq__WorkqueueInfo **ptrs;
        size_t n;
};

static int workqueue_info_encode(struct workqueue *wq, const struct core_workqueue_info *v, void *userdata) {
        struct list_arrays *a = userdata;
        Cmwq__WorkqueueInfo *w = &a->infos[a->n];

        cmwq__workqueue_info__init(w);
        w->name = (char *) v->name;
        w->flags = v->flags;
        w->max_active = v->max_active;
        w->has_owner_uid = true;
        w->owner_uid = v->owner;
        w->has_frozen = true;
        w->frozen = v->frozen;
        w->has_draining = true;
        w->draining = v->draining;
        w->has_pending = true;
        w->pending = v->pending;
        w->has_running = true;
        w->running = v->running;
        w->has_total = true;
        w->total = v->stats.pool.started;
        w->has_builtin = true;
        w->builtin = v->builtin;
        w->has_on_interrupt = true;
        w->on_interrupt = (Cmwq__InterruptPolicy) v->on_interrupt;
        if (v->connection_owned) {
                w->has_owner_pid = true;
                w->owner_pid = (uint32_t) v->owner_pid;
                w->has_owner_gone = true;
                w->owner_gone = v->owner_gone;
        }
        a->ptrs[a->n++] = w;
        return 0;
}

static void dispatch_list(struct ipc_client *c, const Cmwq__Request *req) {
        struct core *core = client_core(c);
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__ListReply list = CMWQ__LIST_REPLY__INIT;
        size_t total = core_nr_workqueues(core);
        struct list_arrays a = {
                .infos = calloc(total ? total : 1, sizeof(*a.infos)),
                .ptrs = calloc(total ? total : 1, sizeof(*a.ptrs)),
        };

        if (!a.infos || !a.ptrs) {
                free(a.infos);
                free(a.ptrs);
                ipc_client_send_error(c, req->id, -ENOMEM, "out of memory", false);
                return;
        }
        (void) core_for_each_workqueue(core, &c->caller, workqueue_info_encode, &a);
        list.n_workqueues = a.n;
        list.workqueues = a.ptrs;
        resp.id = req->id;
        resp.body_case = CMWQ__RESPONSE__BODY_LIST;
        resp.list = &list;
        (void) ipc_client_send(c, &resp);
        free(a.infos);
        free(a.ptrs);
}

/* At most this many items in an Items reply (proto/cmwq.proto, ItemsReply):
 * a shell has nothing to do with more, and the reply stays far below a
 * frame's limit whatever the names. */
#define IPC_ITEMS_REPLY_MAX 1024

struct items_arrays {
        Cmwq__ItemInfo *infos;
        Cmwq__ItemInfo **ptrs;
        size_t n;
};

/* 1 (stop): the reply is full, and this item is one more than it holds. */
static int items_add(struct item *item, void *userdata) {
        struct items_arrays *a = userdata;
        struct core_item_info v;
        Cmwq__ItemInfo *info;

        if (a->n >= IPC_ITEMS_REPLY_MAX)
                return 1;
        core_item_info(item, &v);
        info = &a->infos[a->n];
        cmwq__item_info__init(info);
        info->id = v.id;
        info->workqueue = (char *) v.workqueue;
        info->state = (Cmwq__ItemState) v.state;
        a->ptrs[a->n++] = info;
        return 0;
}

/* The caller's own items (root's too are only its own: this is for the
 * completion of IDs, not an audit). */
static void dispatch_items(struct ipc_client *c, const Cmwq__Request *req) {
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__ItemsReply reply = CMWQ__ITEMS_REPLY__INIT;
        _cleanup_(freep) Cmwq__ItemInfo *infos = NULL;
        _cleanup_(freep) Cmwq__ItemInfo **ptrs = NULL;
        struct items_arrays a;
        bool full;

        infos = calloc(IPC_ITEMS_REPLY_MAX, sizeof(*infos));
        ptrs = calloc(IPC_ITEMS_REPLY_MAX, sizeof(*ptrs));
        if (!infos || !ptrs) {
                ipc_client_send_error(c, req->id, -ENOMEM, "out of memory", false);
                return;
        }
        a = (struct items_arrays) { .infos = infos, .ptrs = ptrs };
        /* full: one more than the reply holds. */
        full = core_for_each_item_of(client_core(c), &c->caller, items_add, &a) > 0;
        reply.n_items = a.n;
        reply.items = ptrs;
        reply.has_truncated = true;
        reply.truncated = full;
        resp.id = req->id;
        resp.body_case = CMWQ__RESPONSE__BODY_ITEMS;
        resp.items = &reply;
        (void) ipc_client_send(c, &resp);
}

/* The pools and the visible queues' statistics, in arrays that point into
 * the daemon's state (names): send them before anything changes.  Used by
 * the Pools, Stats and Snapshot requests alike. */
struct stats_arrays {
        Cmwq__PoolInfo *pool_infos;
        Cmwq__PoolInfo **pools;
        size_t n_pools;
        Cmwq__WorkqueueStats *wq_infos;
        Cmwq__WorkqueueStats **workqueues;
        size_t n_workqueues;
};

static void stats_arrays_done(struct stats_arrays *a) {
        free(a->pool_infos);
        free(a->pools);
        free(a->wq_infos);
        free(a->workqueues);
}

static int pool_info_encode(const struct core_pool_info *p, void *userdata) {
        struct stats_arrays *a = userdata;
        Cmwq__PoolInfo *pi = &a->pool_infos[a->n_pools];

        cmwq__pool_info__init(pi);
        pi->cpu = p->cpu;
        pi->highpri = p->highpri;
        pi->workers = p->workers;
        pi->running = p->running;
        pi->idle = p->idle;
        pi->pending = p->pending;
        pi->has_busy = true;
        pi->busy = p->busy;
        pi->has_blocked = true;
        pi->blocked = p->blocked;
        pi->has_callback_threads = true;
        pi->callback_threads = p->callback_threads;
        pi->has_callbacks = true;
        pi->callbacks = p->callbacks;
        pi->has_started = true;
        pi->started = p->counters.started;
        pi->has_sleeps = true;
        pi->sleeps = p->counters.sleeps;
        pi->has_wakes = true;
        pi->wakes = p->counters.wakes;
        pi->has_cm_wakeups = true;
        pi->cm_wakeups = p->counters.cm_wakeups;
        pi->has_contended = true;
        pi->contended = p->counters.contended;
        a->pools[a->n_pools++] = pi;
        return 0;
}

static int fill_pools(const struct core *core, struct stats_arrays *a) {
        size_t total = core_nr_pools(core);

        a->pool_infos = calloc(total, sizeof(Cmwq__PoolInfo));
        a->pools = calloc(total, sizeof(Cmwq__PoolInfo *));
        if (!a->pool_infos || !a->pools)
                return -ENOMEM;
        return core_for_each_pool(core, pool_info_encode, a);
}

static int workqueue_stats_encode(struct workqueue *wq, const struct core_workqueue_info *v, void *userdata) {
        struct stats_arrays *a = userdata;
        Cmwq__WorkqueueStats *s = &a->wq_infos[a->n_workqueues];

        cmwq__workqueue_stats__init(s);
        s->name = (char *) v->name;
        s->total = v->stats.pool.started;
        s->in_flight = v->in_flight;
        s->cpu_usec = v->stats.cpu_usec;
        s->cpu_intensive = v->stats.pool.cpu_intensive;
        s->cm_wakeups = v->stats.pool.cm_wakeups;
        s->mayday = v->stats.pool.mayday;
        s->rescued = v->stats.pool.rescued;
        s->has_requeued = true;
        s->requeued = v->stats.requeued;
        s->has_failed = true;
        s->failed = v->stats.failed;
        s->has_timed_out = true;
        s->timed_out = v->stats.timed_out;
        s->has_watchdog = true;
        s->watchdog = v->stats.watchdog;
        s->has_completed = true;
        s->completed = v->stats.completed;
        s->has_flags = true;
        s->flags = v->flags;
        s->has_owner_uid = true;
        s->owner_uid = v->owner;
        a->workqueues[a->n_workqueues++] = s;
        return 0;
}

static int fill_stats(struct core *core, const struct core_caller *caller, struct stats_arrays *a) {
        size_t total = core_nr_workqueues(core);

        a->wq_infos = calloc(total ? total : 1, sizeof(Cmwq__WorkqueueStats));
        a->workqueues = calloc(total ? total : 1, sizeof(Cmwq__WorkqueueStats *));
        if (!a->wq_infos || !a->workqueues)
                return -ENOMEM;
        return core_for_each_workqueue(core, caller, workqueue_stats_encode, a);
}

/* Pools, Stats, Snapshot: one handler, the reply differs. */
static void dispatch_stats(struct ipc_client *c, const Cmwq__Request *req) {
        _cleanup_(stats_arrays_done) struct stats_arrays a = {};
        struct core *core = client_core(c);
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__PoolsReply pools = CMWQ__POOLS_REPLY__INIT;
        Cmwq__StatsReply stats = CMWQ__STATS_REPLY__INIT;
        Cmwq__SnapshotReply snapshot = CMWQ__SNAPSHOT_REPLY__INIT;
        bool want_pools = req->body_case != CMWQ__REQUEST__BODY_STATS;
        bool want_stats = req->body_case != CMWQ__REQUEST__BODY_POOLS;

        if (want_pools)
                core_refresh_pool_counts(core);
        if ((want_pools && fill_pools(core, &a) < 0) || (want_stats && fill_stats(core, &c->caller, &a) < 0)) {
                ipc_client_send_error(c, req->id, -ENOMEM, "out of memory", false);
                return;
        }
        resp.id = req->id;
        switch (req->body_case) {
        case CMWQ__REQUEST__BODY_POOLS:
                pools.n_pools = a.n_pools;
                pools.pools = a.pools;
                resp.body_case = CMWQ__RESPONSE__BODY_POOLS;
                resp.pools = &pools;
                break;
        case CMWQ__REQUEST__BODY_STATS:
                stats.n_workqueues = a.n_workqueues;
                stats.workqueues = a.workqueues;
                resp.body_case = CMWQ__RESPONSE__BODY_STATS;
                resp.stats = &stats;
                break;
        default:
                snapshot.n_pools = a.n_pools;
                snapshot.pools = a.pools;
                snapshot.n_workqueues = a.n_workqueues;
                snapshot.workqueues = a.workqueues;
                snapshot.monotonic_usec = now_usec(CLOCK_MONOTONIC);
                resp.body_case = CMWQ__RESPONSE__BODY_SNAPSHOT;
                resp.snapshot = &snapshot;
                break;
        }
        (void) ipc_client_send(c, &resp);
}

/* Unprompted: the response id 0 says it answers no request. */
static void send_callback_freeze(const char *name, bool frozen, uint32_t seq, void *userdata) {
        struct ipc_client *c = userdata;
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__CallbackFreeze freeze = CMWQ__CALLBACK_FREEZE__INIT;

        freeze.workqueue = (char *) name;
        freeze.frozen = frozen;
        freeze.has_seq = seq != 0;
        freeze.seq = seq;
        resp.id = 0;
        resp.body_case = CMWQ__RESPONSE__BODY_CALLBACK_FREEZE;
        resp.callback_freeze = &freeze;
        /* Not for the log to keep, and it must not come after the grants
         * the shared memory carries at once. */
        (void) ipc_client_send_unlogged(c, &resp);
}

static void callback_broken(const char *why, void *userdata) {
        struct ipc_client *c = userdata;
        char msg[256];

        snprintf(msg, sizeof(msg), "the shared memory is broken: %s", why);
        ipc_client_send_error(c, 0, -EBADMSG, msg, true);
}

/* Answers CallbackAttach itself: the reply carries the region's fds. */
static void dispatch_callback_attach(struct ipc_client *c, const Cmwq__Request *req) {
        struct core *core = client_core(c);
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__CallbackAttached attached = CMWQ__CALLBACK_ATTACHED__INIT;
        _cleanup_(freep) uint32_t *cpus = NULL;
        _cleanup_(closep) int memfd = -1;
        struct callback_registry *registry;
        struct core_error e = {};
        int fds[2], eventfd = -1, pidfd = -1, r;

        if (c->callback)
                r = core_error_set(&e, -EEXIST, "the shared memory is attached already");
        else if (req->callback_attach->layout_version != CMWQ_SHM_VERSION)
                r = core_error_set(&e, -EPROTONOSUPPORT, "shared memory layout %u is not cmwqd's (%u)",
                                   req->callback_attach->layout_version, CMWQ_SHM_VERSION);
        else if ((r = ipc_server_callbacks(c->server, &registry)) < 0)
                core_error_set(&e, r, "out of memory");
        else if (!(cpus = calloc(core_nr_cpus(core) ? core_nr_cpus(core) : 1, sizeof(*cpus))))
                r = core_error_set(&e, -ENOMEM, "out of memory");
        else if ((r = ipc_client_peer_pidfd(c, &pidfd)) == -ESRCH)
                r = core_error_set(&e, r, "the process that connected (PID %d) has exited: its threads cannot be "
                                   "callback workers", (int) c->caller.pid);
        else if (r < 0 && r != -EOPNOTSUPP)
                core_error_set(&e, r, "cannot tell the process that connected: %s", strerror(-r));
        else
                /* Without pidfds (-EOPNOTSUPP) the pid is believed, as before. */
                r = callback_client_new(registry, &c->caller, r < 0 ? -1 : pidfd,
                                        (req->callback_attach->has_credits && req->callback_attach->credits
                                                 ? CALLBACK_CLIENT_CREDITS : 0) |
                                        (req->callback_attach->has_grant_taken && req->callback_attach->grant_taken
                                                 ? CALLBACK_CLIENT_GRANT_TAKEN : 0),
                                        send_callback_freeze,
                                        callback_broken, c, &c->callback, &memfd, &eventfd, &e);
        if (r < 0) {
                send_core_error_as(c, req->id, &e, true);
                return;
        }
        resp.id = req->id;
        for (unsigned cpu = 0; cpu < core_nr_cpus(core); cpu++)
                if (core_cpu_allowed(core, cpu))
                        cpus[attached.n_cpus++] = cpu;
        attached.layout_version = CMWQ_SHM_VERSION;
        attached.cpus = cpus;
        resp.body_case = CMWQ__RESPONSE__BODY_CALLBACK_ATTACHED;
        resp.callback_attached = &attached;
        fds[0] = memfd;
        fds[1] = eventfd;
        r = ipc_client_send_fds(c, &resp, fds, 2);
        if (r < 0)
                log_warning_errno(r, "Cannot pass the shared memory to client pid %d: %m", (int) c->caller.pid);
}

static int dispatch_callback(struct ipc_client *c, const Cmwq__Request *req, struct core_error *e) {
        if (!c->callback)
                return core_error_set(e, -ENOENT, "the shared memory is not attached");
        /* What the ring said before this request comes first. */
        if (callback_client_sync(c->callback) < 0)
                return core_error_set(e, -EBADMSG, "the shared memory is broken");

        if (req->body_case == CMWQ__REQUEST__BODY_CALLBACK_REGISTER)
                return callback_worker_register(c->callback, (pid_t) req->callback_register->tid,
                                                req->callback_register->slot, req->callback_register->cpu,
                                                req->callback_register->has_highpri && req->callback_register->highpri,
                                                e);
        return callback_worker_unregister(c->callback, (pid_t) req->callback_unregister->tid, e);
}

void ipc_dispatch(struct ipc_client *c, Cmwq__Request *req) {
        struct core *core = client_core(c);
        struct core_error e = {};
        int r;

        switch (req->body_case) {
        case CMWQ__REQUEST__BODY_CREATE: {
                unsigned policy = req->create->has_on_interrupt ? (unsigned) req->create->on_interrupt
                                                                : INTERRUPT_DROP;

                if (policy >= _INTERRUPT_POLICY_MAX) {
                        r = core_error_set(&e, -EINVAL, "unknown on_interrupt policy %u (0 drop, 1 rerun)", policy);
                        break;
                }
                r = core_workqueue_create_owned(core, &c->caller, req->create->name,
                                                req->create->has_flags ? req->create->flags : 0,
                                                req->create->has_max_active ? req->create->max_active : 0,
                                                req->create->has_owned_by_connection &&
                                                                req->create->owned_by_connection
                                                        ? &c->owned : NULL,
                                                &e);
                if (r >= 0 && policy != INTERRUPT_DROP)
                        r = core_workqueue_set_on_interrupt(core, &c->caller, req->create->name, policy, &e);
                break;
        }
        case CMWQ__REQUEST__BODY_SET_MAX_ACTIVE:
                r = core_workqueue_set_max_active(core, &c->caller, req->set_max_active->name,
                                                  req->set_max_active->max_active, &e);
                break;
        case CMWQ__REQUEST__BODY_THAW:
                r = core_thaw(core, &c->caller,
                              req->thaw->name && req->thaw->name[0] ? req->thaw->name : NULL, &e);
                break;
        case CMWQ__REQUEST__BODY_SUBMIT:
                dispatch_submit(c, req);
                return;
        case CMWQ__REQUEST__BODY_WAIT:
        case CMWQ__REQUEST__BODY_SHOW:
        case CMWQ__REQUEST__BODY_CANCEL:
                dispatch_item(c, req);
                return;
        case CMWQ__REQUEST__BODY_FLUSH:
        case CMWQ__REQUEST__BODY_DRAIN:
        case CMWQ__REQUEST__BODY_DESTROY:
        case CMWQ__REQUEST__BODY_FREEZE:
                dispatch_workqueue_wait(c, req);
                return;
        case CMWQ__REQUEST__BODY_LIST:
                dispatch_list(c, req);
                return;
        case CMWQ__REQUEST__BODY_ITEMS:
                dispatch_items(c, req);
                return;
        case CMWQ__REQUEST__BODY_POOLS:
        case CMWQ__REQUEST__BODY_STATS:
        case CMWQ__REQUEST__BODY_SNAPSHOT:
                dispatch_stats(c, req);
                return;
        case CMWQ__REQUEST__BODY_CALLBACK_ATTACH:
                dispatch_callback_attach(c, req);
                return;
        case CMWQ__REQUEST__BODY_CALLBACK_REGISTER:
        case CMWQ__REQUEST__BODY_CALLBACK_UNREGISTER:
                /* A new worker thread waits for this: not for the disk too. */
                r = dispatch_callback(c, req, &e);
                if (r < 0)
                        send_core_error_as(c, req->id, &e, true);
                else
                        send_done_as(c, req->id, true);
                return;
        default:
                ipc_client_send_error(c, req->id, -EPROTO, "unknown request", true);
                return;
        }

        if (r < 0)
                send_core_error(c, req->id, &e);
        else
                send_done(c, req->id);
}
