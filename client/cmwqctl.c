/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmwqctl: the shell tool of cmwq.  One command per run, one request (or a
 * few) over one connection to cmwqd.  This file: main(), option parsing,
 * error reporting and the calls; the commands are in cmwqctl-queue.c and
 * cmwqctl-work.c. */

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmwqctl.h"
#include "cmwqctl-util.h"
#include "conn.h"
#include "frame.h"
#include "util.h"

static void context_done(Context *ctx) {
        ctx->conn = conn_close(ctx->conn);
        free(ctx->socket_path);
        ctx->socket_path = NULL;
}

void response_freep(Cmwq__Response **r) {
        if (*r)
                cmwq__response__free_unpacked(*r, NULL);
}

static void version(void) {
        printf("cmwqctl (" PACKAGE_NAME ") " PACKAGE_VERSION "\n"
               "protocol version %u\n", CMWQ_PROTOCOL_VERSION);
}

static int message_v(int code, const char *suffix, const char *fmt, va_list ap) {
        fputs("cmwqctl: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputs(suffix, stderr);
        fputc('\n', stderr);
        return code;
}

/* Print "cmwqctl: ..." as one line on stderr and return @code. */
int fail(int code, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = message_v(code, "", fmt, ap);
        va_end(ap);
        return r;
}

/* One line, with the hint, and the usage exit status. */
int usage_error(const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = message_v(CTL_EXIT_USAGE, " (see 'cmwqctl --help')", fmt, ap);
        va_end(ap);
        return r;
}

int fail_oom(void) {
        return fail(CTL_EXIT_REFUSED, "out of memory");
}

/* @prefix, then a message from the daemon on the same line, whatever it
 * contains. */
void print_daemon_message(const char *prefix, const char *m) {
        fputs(prefix, stderr);
        for (; *m; m++)
                fputc((unsigned char) *m < 0x20 || *m == 0x7f ? ' ' : *m, stderr);
        fputc('\n', stderr);
}

int daemon_refused(const Cmwq__Response *resp) {
        print_daemon_message("cmwqctl: ", resp->message && *resp->message ? resp->message :
                                          conn_error_to_string(resp->error));
        if (resp->error == CMWQ__ERROR__PROTOCOL || resp->error == CMWQ__ERROR__VERSION_MISMATCH)
                return CTL_EXIT_CONNECT;
        return CTL_EXIT_REFUSED;
}

int unexpected_reply(void) {
        return fail(CTL_EXIT_CONNECT, "unexpected reply from cmwqd (protocol error)");
}

int option_error(const char *verb, int c, char **argv, int at) {
        const char *sep = verb ? ": " : "", *arg = optind == at ? argv[at] : argv[optind - 1];
        const char *eq = strchr(arg, '=');

        verb = verb ?: "";
        if (c == ':')
                return usage_error("%s%soption '%s' requires an argument", verb, sep, arg);
        /* "--json=yes": getopt names the option by its short letter, which
         * the user did not type. */
        if (strncmp(arg, "--", 2) == 0 && eq && optopt != 0)
                return usage_error("%s%soption '%.*s' takes no value", verb, sep, (int) (eq - arg), arg);
        if (strncmp(arg, "--", 2) != 0 && optopt > 0 && optopt < 0x80 && isprint(optopt))
                return usage_error("%s%sunknown option '-%c'", verb, sep, optopt);
        return usage_error("%s%sunknown option '%s'", verb, sep, arg);
}

int parse_name(const char *verb, const char *s, const char **ret) {
        if (!*s)
                return usage_error("%s: workqueue NAME must not be empty", verb);
        *ret = s;
        return 0;
}

int parse_id(const char *verb, const char *s, uint64_t *ret) {
        if (parse_uint64(s, ret) < 0)
                return usage_error("%s: invalid work ID '%s'", verb, s);
        return 0;
}

int parse_seconds_option(const char *verb, const char *opt, const char *s, uint64_t max_usec, uint64_t *ret) {
        int r;

        r = parse_seconds_usec(s, ret);
        if (r == -ERANGE)
                return usage_error("%s: --%s value '%s' is too large", verb, opt, s);
        if (r < 0)
                return usage_error("%s: invalid --%s value '%s' (expected seconds, e.g. 2 or 0.5)", verb, opt, s);
        /* The daemon's limits are whole days (proto/request-limits.h). */
        if (*ret > max_usec)
                return usage_error("%s: --%s '%s' is over the limit of %" PRIu64 " days", verb, opt, s,
                                   max_usec / (UINT64_C(24) * 3600 * 1000000));
        return 0;
}

static int ctx_connect(Context *ctx) {
        int r;

        if (ctx->conn)
                return 0;

        r = conn_socket_path(ctx->socket_arg, &ctx->socket_path);
        if (r < 0)
                return fail_oom();
        r = conn_new(&ctx->conn);
        if (r < 0)
                return fail_oom();

        r = conn_connect(ctx->conn, ctx->socket_path, "cmwqctl");
        if (r < 0) {
                const char *m = conn_last_error(ctx->conn);

                if (m) {
                        fprintf(stderr, "cmwqctl: cmwqd at %s refused the connection: ", ctx->socket_path);
                        print_daemon_message("", m);
                        /* Over a per-user limit: refused like any request. */
                        return r == conn_error_to_errno(CMWQ__ERROR__LIMIT_EXCEEDED) ? CTL_EXIT_REFUSED
                                                                                       : CTL_EXIT_CONNECT;
                }
                return fail(CTL_EXIT_CONNECT, "cannot connect to cmwqd at %s: %s",
                            ctx->socket_path, strerror(-r));
        }
        return 0;
}

/* Send @req and return its response in *ret; or print why not and return
 * the exit status. */
int ctx_call(Context *ctx, Cmwq__Request *req, Cmwq__Response **ret) {
        size_t size;
        int r;

        r = ctx_connect(ctx);
        if (r != 0)
                return r;

        req->id = UINT64_MAX;   /* the longest id, for the size check */
        size = cmwq__request__get_packed_size(req);
        if (size > conn_max_payload(ctx->conn))
                return usage_error("request too large: %zu bytes, cmwqd accepts at most %" PRIu32,
                                   size, conn_max_payload(ctx->conn));

        r = conn_call(ctx->conn, req, ret);
        if (r < 0) {
                const char *m = conn_last_error(ctx->conn);

                if (m) {
                        print_daemon_message("cmwqctl: cmwqd ended the connection: ", m);
                        return CTL_EXIT_CONNECT;
                }
                if (r == -ECONNRESET)
                        return fail(CTL_EXIT_CONNECT, "cmwqd at %s closed the connection before answering",
                                    ctx->socket_path);
                if (r == -EMSGSIZE || r == -EBADMSG)
                        return fail(CTL_EXIT_CONNECT, "malformed reply from cmwqd at %s: %s",
                                    ctx->socket_path, strerror(-r));
                return fail(CTL_EXIT_CONNECT, "lost connection to cmwqd at %s: %s",
                            ctx->socket_path, strerror(-r));
        }
        return 0;
}

/* A request whose successful answer carries nothing to show. */
int call_simple(Context *ctx, Cmwq__Request *req) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        int r;

        r = ctx_call(ctx, req, &resp);
        if (r != 0)
                return r;
        if (resp->error != CMWQ__ERROR__OK)
                return daemon_refused(resp);
        return CTL_EXIT_OK;
}

/* ------------------------------------------------------------------------ */

/* The verbs: the man page's order, which is --help's. */

static const CtlOption create_options[] = {
        { "unbound",       0, NULL, "Not bound to a CPU, no concurrency management", OPT_UNBOUND },
        { "ordered",       0, NULL, "Run items one at a time, in queueing order", OPT_ORDERED },
        { "highpri",       0, NULL, "Use the high-priority pools", OPT_HIGHPRI },
        { "cpu-intensive", 0, NULL, "Items do not count toward the concurrency level", OPT_CPU_INTENSIVE },
        { "freezable",     0, NULL, "Stopped by 'freeze', restarted by 'thaw'", OPT_FREEZABLE },
        { "mem-reclaim",   0, NULL, "Needs forward progress: a rescuer process is kept\n"
                                    "ready for it", OPT_MEM_RECLAIM },
        { "max-active",    0, "N", "Items running at once, per CPU (bound) or in\n"
                                   "total (unbound); 0: the default, 256", OPT_MAX_ACTIVE },
        { "on-interrupt",  0, "rerun|drop", "Items running when cmwqd stopped or died: run\n"
                                            "them again, or report them interrupted (default)",
          OPT_ON_INTERRUPT, CTL_VALUE_WORDS, "rerun drop" },
        {}
};

static const CtlOption stats_options[] = {
        { "format", 0, "FORMAT", "table (default), json (as --json), openmetrics\n"
                                 "(OpenMetrics text), prometheus (for node_exporter's\n"
                                 "textfile collector)",
          OPT_FORMAT, CTL_VALUE_WORDS, "table json openmetrics prometheus" },
        { "output", 0, "FILE", "Metrics into FILE, replaced at once (written beside\n"
                               "it, then renamed)", OPT_OUTPUT, CTL_VALUE_FILE },
        {}
};

static const CtlOption top_options[] = {
        { "interval",   0, "SECONDS", "Refresh every SECONDS (default 1, decimals allowed)", OPT_INTERVAL },
        { "iterations", 0, "N", "Stop after N refreshes (default: until Ctrl-C)", OPT_ITERATIONS },
        { "plain",      0, NULL, "No screen control: one block of lines per refresh\n"
                                 "(the default when stdout is not a terminal)", OPT_PLAIN },
        {}
};

static const CtlOption freeze_options[] = {
        { "timeout", 0, "SECONDS", "Wait at most SECONDS for running items", OPT_TIMEOUT },
        {}
};

static const CtlOption submit_options[] = {
        { "cpu",     0, "N",       "Queue on CPU N (default: the CPU cmwqctl runs on)", OPT_CPU },
        { "delay",   0, "SECONDS", "Queue after SECONDS (decimals allowed: 0.5)", OPT_DELAY },
        { "key",     0, "KEY",     "Queue nothing while an item with KEY is pending", OPT_KEY },
        { "timeout", 0, "SECONDS", "Stop the item's processes after SECONDS running", OPT_TIMEOUT },
        { "stdin",   0, "FILE",    "Feed FILE ('-': this stdin) to the item's stdin", OPT_STDIN, CTL_VALUE_FILE },
        { "wait",    0, NULL,      "Wait for the item to end, print its output,\n"
                                   "exit with its status", OPT_WAIT },
        {}
};

#define WORKQUEUES "Workqueues"
#define WORK_ITEMS "Work items"
#define INSPECTION "Inspection"

const CtlVerb ctl_verbs[] = {
        { .name = "create", .group = WORKQUEUES, .args = "NAME", .summary = "Create a workqueue",
          .min_args = 1, .max_args = 1, .what = "workqueue NAME", .options = create_options,
          .run = verb_create },
        { .name = "destroy", .group = WORKQUEUES, .args = "NAME", .summary = "Destroy a workqueue",
          .min_args = 1, .max_args = 1, .what = "workqueue NAME", .complete = CTL_VALUE_QUEUE,
          .request = CMWQ__REQUEST__BODY_DESTROY, .run = verb_name_only },
        { .name = "set-max-active", .group = WORKQUEUES, .args = "NAME N",
          .summary = "Set a workqueue's max_active (0: the default, 256)",
          .min_args = 2, .max_args = 2, .what = "workqueue NAME and N", .what_more = "N",
          .complete = CTL_VALUE_QUEUE,
          .run = verb_set_max_active },
        { .name = "flush", .group = WORKQUEUES, .args = "NAME",
          .summary = "Wait for every item queued before this call",
          .min_args = 1, .max_args = 1, .what = "workqueue NAME", .complete = CTL_VALUE_QUEUE,
          .request = CMWQ__REQUEST__BODY_FLUSH, .run = verb_name_only },
        { .name = "drain", .group = WORKQUEUES, .args = "NAME", .summary = "Wait until the workqueue is empty",
          .min_args = 1, .max_args = 1, .what = "workqueue NAME", .complete = CTL_VALUE_QUEUE,
          .request = CMWQ__REQUEST__BODY_DRAIN, .run = verb_name_only },
        { .name = "freeze", .group = WORKQUEUES, .args = "[NAME]",
          .summary = "Freeze one or every freezable workqueue",
          .max_args = 1, .complete = CTL_VALUE_QUEUE, .options = freeze_options,
          .request = CMWQ__REQUEST__BODY_FREEZE, .run = verb_freeze_thaw },
        { .name = "thaw", .group = WORKQUEUES, .args = "[NAME]", .summary = "Thaw one or every frozen workqueue",
          .max_args = 1, .complete = CTL_VALUE_QUEUE,
          .request = CMWQ__REQUEST__BODY_THAW, .run = verb_freeze_thaw },

        { .name = "submit", .group = WORK_ITEMS, .args = "NAME", .args_after = "-- PROGRAM [ARG...]",
          .summary = "Queue PROGRAM, print the work ID",
          .min_args = 1, .max_args = 1, .what = "workqueue NAME", .complete = CTL_VALUE_QUEUE,
          .flags = CTL_VERB_COMMAND, .options = submit_options, .run = verb_submit },
        { .name = "wait", .group = WORK_ITEMS, .args = "ID",
          .summary = "Wait for an item to end, print its output,\nexit with its status",
          .min_args = 1, .max_args = 1, .what = "work ID", .complete = CTL_VALUE_ITEM_UNFINISHED,
          .request = CMWQ__REQUEST__BODY_WAIT, .run = verb_id },
        { .name = "show", .group = WORK_ITEMS, .args = "ID", .summary = "Show an item: state, result, output",
          .min_args = 1, .max_args = 1, .what = "work ID", .complete = CTL_VALUE_ITEM,
          .request = CMWQ__REQUEST__BODY_SHOW, .run = verb_id },
        { .name = "cancel", .group = WORK_ITEMS, .args = "ID",
          .summary = "Cancel a pending item or stop a running one",
          .min_args = 1, .max_args = 1, .what = "work ID", .complete = CTL_VALUE_ITEM_UNFINISHED,
          .request = CMWQ__REQUEST__BODY_CANCEL, .run = verb_id },

        { .name = "list", .group = INSPECTION, .summary = "Workqueues and their counters", .run = verb_list },
        { .name = "pools", .group = INSPECTION,
          .summary = "Worker pools: CPU, priority, workers, running,\nidle, pending", .run = verb_pools },
        { .name = "stats", .group = INSPECTION, .summary = "Per-workqueue statistics (wq_monitor columns)",
          .options = stats_options, .run = verb_stats },
        { .name = "top", .group = INSPECTION, .summary = "Live pools and workqueues, rates per second",
          .options = top_options, .run = verb_top },
};
const size_t ctl_n_verbs = ELEMENTSOF(ctl_verbs);

/* --help and --version, wherever they came. */
static int help_or_version(const CtlArgs *args, const CtlVerb *verb) {
        if (args->opt[OPT_VERSION])
                version();
        else if (verb)
                ctl_verb_help(verb, stdout);
        else
                ctl_help(stdout);
        return CTL_EXIT_OK;
}

int main(int argc, char *argv[]) {
        _cleanup_(context_done) Context ctx = {};
        CtlArgs before, args;
        const CtlVerb *verb;
        int next, r;

        if (argc > 1 && strcmp(argv[1], "__complete") == 0)
                return ctl_complete(&ctx, argc - 1, argv + 1);

        r = ctl_parse(NULL, argc, argv, &before, &next);
        if (r != 0)
                return r;
        if (before.opt[OPT_HELP] || before.opt[OPT_VERSION])
                return help_or_version(&before, NULL);
        if (next >= argc)
                return usage_error("missing COMMAND");

        verb = ctl_verb_find(argv[next]);
        if (!verb)
                return usage_error("unknown command '%s'", argv[next]);

        r = ctl_parse(verb, argc - next, argv + next, &args, NULL);
        if (r != 0)
                return r;
        if (args.opt[OPT_HELP] || args.opt[OPT_VERSION])
                return help_or_version(&args, verb);

        /* The common options count before and after the command; the
         * last --socket wins. */
        ctx.json = before.opt[OPT_JSON] || args.opt[OPT_JSON];
        ctx.socket_arg = args.opt[OPT_SOCKET] ?: before.opt[OPT_SOCKET];

        r = verb->run(&ctx, verb, &args);

        if (fflush(stdout) != 0 || ferror(stdout)) {
                fail(CTL_EXIT_REFUSED, "cannot write output: %s", strerror(errno ?: EIO));
                if (r == CTL_EXIT_OK)
                        r = CTL_EXIT_REFUSED;
        }
        return r;
}
