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
#include "util.h"

/* The kernel's WQ_MAX_ACTIVE, the documented upper limit of max_active: a
 * larger value is a usage error, found before asking cmwqd. */
#define CTL_MAX_ACTIVE 512u

int verb_create(Context *ctx, int argc, char **argv) {
        static const struct option options[] = {
                COMMON_OPTIONS,
                { "unbound",       no_argument,       NULL, ARG_UNBOUND       },
                { "ordered",       no_argument,       NULL, ARG_ORDERED       },
                { "highpri",       no_argument,       NULL, ARG_HIGHPRI       },
                { "cpu-intensive", no_argument,       NULL, ARG_CPU_INTENSIVE },
                { "freezable",     no_argument,       NULL, ARG_FREEZABLE     },
                { "mem-reclaim",   no_argument,       NULL, ARG_MEM_RECLAIM   },
                { "max-active",    required_argument, NULL, ARG_MAX_ACTIVE    },
                { "on-interrupt",  required_argument, NULL, ARG_ON_INTERRUPT  },
                {}
        };
        struct request_create_args create = { .on_interrupt = CMWQ__INTERRUPT_POLICY__INTERRUPT_DROP };
        struct request req;
        int c, r;

        optind = 0;
        while ((c = getopt_long(argc, argv, COMMON_SHORT_OPTIONS, options, NULL)) >= 0)
                switch (c) {
                case ARG_UNBOUND:       create.flags |= CMWQ__WORKQUEUE_FLAG__FLAG_UNBOUND; break;
                case ARG_ORDERED:       create.flags |= CMWQ__WORKQUEUE_FLAG__FLAG_ORDERED; break;
                case ARG_HIGHPRI:       create.flags |= CMWQ__WORKQUEUE_FLAG__FLAG_HIGHPRI; break;
                case ARG_CPU_INTENSIVE: create.flags |= CMWQ__WORKQUEUE_FLAG__FLAG_CPU_INTENSIVE; break;
                case ARG_FREEZABLE:     create.flags |= CMWQ__WORKQUEUE_FLAG__FLAG_FREEZABLE; break;
                case ARG_MEM_RECLAIM:   create.flags |= CMWQ__WORKQUEUE_FLAG__FLAG_MEM_RECLAIM; break;
                case ARG_MAX_ACTIVE:
                        if (parse_uint32(optarg, &create.max_active) < 0 || create.max_active > CTL_MAX_ACTIVE)
                                return usage_error("create: invalid --max-active value '%s' (0-%u)", optarg,
                                                   CTL_MAX_ACTIVE);
                        create.has_max_active = true;
                        break;
                case ARG_ON_INTERRUPT:
                        if (strcmp(optarg, "rerun") == 0)
                                create.on_interrupt = CMWQ__INTERRUPT_POLICY__INTERRUPT_RERUN;
                        else if (strcmp(optarg, "drop") == 0)
                                create.on_interrupt = CMWQ__INTERRUPT_POLICY__INTERRUPT_DROP;
                        else
                                return usage_error("create: invalid --on-interrupt value '%s' (rerun or drop)",
                                                   optarg);
                        create.has_on_interrupt = true;
                        break;
                default:
                        if (!common_option(ctx, c))
                                return option_error("create", c, argv);
                }

        r = check_args("create", argc, argv, 1, 1, "workqueue NAME");
        if (r != 0)
                return r;
        r = parse_name("create", argv[optind], &create.name);
        if (r != 0)
                return r;

        return call_simple(ctx, request_create(&req, &create));
}

/* destroy, flush, drain: NAME and nothing else. */
int verb_name_only(Context *ctx, int argc, char **argv) {
        struct request req;
        const char *name = NULL;
        int r;

        r = parse_common_options(ctx, argc, argv);
        if (r != 0)
                return r;
        r = check_args(argv[0], argc, argv, 1, 1, "workqueue NAME");
        if (r != 0)
                return r;
        r = parse_name(argv[0], argv[optind], &name);
        if (r != 0)
                return r;

        return call_simple(ctx, request_workqueue(&req,
                                                  strcmp(argv[0], "destroy") == 0 ? CMWQ__REQUEST__BODY_DESTROY :
                                                  strcmp(argv[0], "flush") == 0   ? CMWQ__REQUEST__BODY_FLUSH :
                                                                                    CMWQ__REQUEST__BODY_DRAIN,
                                                  name));
}

int verb_set_max_active(Context *ctx, int argc, char **argv) {
        struct request req;
        const char *name = NULL;
        uint32_t n;
        int r;

        r = parse_common_options(ctx, argc, argv);
        if (r != 0)
                return r;
        r = check_args("set-max-active", argc, argv, 2, 2, "workqueue NAME and N");
        if (r != 0)
                return r;
        r = parse_name("set-max-active", argv[optind], &name);
        if (r != 0)
                return r;
        if (parse_uint32(argv[optind + 1], &n) < 0 || n > CTL_MAX_ACTIVE)
                return usage_error("set-max-active: invalid max_active '%s' (0-%u)", argv[optind + 1],
                                   CTL_MAX_ACTIVE);

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
int verb_freeze_thaw(Context *ctx, int argc, char **argv) {
        /* thaw takes the same without the first entry */
        static const struct option options[] = {
                { "timeout", required_argument, NULL, ARG_TIMEOUT },
                COMMON_OPTIONS,
                {}
        };
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        struct request req;
        uint64_t timeout_usec = 0;
        bool has_timeout = false, freeze = strcmp(argv[0], "freeze") == 0;
        const Cmwq__FreezeReply *reply;
        const char *name = NULL;
        int c, r;

        optind = 0;
        while ((c = getopt_long(argc, argv, COMMON_SHORT_OPTIONS, freeze ? options : options + 1, NULL)) >= 0)
                switch (c) {
                case ARG_TIMEOUT:
                        r = parse_seconds_option(argv[0], "timeout", optarg, &timeout_usec);
                        if (r != 0)
                                return r;
                        has_timeout = true;
                        break;
                default:
                        if (!common_option(ctx, c))
                                return option_error(argv[0], c, argv);
                }

        r = check_args(argv[0], argc, argv, 0, 1, "");
        if (r != 0)
                return r;
        if (optind < argc) {
                r = parse_name(argv[0], argv[optind], &name);
                if (r != 0)
                        return r;
        }

        r = ctx_call(ctx, request_freeze(&req, freeze, name, has_timeout ? &timeout_usec : NULL), &resp);
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

int verb_list(Context *ctx, int argc, char **argv) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        JsonWriter w;
        int r;

        r = parse_common_options(ctx, argc, argv);
        if (r != 0)
                return r;
        r = check_args("list", argc, argv, 0, 0, "");
        if (r != 0)
                return r;

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

int verb_pools(Context *ctx, int argc, char **argv) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        JsonWriter w;
        int r;

        r = parse_common_options(ctx, argc, argv);
        if (r != 0)
                return r;
        r = check_args("pools", argc, argv, 0, 0, "");
        if (r != 0)
                return r;

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

int verb_stats(Context *ctx, int argc, char **argv) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL, *list = NULL;
        JsonWriter w;
        int r;

        r = parse_common_options(ctx, argc, argv);
        if (r != 0)
                return r;
        r = check_args("stats", argc, argv, 0, 0, "");
        if (r != 0)
                return r;

        r = call_empty(ctx, CMWQ__REQUEST__BODY_STATS, CMWQ__RESPONSE__BODY_STATS, &resp);
        if (r != 0)
                return r;
        if (ctx->json) {
                json_init(&w, stdout);
                stats_json(resp->stats, &w);
                json_finish(&w);
                return CTL_EXIT_OK;
        }

        /* The queues' flags decide which columns apply, as in wq_monitor.py. */
        r = call_empty(ctx, CMWQ__REQUEST__BODY_LIST, CMWQ__RESPONSE__BODY_LIST, &list);
        if (r != 0)
                return r;
        if (stats_print(resp->stats, list->list, stdout) < 0)
                return fail_oom();
        return CTL_EXIT_OK;
}
