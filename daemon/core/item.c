/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Exec work items: execution through exec/exec.c under the pools'
 * concurrency management, completion, requeue on EX_TEMPFAIL, cancel and
 * wait, and the bounded history of finished items.  Submission (the checks
 * and the new item) is core/submit.c's.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/core-internal.h"
#include "pool-policy.h"
#include "util.h"

/* The identity of work queued under one key: at most one pending instance,
 * and never two running at once (the pools see it as the work's identity).
 * A key is the submitter's own: on a shared queue another user's pending
 * item of the same name is other work, not something to hand out. */
struct work_key {
        struct work_key *next;
        struct item *pending;
        struct item *running;
        uid_t uid;
        char name[];
};

const char *item_state_to_string(enum item_state s) {
        static const char *const names[] = {
                [ITEM_DELAYED] = "delayed",     [ITEM_INACTIVE] = "inactive",
                [ITEM_PENDING] = "pending",     [ITEM_RUNNING] = "running",
                [ITEM_FINISHED] = "finished",   [ITEM_CANCELLED] = "cancelled",
                [ITEM_FAILED] = "failed",       [ITEM_INTERRUPTED] = "interrupted",
        };
        return (unsigned) s < ELEMENTSOF(names) ? names[s] : "unknown";
}

int core_for_each_item_of(struct core *c, const struct core_caller *caller,
                          int (*fn)(struct item *i, void *userdata), void *userdata) {
        struct user_usage *u;
        struct workqueue *wq;
        struct item *i;
        int r = 0;

        list_for_each_entry(wq, &c->workqueues, entry) {
                if (!workqueue_visible_to(wq, caller))
                        continue;
                list_for_each_entry(i, &wq->items, wq_entry)
                        if (i->uid == caller->uid && (r = fn(i, userdata)) != 0)
                                return r;
        }
        u = user_usage_get(&c->users, caller->uid);
        if (!u)
                return 0;
        /* The history is oldest first. */
        for (struct list_head *p = u->history.prev; p != &u->history && r == 0; p = p->prev)
                r = fn(list_entry(p, struct item, user_history_entry), userdata);
        user_usage_put(&c->users, u);
        return r;
}

void core_item_info(const struct item *i, struct core_item_info *ret) {
        const struct item_run *run = item_ran(i);

        *ret = (struct core_item_info) {
                .id = i->id,
                .workqueue = item_wq_name(i),
                .state = i->state,
                .uid = i->uid,
                .argv = (char **) i->argv,
                .key = item_key_name(i),
                .cpu = i->cpu,
                .requeues = item_extra(i)->requeues,
                .interruptions = item_extra(i)->interruptions,
                .queued_usec = i->queued_usec,
                .started_usec = run->started_usec,
                .finished_usec = item_is_finished(i) ? item_extra(i)->finished_usec : 0,
                .has_result = item_is_finished(i) || item_extra(i)->requeues > 0,
                .has_exit = item_has_exit(i),
                .exit_status = run->exit_status,
                .signal = run->signal,
                .cpu_usec = run->cpu_usec,
                .out = run->out,
                .err = run->err,
                .out_len = run->out_len,
                .err_len = run->err_len,
                .out_truncated = i->out_truncated,
                .err_truncated = i->err_truncated,
                .timed_out = i->timed_out,
                .cpu_intensive = i->cpu_intensive,
        };
        if (run->exec_errno & EXEC_ERRNO_IN_CWD)
                snprintf(ret->error, sizeof(ret->error), "cannot enter the working directory %s: %s", item_cwd(i),
                         exec_strerror(run->exec_errno));
        else if (run->exec_errno)
                snprintf(ret->error, sizeof(ret->error), "cannot run %s: %s", i->argv[0],
                         exec_strerror(run->exec_errno));
}

const char *interrupt_policy_to_string(enum interrupt_policy p) {
        return p == INTERRUPT_RERUN ? "rerun" : "drop";
}

static struct work_key *work_key_find(struct workqueue *wq, uid_t uid, const char *name) {
        for (struct work_key *k = wq->keys; k; k = k->next)
                if (k->uid == uid && strcmp(k->name, name) == 0)
                        return k;
        return NULL;
}

static struct work_key *work_key_get(struct workqueue *wq, uid_t uid, const char *name) {
        struct work_key *k = work_key_find(wq, uid, name);
        size_t n;

        if (k)
                return k;
        n = strlen(name);
        k = calloc(1, sizeof(*k) + n + 1);
        if (!k)
                return NULL;
        memcpy(k->name, name, n + 1);
        k->uid = uid;
        k->next = wq->keys;
        wq->keys = k;
        return k;
}

static void work_key_release(struct workqueue *wq, struct work_key *k, struct item *i) {
        if (k->pending == i)
                k->pending = NULL;
        if (k->running == i)
                k->running = NULL;
        if (k->pending || k->running)
                return;
        for (struct work_key **p = &wq->keys; *p; p = &(*p)->next)
                if (*p == k) {
                        *p = k->next;
                        break;
                }
        free(k);
}

static const struct pool_work_ops item_work_ops;

const struct item_run item_run_none;
const struct item_extras item_extras_none;

struct item_run *item_run_get(struct item *i) {
        if (!i->run) {
                i->run = calloc(1, sizeof(*i->run));
                if (!i->run)
                        return NULL;
                i->run->item = i;
                list_init(&i->run->starting_entry);
        }
        return i->run;
}

struct item_extras *item_extras_get(struct item *i) {
        if (!i->extras) {
                i->extras = calloc(1, sizeof(*i->extras));
                if (i->extras)
                        list_init(&i->extras->waiters);
        }
        return i->extras;
}

const char *item_wq_name(const struct item *i) {
        if (i->wq)
                return i->wq->name;
        return item_extra(i)->wq_name ? item_extra(i)->wq_name : "(out of memory)";
}

struct item *item_free(struct item *i) {
        if (!i)
                return NULL;
        if (i->extras) {
                if (i->extras->timer)
                        event_free(i->extras->timer);
                free(i->extras->key_name);
                free(i->extras->wq_name);
                free(i->extras->payload);
                free(i->extras);
        }
        item_env_put(&i->core->envs, i->env);
        if (i->run) {
                free(i->run->out);
                free(i->run->err);
                free(i->run);
        }
        free(i);
        return NULL;
}

char **item_envp(const struct item *i) {
        return item_env_strv(i->env);
}

struct item_env *item_env(const struct item *i) {
        return i->env;
}

const char *item_cwd(const struct item *i) {
        return (const char *) (i->argv + strv_length((char **) i->argv) + 1);
}

const char *item_program(const struct item *i) {
        const char *cwd = item_cwd(i);

        return i->has_program ? cwd + strlen(cwd) + 1 : NULL;
}

/* Makes an item that runs @argv with @env, whose reference it takes over
 * (on failure too). */
static int item_new_env(struct core *c, struct workqueue *wq, char *const *argv, size_t argc, struct item_env *env,
                        const char *cwd, const char *program, struct item **ret) {
        size_t bytes = strlen(cwd) + 1;
        struct item *i;
        char *p;

        if (program && strcmp(program, argv[0]) == 0)
                program = NULL;
        if (program)
                bytes += strlen(program) + 1;
        for (size_t k = 0; k < argc; k++)
                bytes += strlen(argv[k]) + 1;
        i = calloc(1, sizeof(*i) + (argc + 1) * sizeof(char *) + bytes);
        if (!i) {
                item_env_put(&c->envs, env);
                return -ENOMEM;
        }
        i->core = c;
        i->wq = wq;
        i->cpu = -1;
        list_init(&i->work.entry);
        list_init(&i->share_entry);
        list_init(&i->inflight_entry);
        list_init(&i->wq_entry);
        i->work.ops = &item_work_ops;
        i->work.identity = i;

        i->env = env;
        p = (char *) (i->argv + argc + 1);
        p = stpcpy(p, cwd) + 1;
        if (program)
                p = stpcpy(p, program) + 1;
        for (size_t k = 0; k < argc; k++)
                p = stpcpy(i->argv[k] = p, argv[k]) + 1;
        i->argv[argc] = NULL;
        i->has_program = program != NULL;
        *ret = i;
        return 0;
}

int item_new(struct core *c, struct workqueue *wq, char *const *argv, size_t argc, char *const *envp, size_t envc,
             const char *cwd, const char *program, struct item **ret) {
        struct item_env *env;
        int r;

        r = item_env_get(&c->envs, envp, envc, &env);
        if (r < 0)
                return r;
        return item_new_env(c, wq, argv, argc, env, cwd, program, ret);
}

int item_new_shared(struct core *c, struct workqueue *wq, char *const *argv, size_t argc, struct item_env *env,
                    const char *cwd, const char *program, struct item **ret) {
        return item_new_env(c, wq, argv, argc, item_env_ref(env), cwd, program, ret);
}

/* A finished item keeps what it ran, not its environment. */
static void item_args_shed_env(struct item *i) {
        item_env_put(&i->core->envs, i->env);
        i->env = NULL;
}

int item_set_payload(struct item *i, const void *payload, uint32_t len) {
        struct item_extras *x;

        if (len == 0)
                return 0;
        x = item_extras_get(i);
        if (!x || !(x->payload = malloc(len)))
                return -ENOMEM;
        memcpy(x->payload, payload, len);
        x->payload_len = len;
        return 0;
}

int item_set_timeout(struct item *i, uint64_t usec) {
        struct item_extras *x;

        if (usec == 0)
                return 0;
        x = item_extras_get(i);
        if (!x)
                return -ENOMEM;
        x->timeout_usec = usec;
        return 0;
}

/* What an item that has ended keeps of what it was given: argv and cwd
 * to show, not its environment or stdin. */
static void item_shed_input(struct item *i) {
        item_args_shed_env(i);
        if (i->extras) {
                free(i->extras->payload);
                i->extras->payload = NULL;
                i->extras->payload_len = 0;
        }
}

/* @w is called back once @i has ended; its item_id says which item.
 * -ENOMEM: it could not be added. */
int item_add_waiter(struct item *i, struct core_waiter *w) {
        struct item_extras *x = item_extras_get(i);

        if (!x)
                return -ENOMEM;
        w->item_id = i->id;
        list_add_tail(&w->entry, &x->waiters);
        return 0;
}

static void item_waiters_complete(struct item *i, int r) {
        while (i->extras && !list_empty(&i->extras->waiters)) {
                struct core_waiter *w = list_first_entry(&i->extras->waiters, struct core_waiter, entry);

                list_del_init(&w->entry);
                w->done(w, r);
        }
}

static uint64_t strv_bytes(char *const *l) {
        uint64_t n = 0;

        for (; l && *l; l++)
                n += strlen(*l) + 1;
        return n;
}

static void item_history_evict(struct item *old) {
        struct core *c = old->core;
        struct user_usage *u = user_usage_get(&c->users, old->uid);

        list_del_init(&old->history_entry);
        c->nr_history--;
        if (u) {
                list_del_init(&old->user_history_entry);
                u->nr_history--;
                u->history_bytes -= old->history_bytes;
                user_usage_put(&c->users, u);
        }
        core_item_unhash(c, old);
        item_free(old);
}

/* Each uid's history is bounded on its own (limits history and
 * history-bytes), so that one user's stream of finished work never pushes
 * another user's results out.  The newest item always stays: its waiters
 * are about to read it. */
static void item_history_add(struct item *i) {
        struct core *c = i->core;
        const struct limits *l = &c->config.limits;
        struct user_usage *u;

        /* Its usage exists: the item was charged to it at submission. */
        u = user_usage_get(&c->users, i->uid);
        u->nr_items--;
        u->queued_bytes -= i->queued_bytes;
        i->queued_bytes = 0;

        i->history_bytes = sizeof(*i) + strv_bytes(i->argv) + item_env_bytes(item_env(i)) +
                           (i->run ? sizeof(*i->run) + i->run->out_len + i->run->err_len : 0) +
                           (i->extras ? sizeof(*i->extras) + strlen(item_wq_name(i)) + 1 : 0) +
                           (item_key_name(i) ? strlen(item_key_name(i)) + 1 : 0);
        list_add_tail(&i->history_entry, &c->history);
        c->nr_history++;
        list_add_tail(&i->user_history_entry, &u->history);
        u->nr_history++;
        u->history_bytes += i->history_bytes;
        while (u->nr_history > l->value[LIMIT_HISTORY] ||
               (u->nr_history > 1 && u->history_bytes > l->value[LIMIT_HISTORY_BYTES]))
                item_history_evict(list_first_entry(&u->history, struct item, user_history_entry));
}

/* The item has ended for good: it leaves its queue and joins the history. */
void item_retire(struct item *i, enum item_state state) {
        struct item_extras *x = item_extras_get(i);     /* its end, its queue's name */
        struct workqueue *wq = i->wq;

        i->state = state;
        if (x) {
                if (!x->finished_usec)
                        x->finished_usec = now_usec(CLOCK_REALTIME);
                if (x->timer)
                        event_free(x->timer);
                x->timer = NULL;
                x->deadline_usec = 0;
        }
        if (i->core->restoring)
                ;       /* replaying the state log: what ended then was logged then */
        else if (state == ITEM_FINISHED && item_ran(i)->signal)
                log_item(LOG_DEBUG, i, "Item %" PRIu64 " of workqueue %s finished: killed by signal %d", i->id,
                         item_wq_name(i), item_ran(i)->signal);
        else if (state == ITEM_FINISHED)
                log_item(LOG_DEBUG, i, "Item %" PRIu64 " of workqueue %s finished: exit status %d", i->id, item_wq_name(i),
                         item_ran(i)->exit_status);
        else
                log_item(LOG_DEBUG, i, "Item %" PRIu64 " of workqueue %s %s", i->id, item_wq_name(i),
                         item_state_to_string(state));
        if (i->run)
                i->run->start_seq = 0;
        core_store_item_result(i);
        /* Their room holds the history links from now on. */
        list_del_init(&i->share_entry);
        workqueue_item_left_inflight(i);
        list_del_init(&i->wq_entry);
        wq->nr_items--;
        if (x && x->key)
                work_key_release(wq, x->key, i);
        /* The queue may go before the history forgets the item. */
        if (x) {
                x->key = NULL;
                x->wq_name = strdup(wq->name);
        }
        i->wq = NULL;
        i->pwq = NULL;

        /* What only the run needed goes now; the history keeps the result.
         * (A prepared process is given back when the item leaves its pool;
         * this is for any path that did not.) */
        if (i->run)
                i->run->prepared = exec_proc_discard(i->run->prepared);
        item_shed_input(i);

        core_notify_item_finished(i);
        core_notify_workqueue_changed(wq);
        item_history_add(i);
        item_waiters_complete(i, 0);
}

static void item_timer_fired(evutil_socket_t fd, short what, void *userdata) {
        struct item *i = userdata;      /* item_arm_timer() made its extras */

        event_free(i->extras->timer);
        i->extras->timer = NULL;
        i->extras->deadline_usec = 0;
        item_queue(i);
}

static int item_arm_timer(struct item *i, uint64_t usec) {
        struct timeval tv = timeval_from_usec(usec);
        struct item_extras *x = item_extras_get(i);

        if (!x)
                return -ENOMEM;
        i->state = ITEM_DELAYED;
        x->deadline_usec = now_usec(CLOCK_REALTIME) + usec;
        if (!x->timer) {
                x->timer = evtimer_new(i->core->base, item_timer_fired, i);
                if (!x->timer)
                        return -ENOMEM;
        }
        return evtimer_add(x->timer, &tv) < 0 ? -ENOMEM : 0;
}

int item_delay(struct item *i, uint64_t usec) {
        return item_arm_timer(i, usec);
}

/* Queues the item on its pwq now: at submission, or when its delay or
 * back-off is over. */
void item_queue(struct item *i) {
        struct workqueue *wq = i->wq;
        struct work_key *key = item_extra(i)->key;

        /* Queued while it runs: go to the pool where it runs, so that the
         * pool keeps the two apart (the kernel's __queue_work()). */
        if (key && key->running && key->running->pwq)
                i->pwq = key->running->pwq;
        else
                i->pwq = workqueue_pwq_for_cpu(wq, i->cpu);

        i->seq = wq->next_seq++;
        list_add_tail(&i->inflight_entry, &wq->inflight);
        workqueue_item_activate(i);
        core_notify_workqueue_changed(wq);
}

static void item_sleep_changed(struct sleepwatch_target *t, bool running, void *userdata) {
        struct item *i = userdata;

        if (!i->run || !i->run->worker)
                return;
        if (running)
                pool_worker_running(i->run->worker);
        else
                pool_worker_sleeping(i->run->worker);
}

static uint64_t requeue_backoff_usec(unsigned requeues) {
        uint64_t usec = REQUEUE_BACKOFF_MIN_USEC;

        for (unsigned n = 1; n < requeues && usec < REQUEUE_BACKOFF_MAX_USEC; n++)
                usec *= 2;
        return usec < REQUEUE_BACKOFF_MAX_USEC ? usec : REQUEUE_BACKOFF_MAX_USEC;
}

static void item_exec_done(struct exec_proc *p, struct exec_result *r, void *userdata) {
        struct item *i = userdata;
        struct item_run *run = i->run;  /* item_execute() made it */
        struct item_extras *x = i->extras;      /* and these */
        struct worker *worker = run->worker;
        struct workqueue *wq = i->wq;
        struct work_key *key = x->key;
        bool requeue;

        run->proc = NULL;
        run->worker = NULL;
        run->exit_status = r->exit_status;
        run->signal = r->signal;
        run->exec_errno = r->exec_errno;
        run->cpu_usec += r->cpu_usec;
        i->timed_out = r->timed_out;
        x->finished_usec = r->finished_usec;
        free(run->out);
        free(run->err);
        run->out = TAKE_PTR(r->out);
        run->out_len = r->out_len;
        i->out_truncated = r->out_truncated;
        run->err = TAKE_PTR(r->err);
        run->err_len = r->err_len;
        i->err_truncated = r->err_truncated;
        if ((worker->flags & WORKER_CPU_INTENSIVE) && !(wq->flags & WQ_CPU_INTENSIVE))
                i->cpu_intensive = true;

        wq->stats.cpu_usec += r->cpu_usec;
        wq->stats.completed++;
        if (r->timed_out)
                wq->stats.timed_out++;
        if (r->exec_errno)
                wq->stats.failed++;
        i->pwq->nr_running--;
        if (key && key->running == i)
                key->running = NULL;
        workqueue_item_left_inflight(i);

        /* EX_TEMPFAIL: "requeue me", with back-off, unless the key already
         * has a pending instance that will do the same work. */
        requeue = r->exit_status == REQUEUE_EXIT_STATUS && !r->signal && !r->exec_errno && !r->timed_out &&
                  !i->cancel_requested && !i->core->shutting_down &&
                  !(key && key->pending && key->pending != i);

        workqueue_item_finished(i);
        if (requeue) {
                x->requeues++;
                wq->stats.requeued++;
                if (key)
                        key->pending = i;
                x->finished_usec = 0;
                if (item_arm_timer(i, requeue_backoff_usec(x->requeues)) < 0)
                        item_retire(i, ITEM_FAILED);
                else
                        core_store_item_requeued(i);
        } else if (i->cancel_requested || r->killed)
                item_retire(i, ITEM_CANCELLED);
        else
                item_retire(i, r->exec_errno ? ITEM_FAILED : ITEM_FINISHED);

        pool_worker_done(worker);
        /* A process just ended: a used rescuer can be made again. */
        workqueue_rescuer_replenish(wq);
        workqueue_check_waiters(wq);
}

/* How @i runs on @pool. */
static struct exec_spec item_exec_spec(const struct item *i, const struct pool *pool) {
        return (struct exec_spec) {
                .program = item_program(i) ? item_program(i) : i->argv[0],
                .argv = i->argv,
                .envp = item_envp(i),
                .cwd = item_cwd(i),
                .payload = item_extra(i)->payload,
                .payload_len = item_extra(i)->payload_len,
                .uid = i->uid,
                .cpu = pool->cpu,
                /* The high-priority pool runs at the kernel's HIGHPRI_NICE_LEVEL,
                 * but never at more priority than the submitter could get. */
                .nice = pool->highpri && i->uid == 0 && geteuid() == 0 ? POOL_POLICY_HIGHPRI_NICE : 0,
                .timeout_usec = item_extra(i)->timeout_usec,
                .output_limit = i->core->config.limits.value[LIMIT_OUTPUT_BYTES],
                .cgroups = i->core->config.cgroups,
                .pids = i->core->config.pids,
                .item_tasks = i->core->config.limits.value[LIMIT_ITEM_TASKS],
                .user_tasks = i->uid == 0 ? 0 : i->core->config.limits.value[LIMIT_USER_TASKS],
        };
}

/* Makes the item's process, stopped before its program, unless it was made
 * ahead.  Failing here (fork refused) leaves the item to the pool, which
 * retries with back-off; a MEM_RECLAIM queue's rescuer may stand in. */
static int item_make_process(struct item *i, struct pool *pool) {
        struct core *c = i->core;
        struct exec_spec spec;
        bool had_rescuer;
        int r;

        if (i->run->prepared) {
                r = exec_proc_ready(i->run->prepared);
                if (r >= 0)
                        return 0;
                log_item_errno(LOG_DEBUG, r, i, "Could not prepare item %" PRIu64 " ahead: %m", i->id);
                i->run->prepared = exec_proc_discard(i->run->prepared);
        }
        spec = item_exec_spec(i, pool);
        /* Only here, not to prepare ahead: a rescuer is for an item whose
         * turn it is. */
        spec.rescuer = &i->wq->rescuer;
        had_rescuer = i->wq->rescuer;
        r = exec_prepare(c->base, c->sleepwatch, &spec, item_exec_done, item_sleep_changed, i, &i->run->prepared);
        if (r < 0) {
                log_item_errno(LOG_WARNING, r, i, "Failed to start item %" PRIu64 " of workqueue %s: %m", i->id,
                               item_wq_name(i));
                /* A process may be had again by now: be ready next time. */
                workqueue_rescuer_replenish(i->wq);
                return r;
        }
        if (had_rescuer && !i->wq->rescuer) {
                /* Its own process could not be created: the kernel's mayday
                 * call, answered by the rescuer. */
                i->wq->stats.pool.mayday++;
                i->wq->stats.pool.rescued++;
                log_item(LOG_WARNING, i,
                         "No process could be created for item %" PRIu64 " of workqueue %s: its rescuer runs it",
                         i->id, item_wq_name(i));
        }
        return 0;
}

/* Lets the item's process, made before, run its program. */
static int item_exec_start(struct item *i) {
        int r;

        r = exec_go(i->run->prepared);
        if (r < 0) {
                log_item_errno(LOG_WARNING, r, i, "Failed to start item %" PRIu64 " of workqueue %s: %m", i->id,
                               item_wq_name(i));
                i->run->prepared = exec_proc_discard(i->run->prepared);
                return r;
        }
        i->run->proc = TAKE_PTR(i->run->prepared);
        i->run->started_usec = exec_proc_started_usec(i->run->proc);
        return 0;
}

static void item_mark_running(struct item *i, struct worker *worker) {
        i->run->worker = worker;
        worker->userdata = i;
        i->state = ITEM_RUNNING;
        if (!i->run->started_usec)
                i->run->started_usec = now_usec(CLOCK_REALTIME);
        log_item(LOG_DEBUG, i, "Started item %" PRIu64 " of workqueue %s", i->id, item_wq_name(i));
        i->pwq->nr_running++;
        if (i->extras->key) {   /* item_execute() made the extras */
                if (i->extras->key->pending == i)
                        i->extras->key->pending = NULL;
                i->extras->key->running = i;
        }
        core_notify_workqueue_changed(i->wq);
}

/* Claims: at most once without a sync per start.
 *
 * A drop item's process runs only once a record saying that it may have
 * run is on disk.  Waiting for one sync per start would cap a pool that
 * runs short items one after another (a bound pool) at one item per
 * fdatasync().  So the items that will start next on the pool are claimed
 * ahead (an ItemStarted record with "ahead", appended with the others and
 * synced in the same group commit); a claimed item whose claim is on disk
 * starts at once, its own ItemStarted appended and not waited for.
 *
 * How many: the pool's claim window.  It doubles each time an item had to
 * wait for the disk to start (the items run faster than the syncs), up to
 * ITEM_CLAIM_WINDOW_MAX, and goes back to 1 when nothing is left to claim
 * behind the item that starts; once fewer than half of it are claimed
 * ahead, the next ones are claimed, so that their sync runs while the
 * claimed ones start.  After a crash a claimed item is reported
 * interrupted, as the drop policy allows for an item that may have run:
 * at most the window of items per pool that never ran.  A claim is given
 * back (ItemReleased) when its item leaves the pool unstarted (frozen,
 * cmwqd stops). */
#define ITEM_CLAIM_WINDOW_MAX 64u

/* An item whose claim waits to be used: claimed and not started. */
static bool item_claimed(const struct item *i) {
        return item_start_seq(i) > 0 && !item_starting(i) && !item_proc(i);
}

void item_release_claim(struct item *i) {
        if (!item_claimed(i))
                return;
        core_store_item_released(i);
        i->run->start_seq = 0;
}

/* The items that start after one that starts now, as far as the window
 * goes. */
struct claim_scan {
        unsigned window;
        unsigned seen;                  /* at-most-once items */
        unsigned claimed;               /* of those, claimed already */
        unsigned steps;
        unsigned n;
        struct item *unclaimed[ITEM_CLAIM_WINDOW_MAX];
};

/* Looks at @j (NULL: work that is no item), the next to start: false once
 * the scan has seen enough. */
static bool claim_scan_add(struct claim_scan *cs, struct item *j) {
        if (cs->seen >= cs->window || ++cs->steps > 4 * ITEM_CLAIM_WINDOW_MAX)
                return false;
        if (!j || !core_store_at_most_once(j))
                return true;
        cs->seen++;
        if (item_start_seq(j) > 0)
                cs->claimed++;
        else
                cs->unclaimed[cs->n++] = j;
        return true;
}

/* @i starts now (@waited: it has to wait for the disk first): claims ahead
 * for the items after it, as the window says.  Those are its pool's
 * worklist, then what waits behind max_active on @i's pwq. */
static void item_claim_next(struct item *i, bool waited) {
        struct pool *p = i->pwq->pool;
        struct claim_scan cs = {};
        struct pool_work *work;
        struct item *j;

        if (p->claim_window == 0)
                p->claim_window = 1;
        if (waited && p->claim_window < ITEM_CLAIM_WINDOW_MAX)
                p->claim_window *= 2;
        cs.window = p->claim_window;
        list_for_each_entry(work, &p->worklist, entry)
                if (!claim_scan_add(&cs, item_from_work(work)))
                        goto scanned;
        if (!i->wq->frozen)
                list_for_each_entry(j, &i->pwq->inactive, work.entry)
                        if (!claim_scan_add(&cs, j))
                                goto scanned;
scanned:
        if (cs.seen == 0) {
                /* Nothing waits behind it: the next burst starts small. */
                p->claim_window = 1;
                return;
        }
        if (cs.claimed * 2 >= cs.window)
                return;
        /* One without memory for its run starts unclaimed: it waits for
         * its own ItemStarted then. */
        for (unsigned k = 0; k < cs.n; k++)
                if (item_run_get(cs.unclaimed[k]))
                        cs.unclaimed[k]->run->start_seq = core_store_item_claim(cs.unclaimed[k]);
}

static int item_execute(struct worker *worker, struct pool_work *work) {
        struct item *i = container_of(work, struct item, work);
        struct core *c = i->core;
        uint64_t seq;
        int r;

        if (c->shutting_down)
                return -ESHUTDOWN;
        /* Left to the pool on failure, as a process that cannot be made.
         * Its extras now, so that its end (its time, a requeue, a cancel
         * that waits) never wants memory. */
        if (!item_run_get(i) || !item_extras_get(i))
                return -ENOMEM;

        r = item_make_process(i, worker->pool);
        if (r < 0)
                return r;

        /* A record that says it may have run is on disk before its process
         * runs (at most once): after a crash an item is either known to
         * have started, or claimed to (interrupted), or has not run at
         * all, never run and still pending.  Its process waits for the
         * release meanwhile. */
        i->run->started_usec = 0;
        seq = core_store_item_started(i);
        if (core_store_at_most_once(i))
                item_claim_next(i, seq > 0);
        if (seq > 0) {
                struct list_head *at = c->starting.prev;

                item_mark_running(i, worker);
                i->run->start_seq = seq;
                /* In the order of their records: a claim may be older than
                 * the starts waiting already. */
                while (at != &c->starting && list_entry(at, struct item_run, starting_entry)->start_seq > seq)
                        at = at->prev;
                list_add(&i->run->starting_entry, at);
                return 0;
        }
        r = item_exec_start(i);
        if (r < 0)
                return r;
        i->run->start_seq = 0;
        item_mark_running(i, worker);
        return 0;
}

/* The records up to @seq are on disk: the items on core->starting waiting
 * for them start. */
void core_items_start_durable(struct core *c, uint64_t seq) {
        while (!list_empty(&c->starting)) {
                struct item *i = list_first_entry(&c->starting, struct item_run, starting_entry)->item;
                struct exec_result res = {};
                int r;

                if (i->run->start_seq > seq)
                        break;
                list_del_init(&i->run->starting_entry);
                i->run->start_seq = 0;
                if (i->cancel_requested) {
                        i->run->prepared = exec_proc_discard(i->run->prepared);
                        res.killed = true;
                } else {
                        r = item_exec_start(i);
                        if (r >= 0)
                                continue;
                        res.exec_errno = -r;
                }
                res.started_usec = res.finished_usec = now_usec(CLOCK_REALTIME);
                item_exec_done(NULL, &res, i);
        }
}

/* The item waits for its turn on a bound pool: its process is made now and
 * waits, so that its start is only a release (see exec_prepare()). */
static void item_prepare(struct pool_work *work) {
        struct item *i = container_of(work, struct item, work);
        struct core *c = i->core;
        struct exec_spec spec;
        int r;

        if ((i->run && i->run->prepared) || c->shutting_down)
                return;
        if (!item_run_get(i))
                return;         /* started the ordinary way when its turn comes */
        spec = item_exec_spec(i, i->pwq->pool);
        /* The loop does not wait for the spawner meanwhile: an item that
         * ends then is seen at once. */
        spec.ahead = true;
        r = exec_prepare(c->base, c->sleepwatch, &spec, item_exec_done, item_sleep_changed, i, &i->run->prepared);
        if (r < 0)
                /* It is started the ordinary way when its turn comes. */
                log_item_errno(LOG_DEBUG, r, i, "Could not prepare item %" PRIu64 " ahead: %m", i->id);
}

/* It leaves the pool without having started (cancelled, frozen, cmwqd
 * stops): its process and its claim are given back. */
static void item_unprepare(struct pool_work *work) {
        struct item *i = container_of(work, struct item, work);

        if (i->run)
                i->run->prepared = exec_proc_discard(i->run->prepared);
        item_release_claim(i);
}

/* CPU time the item has used since it exec'd (see exec_proc_cpu_usec()). */
static uint64_t item_cpu_usec(struct worker *worker) {
        struct item *i = worker->userdata;
        uint64_t usec;

        if (!i || !item_proc(i))
                return 0;       /* not started yet: nothing used */
        usec = exec_proc_cpu_usec(i->run->proc);
        return usec == UINT64_MAX ? POOL_CPU_UNKNOWN : usec;
}

/* A MEM_RECLAIM queue's item whose rescuer is ready. */
static bool item_rescuable(struct pool_work *work) {
        struct item *i = container_of(work, struct item, work);

        return i->wq && i->wq->rescuer;
}

/* On a pool: the item is unfinished, so it has its queue. */
static struct pool_work_stats *item_work_stats(struct pool_work *work) {
        return &container_of(work, struct item, work)->wq->stats.pool;
}

static bool item_queue_cpu_intensive(const struct pool_work *work) {
        return container_of(work, struct item, work)->wq->flags & WQ_CPU_INTENSIVE;
}

static const struct pool_work_ops item_work_ops = {
        .execute = item_execute,
        .stats = item_work_stats,
        .queue_cpu_intensive = item_queue_cpu_intensive,
        .cpu_usec = item_cpu_usec,
        .prepare = item_prepare,
        .unprepare = item_unprepare,
        .rescuable = item_rescuable,
};

struct item *item_from_work(struct pool_work *work) {
        /* Pools also run other work (callback/callback.c's grants). */
        return work && work->ops == &item_work_ops ? container_of(work, struct item, work) : NULL;
}

/* Ends an unfinished item at daemon shutdown, without callbacks to exec. */
void item_abort(struct item *i) {
        if (item_proc(i)) {
                struct worker *worker = i->run->worker;

                i->run->proc = exec_proc_abandon(i->run->proc);
                i->run->worker = NULL;
                i->pwq->nr_running--;
                pool_worker_done(worker);
        } else if (item_starting(i)) {
                struct worker *worker = i->run->worker;

                list_del_init(&i->run->starting_entry);
                i->run->worker = NULL;
                i->pwq->nr_running--;
                pool_worker_done(worker);
        } else if (i->state == ITEM_PENDING)
                pool_cancel_pending(i->pwq->pool, &i->work);
        else if (i->state == ITEM_INACTIVE)
                workqueue_item_unqueue(i);
        item_retire(i, ITEM_CANCELLED);
}

int core_item_get(struct core *c, const struct core_caller *caller, uint64_t id, struct item **ret,
                  struct core_error *e) {
        struct item *i = core_item_lookup(c, id);

        /* Another user's item gets the very answer an unknown id gets, so
         * that nobody learns which ids exist (as workqueue names). */
        if (!i || (i->uid != caller->uid && !caller_is_privileged(caller)))
                return core_error_set(e, -ENOENT,
                                      "no work item %" PRIu64 " (finished items are kept for the last %" PRIu64 " per user)",
                                      id, c->config.limits.value[LIMIT_HISTORY]);
        *ret = i;
        return 0;
}

/* The caller's item @id, if it has not ended: 1 with *@ret set, 0 when it
 * has ended (the answer is there now), or an error. */
static int item_get_unfinished(struct core *c, const struct core_caller *caller, uint64_t id, struct item **ret,
                               struct core_error *e) {
        int r;

        r = core_item_get(c, caller, id, ret, e);
        if (r < 0)
                return r;
        return item_is_finished(*ret) ? 0 : 1;
}

int core_item_wait(struct core *c, const struct core_caller *caller, uint64_t id, struct core_waiter *w,
                   struct core_error *e) {
        struct item *i;
        int r;

        r = item_get_unfinished(c, caller, id, &i, e);
        if (r <= 0)
                return r;
        if (item_add_waiter(i, w) < 0)
                return core_error_set(e, -ENOMEM, "out of memory");
        return 1;
}

int core_item_cancel(struct core *c, const struct core_caller *caller, uint64_t id, struct core_waiter *w,
                     struct core_error *e) {
        struct workqueue *wq;
        struct item *i;
        int r;

        r = item_get_unfinished(c, caller, id, &i, e);
        if (r <= 0)
                return r;

        wq = i->wq;
        switch (i->state) {
        case ITEM_RUNNING:
                /* cancel_work_sync(): stop it and wait until it has ended. */
                if (item_add_waiter(i, w) < 0)
                        return core_error_set(e, -ENOMEM, "out of memory");
                if (!i->cancel_requested) {
                        i->cancel_requested = true;
                        if (item_proc(i))       /* else still waiting to start: it will not */
                                exec_proc_kill(i->run->proc);
                }
                return 1;
        case ITEM_PENDING:
                pool_cancel_pending(i->pwq->pool, &i->work);
                workqueue_item_left_inflight(i);
                workqueue_item_finished(i);
                break;
        case ITEM_INACTIVE:
                workqueue_item_unqueue(i);
                workqueue_item_left_inflight(i);
                break;
        default:
                break;
        }
        item_retire(i, ITEM_CANCELLED);
        workqueue_check_waiters(wq);
        return 0;
}

const char *item_key_name(const struct item *i) {
        return item_extra(i)->key_name;
}

/* A restored item is charged to its uid as core_submit() charges a new one,
 * so that it leaves its usage the same way.  -ENOMEM if it cannot be. */
int item_restore_charge(struct item *i) {
        struct core *c = i->core;
        struct user_usage *u = user_usage_get(&c->users, i->uid);

        if (!u)
                return -ENOMEM;
        i->queued_bytes = sizeof(*i) + strv_bytes(i->argv) + item_env_bytes(item_env(i)) + strlen(item_cwd(i)) +
                          item_extra(i)->payload_len;
        u->nr_items++;
        u->queued_bytes += i->queued_bytes;
        return 0;
}

/* A charged item that had ended before the restart goes straight to the
 * history, bounded per user as ever. */
void item_restore_history(struct item *i) {
        item_shed_input(i);
        item_history_add(i);
}

/* The pending instance of @uid's work @key on @wq, or NULL. */
struct item *item_key_pending(struct workqueue *wq, uid_t uid, const char *key) {
        struct work_key *k = work_key_find(wq, uid, key);

        return k ? k->pending : NULL;
}

/* Frees @i, which never was queued, with its hold on its work key. */
void item_discard(struct item *i) {
        if (item_extra(i)->key)
                work_key_release(i->wq, i->extras->key, i);
        item_free(i);
}

/* Makes @key the pending instance of its work key (the submitter's own). */
int item_attach_key(struct item *i, const char *key) {
        struct item_extras *x = item_extras_get(i);
        struct work_key *k;

        if (!x)
                return -ENOMEM;
        x->key_name = strdup(key);
        if (!x->key_name)
                return -ENOMEM;
        k = work_key_get(i->wq, i->uid, key);
        if (!k)
                return -ENOMEM;
        k->pending = i;
        x->key = k;
        i->work.identity = k;
        return 0;
}
