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

static void help(void) {
        fputs("cmwqctl [OPTIONS...] COMMAND ...\n"
              "\n"
              "Control cmwqd, the concurrency-managed workqueue daemon.\n"
              "\n"
              "Workqueues:\n"
              "  create NAME [--unbound] [--ordered] [--highpri] [--cpu-intensive]\n"
              "              [--freezable] [--mem-reclaim] [--max-active N]\n"
              "              [--on-interrupt rerun|drop]\n"
              "                           Create a workqueue\n"
              "  destroy NAME             Destroy a workqueue\n"
              "  set-max-active NAME N    Set a workqueue's max_active (0: the default, 256)\n"
              "  flush NAME               Wait for every item queued before this call\n"
              "  drain NAME               Wait until the workqueue is empty\n"
              "  freeze [NAME] [--timeout SECONDS]\n"
              "                           Freeze one or every freezable workqueue\n"
              "  thaw [NAME]              Thaw one or every frozen workqueue\n"
              "\n"
              "Work items:\n"
              "  submit NAME [--cpu N] [--delay SECONDS] [--key KEY] [--timeout SECONDS]\n"
              "              [--stdin FILE] [--wait] -- PROGRAM [ARG...]\n"
              "                           Queue PROGRAM, print the work ID\n"
              "  wait ID                  Wait for an item to end, print its output,\n"
              "                           exit with its status\n"
              "  show ID                  Show an item: state, result, output\n"
              "  cancel ID                Cancel a pending item or stop a running one\n"
              "\n"
              "Inspection:\n"
              "  list                     Workqueues and their counters\n"
              "  pools                    Worker pools: CPU, priority, workers, running,\n"
              "                           idle, pending\n"
              "  stats                    Per-workqueue statistics (wq_monitor columns)\n"
              "\n"
              "Options:\n"
              "  -s --socket=PATH         Talk to cmwqd at PATH\n"
              "  -j --json                Print JSON\n"
              "  -h --help                Show this help\n"
              "     --version             Show the version\n"
              "\n"
              "Options of create:\n"
              "     --unbound             Not bound to a CPU, no concurrency management\n"
              "     --ordered             Run items one at a time, in queueing order\n"
              "     --highpri             Use the high-priority pools\n"
              "     --cpu-intensive       Items do not count toward the concurrency level\n"
              "     --freezable           Stopped by 'freeze', restarted by 'thaw'\n"
              "     --mem-reclaim         Needs forward progress (no rescuer yet: see cmwqctl(1))\n"
              "     --max-active=N        Items running at once, per CPU (bound) or in\n"
              "                           total (unbound); 0: the default, 256\n"
              "     --on-interrupt=rerun|drop\n"
              "                           Items running when cmwqd stopped or died: run\n"
              "                           them again, or report them interrupted (default)\n"
              "\n"
              "Options of submit:\n"
              "     --cpu=N               Queue on CPU N (default: the CPU cmwqctl runs on)\n"
              "     --delay=SECONDS       Queue after SECONDS (decimals allowed: 0.5)\n"
              "     --key=KEY             Queue nothing while an item with KEY is pending\n"
              "     --timeout=SECONDS     Stop the item's processes after SECONDS running\n"
              "     --stdin=FILE          Feed FILE ('-': this stdin) to the item's stdin\n"
              "     --wait                Wait for the item to end, print its output,\n"
              "                           exit with its status\n"
              "\n"
              "Options of freeze:\n"
              "     --timeout=SECONDS     Wait at most SECONDS for running items\n"
              "\n"
              "The socket is PATH, else $CMWQ_SOCKET, else $XDG_RUNTIME_DIR/cmwqd.sock\n"
              "if it exists, else /run/cmwqd/cmwqd.sock.\n"
              "\n"
              "Exit status: 0 success, 1 cmwqd refused the request, 2 usage error,\n"
              "3 cannot connect or protocol error.  submit --wait and wait exit with the\n"
              "item's exit status, 128+N if a signal N killed it, 124 if it timed out,\n"
              "125 if it was cancelled, 127 if it could not be started.\n"
              "\n"
              "See the cmwqctl(1) manual page for details.\n", stdout);
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

bool common_option(Context *ctx, int c) {
        switch (c) {
        case 'h':
                help();
                exit(CTL_EXIT_OK);
        case ARG_VERSION:
                version();
                exit(CTL_EXIT_OK);
        case 'j':
                ctx->json = true;
                return true;
        case 's':
                ctx->socket_arg = optarg;
                return true;
        }
        return false;
}

int option_error(const char *verb, int c, char **argv) {
        const char *sep = verb ? ": " : "";

        verb = verb ?: "";
        if (c == ':')
                return usage_error("%s%soption '%s' requires an argument", verb, sep, argv[optind - 1]);
        if (optopt > 0 && optopt < 0x80 && isprint(optopt))
                return usage_error("%s%sunknown option '-%c'", verb, sep, optopt);
        return usage_error("%s%sunknown option '%s'", verb, sep, argv[optind - 1]);
}

/* Check the number of arguments left after the options. */
int check_args(const char *verb, int argc, char **argv, int min, int max, const char *what) {
        int n = argc - optind;

        if (n < min)
                return usage_error("%s: missing %s", verb, what);
        if (n > max)
                return usage_error("%s: unexpected argument '%s'", verb, argv[optind + max]);
        return 0;
}

/* For commands without options of their own.  Leaves optind at the first
 * positional argument. */
int parse_common_options(Context *ctx, int argc, char **argv) {
        static const struct option options[] = { COMMON_OPTIONS, {} };
        int c;

        optind = 0;
        while ((c = getopt_long(argc, argv, COMMON_SHORT_OPTIONS, options, NULL)) >= 0)
                if (!common_option(ctx, c))
                        return option_error(argv[0], c, argv);
        return 0;
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

int parse_seconds_option(const char *verb, const char *opt, const char *s, uint64_t *ret) {
        int r;

        r = parse_seconds_usec(s, ret);
        if (r == -ERANGE)
                return usage_error("%s: --%s value '%s' is too large", verb, opt, s);
        if (r < 0)
                return usage_error("%s: invalid --%s value '%s' (expected seconds, e.g. 2 or 0.5)", verb, opt, s);
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

static const struct {
        const char *name;
        int (*run)(Context *ctx, int argc, char **argv);
} verbs[] = {
        { "create",         verb_create },
        { "destroy",        verb_name_only },
        { "set-max-active", verb_set_max_active },
        { "flush",          verb_name_only },
        { "drain",          verb_name_only },
        { "freeze",         verb_freeze_thaw },
        { "thaw",           verb_freeze_thaw },
        { "submit",         verb_submit },
        { "wait",           verb_id },
        { "show",           verb_id },
        { "cancel",         verb_id },
        { "list",           verb_list },
        { "pools",          verb_pools },
        { "stats",          verb_stats },
};

int main(int argc, char *argv[]) {
        static const struct option options[] = { COMMON_OPTIONS, {} };
        _cleanup_(context_done) Context ctx = {};
        int c, r;

        opterr = 0;
        while ((c = getopt_long(argc, argv, "+" COMMON_SHORT_OPTIONS, options, NULL)) >= 0)
                if (!common_option(&ctx, c))
                        return option_error(NULL, c, argv);

        if (optind >= argc)
                return usage_error("missing COMMAND");

        r = -1;
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (strcmp(argv[optind], verbs[i].name) == 0) {
                        r = verbs[i].run(&ctx, argc - optind, argv + optind);
                        break;
                }
        if (r < 0)
                return usage_error("unknown command '%s'", argv[optind]);

        if (fflush(stdout) != 0 || ferror(stdout)) {
                fail(CTL_EXIT_REFUSED, "cannot write output: %s", strerror(errno ?: EIO));
                if (r == CTL_EXIT_OK)
                        r = CTL_EXIT_REFUSED;
        }
        return r;
}
