/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmwqctl: the workqueue commands and the listings. */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cmwqctl.h"
#include "cmwqctl-json.h"
#include "cmwqctl-print.h"
#include "cmwqctl-util.h"
#include "request.h"
#include "request-limits.h"
#include "util.h"

/* The kernel's WQ_MAX_ACTIVE, the documented upper limit of max_active: a
 * larger value is a usage error, found before asking cmwqd. */
#define CTL_MAX_ACTIVE 512u

int verb_create(Context *ctx, const CtlVerb *verb, const CtlArgs *a) {
        static const struct {
                int opt;
                uint32_t flag;
        } flags[] = {
                { OPT_UNBOUND,       CMWQ__WORKQUEUE_FLAG__FLAG_UNBOUND },
                { OPT_ORDERED,       CMWQ__WORKQUEUE_FLAG__FLAG_ORDERED },
                { OPT_HIGHPRI,       CMWQ__WORKQUEUE_FLAG__FLAG_HIGHPRI },
                { OPT_CPU_INTENSIVE, CMWQ__WORKQUEUE_FLAG__FLAG_CPU_INTENSIVE },
                { OPT_FREEZABLE,     CMWQ__WORKQUEUE_FLAG__FLAG_FREEZABLE },
                { OPT_MEM_RECLAIM,   CMWQ__WORKQUEUE_FLAG__FLAG_MEM_RECLAIM },
        };
        struct request_create_args create = { .on_interrupt = CMWQ__INTERRUPT_POLICY__INTERRUPT_DROP };
        const char *v;
        struct request req;
        int r;

        for (size_t i = 0; i < ELEMENTSOF(flags); i++)
                if (a->opt[flags[i].opt])
                        create.flags |= flags[i].flag;
        if ((v = a->opt[OPT_MAX_ACTIVE])) {
                if (parse_uint32(v, &create.max_active) < 0 || create.max_active > CTL_MAX_ACTIVE)
                        return usage_error("create: invalid --max-active value '%s' (0-%u)", v, CTL_MAX_ACTIVE);
                create.has_max_active = true;
        }
        if ((v = a->opt[OPT_ON_INTERRUPT])) {
                if (strcmp(v, "rerun") == 0)
                        create.on_interrupt = CMWQ__INTERRUPT_POLICY__INTERRUPT_RERUN;
                else if (strcmp(v, "drop") == 0)
                        create.on_interrupt = CMWQ__INTERRUPT_POLICY__INTERRUPT_DROP;
                else
                        return usage_error("create: invalid --on-interrupt value '%s' (rerun or drop)", v);
                create.has_on_interrupt = true;
        }

        r = parse_name(verb->name, a->args[0], &create.name);
        if (r != 0)
                return r;
        if (!cmwq_workqueue_name_valid(create.name))
                return usage_error("create: invalid workqueue NAME: 1-%u characters of A-Z a-z 0-9 _ - . : @",
                                   CMWQ_WORKQUEUE_NAME_MAX);
        return call_simple(ctx, request_create(&req, &create));
}

/* destroy, flush, drain: NAME and nothing else. */
int verb_name_only(Context *ctx, const CtlVerb *verb, const CtlArgs *a) {
        struct request req;
        const char *name = NULL;
        int r;

        r = parse_name(verb->name, a->args[0], &name);
        if (r != 0)
                return r;
        return call_simple(ctx, request_workqueue(&req, verb->request, name));
}

int verb_set_max_active(Context *ctx, const CtlVerb *verb, const CtlArgs *a) {
        struct request req;
        const char *name = NULL;
        uint32_t n;
        int r;

        r = parse_name(verb->name, a->args[0], &name);
        if (r != 0)
                return r;
        if (parse_uint32(a->args[1], &n) < 0 || n > CTL_MAX_ACTIVE)
                return usage_error("set-max-active: invalid max_active '%s' (0-%u)", a->args[1], CTL_MAX_ACTIVE);

        return call_simple(ctx, request_set_max_active(&req, name, n));
}

static void print_holding(const Cmwq__FreezeReply *reply) {
        for (size_t i = 0; i < reply->n_holding; i++) {
                const Cmwq__ItemInfo *item = reply->holding[i];

                fprintf(stderr, "cmwqctl:   item %" PRIu64 " on %s:", item->id, item->workqueue);
                for (size_t j = 0; j < item->n_argv; j++) {
                        fputc(' ', stderr);
                        fputs_shell_quoted(stderr, item->argv[j]);
                }
                fputc('\n', stderr);
        }
        for (size_t i = 0; i < reply->n_callbacks; i++)
                fprintf(stderr, "cmwqctl:   callbacks of PID %" PRIu32 " on %s\n", reply->callbacks[i]->pid,
                        reply->callbacks[i]->workqueue);
}

/* freeze [NAME] [--timeout SECONDS], thaw [NAME] */
int verb_freeze_thaw(Context *ctx, const CtlVerb *verb, const CtlArgs *a) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        struct request req;
        uint64_t timeout_usec = 0;
        bool freeze = verb->request == CMWQ__REQUEST__BODY_FREEZE;
        const Cmwq__FreezeReply *reply;
        const char *name = NULL;
        int r;

        if (a->opt[OPT_TIMEOUT]) {
                r = parse_seconds_option(verb->name, "timeout", a->opt[OPT_TIMEOUT], CMWQ_FREEZE_TIMEOUT_MAX_USEC,
                                         &timeout_usec);
                if (r != 0)
                        return r;
        }
        if (a->n_args > 0) {
                r = parse_name(verb->name, a->args[0], &name);
                if (r != 0)
                        return r;
        }

        r = ctx_call(ctx, request_freeze(&req, freeze, name, a->opt[OPT_TIMEOUT] ? &timeout_usec : NULL), &resp);
        if (r != 0)
                return r;

        reply = resp->body_case == CMWQ__RESPONSE__BODY_FREEZE ? resp->freeze : NULL;
        if (ctx->json && freeze && (reply || resp->error == CMWQ__ERROR__OK)) {
                JsonWriter w;

                json_init(&w, stdout);
                json_object_begin(&w);
                json_key(&w, "holding");
                json_array_begin(&w);
                for (size_t i = 0; reply && i < reply->n_holding; i++)
                        item_json(reply->holding[i], &w);
                json_array_end(&w);
                json_key(&w, "callbacks");
                json_array_begin(&w);
                for (size_t i = 0; reply && i < reply->n_callbacks; i++) {
                        json_object_begin(&w);
                        json_key(&w, "pid");
                        json_uint(&w, reply->callbacks[i]->pid);
                        json_key(&w, "workqueue");
                        json_string(&w, reply->callbacks[i]->workqueue);
                        json_object_end(&w);
                }
                json_array_end(&w);
                json_object_end(&w);
                json_finish(&w);
        }

        if (resp->error != CMWQ__ERROR__OK) {
                r = daemon_refused(resp);
                if (reply && !ctx->json)
                        print_holding(reply);
                return r;
        }
        if (reply && (reply->n_holding > 0 || reply->n_callbacks > 0)) {
                /* Frozen, but not everything that ran has finished. */
                fprintf(stderr, "cmwqctl: freeze timed out, %zu item(s) and the callbacks of %zu client(s) still "
                        "running%s\n", reply->n_holding, reply->n_callbacks, ctx->json ? "" : ":");
                if (!ctx->json)
                        print_holding(reply);
                return CTL_EXIT_REFUSED;
        }
        return CTL_EXIT_OK;
}

/* ------------------------------------------------------------------------ */
/* inspection */

static int call_empty(Context *ctx, Cmwq__Request__BodyCase body, Cmwq__Response__BodyCase expect,
                         Cmwq__Response **ret) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        struct request req;
        int r;

        r = ctx_call(ctx, request_empty(&req, body), &resp);
        if (r != 0)
                return r;
        if (resp->error != CMWQ__ERROR__OK)
                return daemon_refused(resp);
        if (resp->body_case != expect)
                return unexpected_reply();
        *ret = TAKE_PTR(resp);
        return 0;
}

int verb_list(Context *ctx, const CtlVerb *verb, const CtlArgs *a) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        JsonWriter w;
        int r;

        (void) verb;
        (void) a;
        r = call_empty(ctx, CMWQ__REQUEST__BODY_LIST, CMWQ__RESPONSE__BODY_LIST, &resp);
        if (r != 0)
                return r;
        if (ctx->json) {
                json_init(&w, stdout);
                list_json(resp->list, &w);
                json_finish(&w);
        } else if (list_print(resp->list, stdout) < 0)
                return fail_oom();
        return CTL_EXIT_OK;
}

int verb_pools(Context *ctx, const CtlVerb *verb, const CtlArgs *a) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        JsonWriter w;
        int r;

        (void) verb;
        (void) a;
        r = call_empty(ctx, CMWQ__REQUEST__BODY_POOLS, CMWQ__RESPONSE__BODY_POOLS, &resp);
        if (r != 0)
                return r;
        if (ctx->json) {
                json_init(&w, stdout);
                pools_json(resp->pools, &w);
                json_finish(&w);
        } else if (pools_print(resp->pools, stdout) < 0)
                return fail_oom();
        return CTL_EXIT_OK;
}

int verb_stats(Context *ctx, const CtlVerb *verb, const CtlArgs *a) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL, *list = NULL;
        const char *format = a->opt[OPT_FORMAT], *output = a->opt[OPT_OUTPUT];
        JsonWriter w;
        int r;

        (void) verb;
        if (format && strcmp(format, "json") != 0 && strcmp(format, "table") != 0)
                return stats_metrics(ctx, format, output);
        if (output)
                return usage_error("stats: --output needs --format=openmetrics or prometheus");
        if (format && strcmp(format, "json") == 0)
                ctx->json = true;
        r = call_empty(ctx, CMWQ__REQUEST__BODY_STATS, CMWQ__RESPONSE__BODY_STATS, &resp);
        if (r != 0)
                return r;
        if (ctx->json) {
                json_init(&w, stdout);
                stats_json(resp->stats, &w);
                json_finish(&w);
                return CTL_EXIT_OK;
        }

        /* The queues' flags decide which columns apply, as in wq_monitor.py;
         * a cmwqd from before they came with the statistics is asked for
         * its list. */
        for (size_t i = 0; i < resp->stats->n_workqueues && !list; i++)
                if (!resp->stats->workqueues[i]->has_flags) {
                        r = call_empty(ctx, CMWQ__REQUEST__BODY_LIST, CMWQ__RESPONSE__BODY_LIST, &list);
                        if (r != 0)
                                return r;
                }
        if (stats_print(resp->stats, list ? list->list : NULL, stdout) < 0)
                return fail_oom();
        return CTL_EXIT_OK;
}
