/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Submission of exec work items (core_submit()): the checks of what a client
 * asks for against the fixed and the per-user limits, the CPU the item is
 * bound to, the work key's pending instance, and the new item, charged to
 * its user and queued (or delayed).  The items themselves are core/item.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "core/core-internal.h"
#include "util.h"

/* The CPU the submitting process is on, as sched_getcpu() would say in it.
 * @pid is the one the kernel or the bus recorded at connect(): should that
 * process have died and its pid gone to another, this only picks another
 * CPU, which the submitter may name itself anyway; nothing else of /proc/PID
 * is believed. */
static int submit_caller_cpu(pid_t pid) {
        char path[64], buf[1024];
        const char *p;
        ssize_t n;
        int fd, field = 0;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -1;
        buf[n] = 0;
        p = strrchr(buf, ')');
        if (!p)
                return -1;
        /* Field 39 ("processor") counted from the state, which is field 3. */
        for (p++; *p && field < 39 - 2; p++)
                if (*p == ' ')
                        field++;
        return *p ? atoi(p) : -1;
}

/* Checks @a against the fixed and the per-item limits; *ret_bytes is what
 * the item will hold in memory while queued (argv, env, cwd, payload). */
static int submit_args_validate(const struct submit_args *a, const struct limits *l, uint64_t *ret_bytes,
                                struct core_error *e) {
        size_t bytes = 0;

        if (a->argc == 0 || !a->argv[0][0])
                return core_error_set(e, -EINVAL, "no program given");
        if (a->cpu < -1)
                return core_error_set(e, -EINVAL, "CPU %d does not exist (-1 means the submitter's CPU)", a->cpu);
        if (a->argc > ITEM_ARGV_MAX)
                return core_error_set(e, -E2BIG, "too many arguments (%zu, the limit is %u)", a->argc, ITEM_ARGV_MAX);
        if (a->envc > ITEM_ENV_MAX)
                return core_error_set(e, -E2BIG, "too many environment variables (%zu, the limit is %u)", a->envc,
                                      ITEM_ENV_MAX);
        for (size_t k = 0; k < a->argc; k++)
                bytes += strlen(a->argv[k]) + 1;
        for (size_t k = 0; k < a->envc; k++) {
                if (!strchr(a->envp[k], '=') || a->envp[k][0] == '=')
                        return core_error_set(e, -EINVAL, "environment entry '%.64s' is not NAME=VALUE", a->envp[k]);
                bytes += strlen(a->envp[k]) + 1;
        }
        if (a->cwd)
                bytes += strlen(a->cwd);
        if (bytes > l->value[LIMIT_ITEM_ARGS_BYTES])
                return limit_refuse_item(l, LIMIT_ITEM_ARGS_BYTES, e, "arguments and environment take",
                                         bytes);
        if (a->cwd && a->cwd[0] && a->cwd[0] != '/')
                return core_error_set(e, -EINVAL, "working directory '%.200s' is not absolute", a->cwd);
        if (a->payload_len > l->value[LIMIT_ITEM_PAYLOAD_BYTES])
                return limit_refuse_item(l, LIMIT_ITEM_PAYLOAD_BYTES, e, "the stdin payload takes",
                                         a->payload_len);
        if (a->key && (!a->key[0] || strlen(a->key) > ITEM_KEY_MAX))
                return core_error_set(e, -EINVAL, "a work key must be 1-%u bytes", ITEM_KEY_MAX);
        if (a->delay_usec > ITEM_DELAY_MAX_USEC)
                return core_error_set(e, -EINVAL, "delay is over the limit of 30 days");
        if (a->timeout_usec > ITEM_DELAY_MAX_USEC)
                return core_error_set(e, -EINVAL, "timeout is over the limit of 30 days");
        *ret_bytes = bytes + a->payload_len;
        return 0;
}

int core_submit(struct core *c, const struct core_caller *caller, const struct submit_args *a,
                struct core_waiter *wait, uint64_t *ret_id, bool *ret_already_pending,
                struct core_error *e) {
        _cleanup_(freep) char *program = NULL;
        struct workqueue *wq;
        const struct limits *l = &c->config.limits;
        struct user_usage *u;
        struct item *i;
        uint64_t bytes = 0;
        int cpu = a->cpu, r;

        r = core_store_refuse_change(c, e);
        if (r < 0)
                return r;
        /* Whoever may see a queue may queue to it: its owner, root, and
         * everybody for the shared built-in queues. */
        r = core_workqueue_lookup(c, caller, a->workqueue, &wq, e);
        if (r < 0)
                return r;
        if (wq->draining)
                return core_error_set(e, -EBUSY, "workqueue '%s' is being %s; new work is refused", wq->name,
                                      wq->destroying ? "destroyed" : "drained");
        r = submit_args_validate(a, &c->config.limits, &bytes, e);
        if (r < 0)
                return r;

        if (wq->flags & WQ_UNBOUND)
                cpu = -1;
        else {
                if (cpu < 0)
                        cpu = submit_caller_cpu(caller->pid);
                if (cpu < 0)
                        cpu = sched_getcpu();
                if (cpu < 0 || (unsigned) cpu >= c->nr_cpus)
                        return core_error_set(e, -EINVAL, "CPU %d does not exist (this machine has CPUs 0-%u)",
                                              a->cpu, c->nr_cpus - 1);
                if (!CPU_ISSET(cpu, &c->cpus_allowed))
                        return core_error_set(e, -EINVAL, "CPU %d is offline or outside cmwqd's CPU set", cpu);
        }

        r = exec_resolve_program(a->argv[0], c->config.plugin_dirs, &program);
        if (r < 0)
                return core_error_set(e, r, "program '%.200s' must be an absolute path, a plugin name or a command name",
                                      a->argv[0]);

        if (a->key) {
                i = item_key_pending(wq, caller->uid, a->key);
                if (i) {
                        *ret_id = i->id;
                        *ret_already_pending = true;
                        if (!wait)
                                return 0;
                        if (item_add_waiter(i, wait) < 0)
                                return core_error_set(e, -ENOMEM, "out of memory");
                        return 1;
                }
        }

        /* What the user holds already, before anything is copied. */
        u = user_usage_get(&c->users, caller->uid);
        if (!u)
                return core_error_set(e, -ENOMEM, "out of memory");
        bytes += sizeof(*i);
        if (!caller_is_privileged(caller)) {
                if (u->nr_items >= l->value[LIMIT_PENDING_ITEMS])
                        r = limit_refuse(l, LIMIT_PENDING_ITEMS, caller->uid, e);
                else if (u->queued_bytes + bytes > l->value[LIMIT_QUEUED_BYTES])
                        r = limit_refuse(l, LIMIT_QUEUED_BYTES, caller->uid, e);
                else
                        r = 0;
                if (r < 0) {
                        user_usage_put(&c->users, u);
                        return r;
                }
        }

        r = item_new(c, wq, a->argv, a->argc, a->envp, a->envc, a->cwd && a->cwd[0] ? a->cwd : "/", program, &i);
        if (r < 0) {
                user_usage_put(&c->users, u);
                return core_error_set(e, r, "out of memory");
        }
        i->cpu = (int16_t) cpu;
        i->uid = caller->uid;
        i->queued_usec = now_usec(CLOCK_REALTIME);

        r = -ENOMEM;
        if (item_set_timeout(i, a->timeout_usec) < 0 || item_set_payload(i, a->payload, (uint32_t) a->payload_len) < 0)
                goto fail;
        if (a->key && item_attach_key(i, a->key) < 0)
                goto fail;
        if (a->delay_usec > 0) {
                r = item_delay(i, a->delay_usec);
                if (r < 0)
                        goto fail;
        }
        r = -ENOMEM;
        if (wait && !item_extras_get(i))        /* item_add_waiter() cannot fail below */
                goto fail;

        i->id = c->next_id++;
        i->queued_bytes = bytes;
        u->nr_items++;
        u->queued_bytes += bytes;
        core_item_hash(c, i);
        list_add_tail(&i->wq_entry, &wq->items);
        wq->nr_items++;
        core_store_item_queued(i);
        log_item(LOG_DEBUG, i, "Queued item %" PRIu64 " on %s for uid %u: %s", i->id, wq->name, (unsigned) i->uid,
                 i->argv[0]);

        *ret_id = i->id;
        *ret_already_pending = false;
        if (wait)
                (void) item_add_waiter(i, wait);
        if (a->delay_usec == 0)
                item_queue(i);
        else
                core_notify_workqueue_changed(wq);
        return wait ? 1 : 0;

fail:
        item_discard(i);
        user_usage_put(&c->users, u);
        return core_error_set(e, r, "out of memory");
}
