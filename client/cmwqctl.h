/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the parts of cmwqctl share: the context of a run, option parsing and
 * error reporting, the calls to cmwqd, and the commands. */

#include <stdbool.h>
#include <stdint.h>

#include "cmwq.pb-c.h"
#include "cmwqctl-verbs.h"

struct conn;

typedef struct Context {
        const char *socket_arg;         /* --socket, NULL if not given */
        bool json;
        char *socket_path;              /* resolved when connecting */
        struct conn *conn;
} Context;

void response_freep(Cmwq__Response **r);

/* Errors: each prints one "cmwqctl: ..." line on stderr and returns the
 * exit status to end with. */
int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int fail_oom(void);
void print_daemon_message(const char *prefix, const char *m);
int daemon_refused(const Cmwq__Response *resp);
int unexpected_reply(void);

/* Options and arguments.  These return 0 to go on, else the exit status. */
/* The usage error for getopt_long()'s @c; @at: optind before the call
 * (getopt leaves it on a cluster of short options it has not finished). */
int option_error(const char *verb, int c, char **argv, int at);
int parse_name(const char *verb, const char *s, const char **ret);
int parse_id(const char *verb, const char *s, uint64_t *ret);
/* Seconds ("2", "0.5") into *@ret in us; over @max_usec is a usage error too. */
int parse_seconds_option(const char *verb, const char *opt, const char *s, uint64_t max_usec, uint64_t *ret);

/* Calls: 0 and the response, or the exit status after printing why not. */
int ctx_call(Context *ctx, Cmwq__Request *req, Cmwq__Response **ret);
int call_simple(Context *ctx, Cmwq__Request *req);

/* cmwqctl __complete CWORD WORD...: for the shell completion
 * (cmwqctl-complete.c); @argv starts with "__complete". */
int ctl_complete(Context *ctx, int argc, char **argv);

/* The commands (the table is in cmwqctl.c): they return the exit status. */
int verb_create(Context *ctx, const CtlVerb *verb, const CtlArgs *args);
int verb_name_only(Context *ctx, const CtlVerb *verb, const CtlArgs *args);    /* destroy, flush, drain */
int verb_set_max_active(Context *ctx, const CtlVerb *verb, const CtlArgs *args);
int verb_freeze_thaw(Context *ctx, const CtlVerb *verb, const CtlArgs *args);
int verb_list(Context *ctx, const CtlVerb *verb, const CtlArgs *args);
int verb_pools(Context *ctx, const CtlVerb *verb, const CtlArgs *args);
int verb_stats(Context *ctx, const CtlVerb *verb, const CtlArgs *args);
int verb_top(Context *ctx, const CtlVerb *verb, const CtlArgs *args);         /* cmwqctl-top.c */
/* stats --format=openmetrics|prometheus [--output=FILE] (cmwqctl-top.c):
 * the exit status. */
int stats_metrics(Context *ctx, const char *format, const char *output);
int verb_submit(Context *ctx, const CtlVerb *verb, const CtlArgs *args);
int verb_id(Context *ctx, const CtlVerb *verb, const CtlArgs *args);           /* wait, show, cancel */
