/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the parts of cmwqctl share: the context of a run, option parsing and
 * error reporting, the calls to cmwqd, and the commands. */

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "cmwq.pb-c.h"

typedef struct Context {
        const char *socket_arg;         /* --socket, NULL if not given */
        bool json;
        char *socket_path;              /* resolved when connecting */
        struct conn *conn;
} Context;

void response_freep(Cmwq__Response **r);

enum {
        ARG_VERSION = 0x100,
        ARG_UNBOUND,
        ARG_ORDERED,
        ARG_HIGHPRI,
        ARG_CPU_INTENSIVE,
        ARG_FREEZABLE,
        ARG_MEM_RECLAIM,
        ARG_MAX_ACTIVE,
        ARG_ON_INTERRUPT,
        ARG_CPU,
        ARG_DELAY,
        ARG_KEY,
        ARG_TIMEOUT,
        ARG_STDIN,
        ARG_WAIT,
};

/* Accepted before the command and after it. */
#define COMMON_OPTIONS                                                  \
        { "help",    no_argument,       NULL, 'h'         },            \
        { "version", no_argument,       NULL, ARG_VERSION },            \
        { "json",    no_argument,       NULL, 'j'         },            \
        { "socket",  required_argument, NULL, 's'         }
#define COMMON_SHORT_OPTIONS ":hjs:"

/* Errors: each prints one "cmwqctl: ..." line on stderr and returns the
 * exit status to end with. */
int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int fail_oom(void);
void print_daemon_message(const char *prefix, const char *m);
int daemon_refused(const Cmwq__Response *resp);
int unexpected_reply(void);

/* Options and arguments.  These return 0 to go on, else the exit status. */
bool common_option(Context *ctx, int c);        /* true if handled; exits for --help/--version */
int option_error(const char *verb, int c, char **argv);
int check_args(const char *verb, int argc, char **argv, int min, int max, const char *what);
int parse_common_options(Context *ctx, int argc, char **argv);
int parse_name(const char *verb, const char *s, const char **ret);
int parse_id(const char *verb, const char *s, uint64_t *ret);
int parse_seconds_option(const char *verb, const char *opt, const char *s, uint64_t *ret);

/* Calls: 0 and the response, or the exit status after printing why not. */
int ctx_call(Context *ctx, Cmwq__Request *req, Cmwq__Response **ret);
int call_simple(Context *ctx, Cmwq__Request *req);

/* The commands: argv[0] is the command's name; they return the exit status. */
int verb_create(Context *ctx, int argc, char **argv);
int verb_name_only(Context *ctx, int argc, char **argv);        /* destroy, flush, drain */
int verb_set_max_active(Context *ctx, int argc, char **argv);
int verb_freeze_thaw(Context *ctx, int argc, char **argv);
int verb_list(Context *ctx, int argc, char **argv);
int verb_pools(Context *ctx, int argc, char **argv);
int verb_stats(Context *ctx, int argc, char **argv);
int verb_submit(Context *ctx, int argc, char **argv);
int verb_id(Context *ctx, int argc, char **argv);               /* wait, show, cancel */
