/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * cmwqctl's commands as a table, as tmux's cmd_entry: each verb has a name,
 * its arguments and options, a summary and the function that runs it.  One
 * parser reads every command line from it, and --help, `cmwqctl VERB
 * --help` and the shell completion are printed from it, so that a new
 * option is one line of the table.
 */

#include <stdbool.h>
#include <stdio.h>

struct Context;

/* Every option's identity, common ones first. */
enum {
        OPT_HELP,
        OPT_VERSION,
        OPT_JSON,
        OPT_SOCKET,
        OPT_UNBOUND,
        OPT_ORDERED,
        OPT_HIGHPRI,
        OPT_CPU_INTENSIVE,
        OPT_FREEZABLE,
        OPT_MEM_RECLAIM,
        OPT_MAX_ACTIVE,
        OPT_ON_INTERRUPT,
        OPT_CPU,
        OPT_DELAY,
        OPT_KEY,
        OPT_TIMEOUT,
        OPT_STDIN,
        OPT_WAIT,
        OPT_FORMAT,
        OPT_OUTPUT,
        OPT_INTERVAL,
        OPT_ITERATIONS,
        OPT_PLAIN,
        _OPT_MAX,
};

/* What an argument or an option's value is, for the completion. */
typedef enum CtlValue {
        CTL_VALUE_NONE,                 /* nothing to offer */
        CTL_VALUE_QUEUE,                /* a workqueue name */
        CTL_VALUE_ITEM,                 /* a work item ID */
        CTL_VALUE_ITEM_UNFINISHED,      /* the ID of an item that has not ended */
        CTL_VALUE_FILE,                 /* a file name */
        CTL_VALUE_COMMAND,              /* a program and its arguments */
        CTL_VALUE_WORDS,                /* one of CtlOption.words */
} CtlValue;

typedef struct CtlOption {
        const char *name;               /* the long name, without "--" */
        char short_name;                /* 0: none */
        const char *value;              /* the value's name in the help ("N"); NULL: a switch */
        const char *help;               /* lines apart by '\n' */
        int id;                         /* OPT_* */
        CtlValue complete;              /* what the value is */
        const char *words;              /* CTL_VALUE_WORDS: the choices, apart by ' ' */
} CtlOption;

/* The options and positional arguments of one command line. */
typedef struct CtlArgs {
        const char *opt[_OPT_MAX];      /* each option's last value; "" for a switch; NULL: absent */
        char **args;                    /* the positional arguments */
        int n_args;
        char **command;                 /* CTL_VERB_COMMAND: PROGRAM [ARG...] */
        int n_command;
} CtlArgs;

typedef struct CtlVerb CtlVerb;
typedef int (*CtlRun)(struct Context *ctx, const CtlVerb *verb, const CtlArgs *args);

enum {
        /* After the first positional argument, the first argument that is
         * not an option (or everything after "--") starts a command whose
         * own options are not ours: submit. */
        CTL_VERB_COMMAND = 1u << 0,
};

struct CtlVerb {
        const char *name;
        const char *group;              /* its heading in --help */
        const char *args;               /* the synopsis before the options: "NAME", "[NAME]" */
        const char *args_after;         /* and after them: "-- PROGRAM [ARG...]" */
        const char *summary;            /* lines apart by '\n' */
        int min_args, max_args;         /* positional arguments */
        const char *what;               /* "missing ...": "workqueue NAME" */
        const char *what_more;          /* the same once the first is given: "N" (NULL: what) */
        CtlValue complete;              /* what the positional arguments are */
        unsigned flags;                 /* CTL_VERB_* */
        int request;                    /* for handlers shared by verbs: the request it sends */
        const CtlOption *options;       /* its own options, ending with {}; NULL: none */
        CtlRun run;
};

/* Accepted before the command and after it. */
extern const CtlOption ctl_common_options[];

extern const CtlVerb ctl_verbs[];
extern const size_t ctl_n_verbs;

const CtlVerb *ctl_verb_find(const char *name);

/*
 * Read the options of @verb (NULL: those before the command) from @argv,
 * argv[0] being the verb or the program name, into @ret.  Before the
 * command, parsing stops at the first argument that is not an option,
 * whose index is returned in *ret_next.  Returns 0, or the exit status
 * after printing the usage error.  --help and --version end parsing at
 * once: ret->opt[OPT_HELP] or [OPT_VERSION] is set and the rest unread.
 * @ret points into @argv.
 */
int ctl_parse(const CtlVerb *verb, int argc, char **argv, CtlArgs *ret, int *ret_next);

/* --help, and `cmwqctl VERB --help`. */
void ctl_help(FILE *f);
void ctl_verb_help(const CtlVerb *verb, FILE *f);
