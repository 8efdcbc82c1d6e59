/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmwqctl: the one option parser, and the help printed from the table of
 * verbs (cmwqctl-verbs.h; the table itself is in cmwqctl.c). */

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cmwqctl.h"
#include "cmwqctl-verbs.h"
#include "util.h"

const CtlOption ctl_common_options[] = {
        { "socket",  's', "PATH", "Talk to cmwqd at PATH", OPT_SOCKET, CTL_VALUE_FILE },
        { "json",    'j', NULL,   "Print JSON",           OPT_JSON },
        { "help",    'h', NULL,   "Show this help",       OPT_HELP },
        { "version", 0,   NULL,   "Show the version",     OPT_VERSION },
        {}
};

/* getopt_long's value for an option without a short name. */
#define LONG_ONLY(id) (0x100 + (id))

/* Enough for the common options and any verb's own. */
#define CTL_MAX_OPTIONS 32

const CtlVerb *ctl_verb_find(const char *name) {
        for (size_t i = 0; i < ctl_n_verbs; i++)
                if (strcmp(ctl_verbs[i].name, name) == 0)
                        return &ctl_verbs[i];
        return NULL;
}

static const CtlOption *option_by_value(const CtlOption *const lists[2], int c) {
        for (size_t l = 0; l < 2; l++)
                for (const CtlOption *o = lists[l]; o && o->name; o++)
                        if (o->short_name ? c == o->short_name : c == LONG_ONLY(o->id))
                                return o;
        return NULL;
}

/* getopt_long's tables for @lists; "+" stops at the first argument that
 * is not an option. */
static void getopt_tables(const CtlOption *const lists[2], bool stop, struct option *longopts, char *shortopts) {
        size_t n = 0;
        char *s = shortopts;

        if (stop)
                *s++ = '+';
        *s++ = ':';     /* a missing value is ':', apart from an unknown option */
        for (size_t l = 0; l < 2; l++)
                for (const CtlOption *o = lists[l]; o && o->name; o++) {
                        if (n + 1 >= CTL_MAX_OPTIONS)
                                abort();        /* the table is ours: raise CTL_MAX_OPTIONS */
                        longopts[n++] = (struct option) {
                                .name = o->name,
                                .has_arg = o->value ? required_argument : no_argument,
                                .val = o->short_name ?: LONG_ONLY(o->id),
                        };
                        if (o->short_name) {
                                *s++ = o->short_name;
                                if (o->value)
                                        *s++ = ':';
                        }
                }
        longopts[n] = (struct option) {};
        *s = '\0';
}

int ctl_parse(const CtlVerb *verb, int argc, char **argv, CtlArgs *ret, int *ret_next) {
        const CtlOption *const lists[2] = { ctl_common_options, verb ? verb->options : NULL };
        bool command = verb && (verb->flags & CTL_VERB_COMMAND);
        struct option longopts[CTL_MAX_OPTIONS];
        char shortopts[2 * CTL_MAX_OPTIONS + 3];
        const char *name = verb ? verb->name : NULL;
        int first = -1, c;

        *ret = (CtlArgs) {};
        getopt_tables(lists, !verb || command, longopts, shortopts);

        optind = 0;
        opterr = 0;
        for (;;) {
                const CtlOption *o;
                int at = optind > 0 ? optind : 1;       /* the argument getopt looks at */

                c = getopt_long(argc, argv, shortopts, longopts, NULL);
                if (c < 0) {
                        bool dashdash = optind > 1 && strcmp(argv[optind - 1], "--") == 0;

                        /* submit NAME: options may come before and after
                         * NAME; the command starts after it. */
                        if (command && first < 0 && optind < argc && !dashdash) {
                                first = optind++;
                                continue;
                        }
                        break;
                }
                o = option_by_value(lists, c);
                if (!o)
                        return option_error(name, c, argv, at);
                ret->opt[o->id] = o->value ? optarg : "";
                if (o->id == OPT_HELP || o->id == OPT_VERSION)
                        return 0;
        }

        if (!verb) {
                *ret_next = optind;
                return 0;
        }

        if (command) {
                if (first >= 0) {
                        ret->args = argv + first;
                        ret->n_args = 1;
                }
                ret->command = argv + optind;
                ret->n_command = argc - optind;
        } else {
                ret->args = argv + optind;
                ret->n_args = argc - optind;
        }
        if (ret->n_args < verb->min_args)
                return usage_error("%s: missing %s", name,
                                   ret->n_args > 0 && verb->what_more ? verb->what_more : verb->what);
        if (ret->n_args > verb->max_args)
                return usage_error("%s: unexpected argument '%s'", name, ret->args[verb->max_args]);
        if (ret_next)
                *ret_next = optind;
        return 0;
}

/* ------------------------------------------------------------------------ */
/* help */

#define HELP_WIDTH 78   /* the synopsis wraps before this column */
#define HELP_COLUMN 27  /* where a description starts */

/* @text's lines, the first after @used columns already written. */
static void help_text(FILE *f, size_t used, const char *text) {
        bool first = true;

        if (used + 2 > HELP_COLUMN) {
                fputc('\n', f);
                used = 0;
        }
        while (*text) {
                size_t n = strcspn(text, "\n");

                fprintf(f, "%*s%.*s\n", (int) (HELP_COLUMN - (first ? used : 0)), "", (int) n, text);
                text += n;
                if (*text == '\n')
                        text++;
                first = false;
        }
}

/* Append @word to the synopsis line, wrapping under the verb's arguments. */
static void synopsis_word(FILE *f, size_t *used, size_t indent, const char *word) {
        size_t n = strlen(word);

        if (*used + 1 + n > HELP_WIDTH) {
                fprintf(f, "\n%*s", (int) indent, "");
                *used = indent;
        } else {
                fputc(' ', f);
                (*used)++;
        }
        fputs(word, f);
        *used += n;
}

/* "[--max-active N]" */
static void option_synopsis(const CtlOption *o, char *buf, size_t size) {
        snprintf(buf, size, "[--%s%s%s]", o->name, o->value ? " " : "", o->value ?: "");
}

/* "  create NAME [--unbound] ... [--on-interrupt rerun|drop]", wrapped;
 * returns the columns used on its last line. */
static size_t verb_synopsis(const CtlVerb *v, FILE *f, const char *prefix) {
        size_t used, indent;
        char buf[128];

        fprintf(f, "%s%s", prefix, v->name);
        used = strlen(prefix) + strlen(v->name);
        if (v->args)
                synopsis_word(f, &used, used + 1, v->args);
        indent = used + 1;      /* wrapped lines start under the options */
        for (const CtlOption *o = v->options; o && o->name; o++) {
                option_synopsis(o, buf, sizeof(buf));
                synopsis_word(f, &used, indent, buf);
        }
        if (v->args_after)
                synopsis_word(f, &used, indent, v->args_after);
        return used;
}

/* "  -s --socket=PATH         Talk to cmwqd at PATH" */
static void option_help(const CtlOption *o, FILE *f) {
        int n;

        if (o->short_name)
                n = fprintf(f, "  -%c --%s", o->short_name, o->name);
        else
                n = fprintf(f, "     --%s", o->name);
        if (o->value)
                n += fprintf(f, "=%s", o->value);
        help_text(f, n > 0 ? (size_t) n : 0, o->help);
}

void ctl_help(FILE *f) {
        const char *group = NULL;

        fputs("cmwqctl [OPTIONS...] COMMAND ...\n"
              "\n"
              "Control cmwqd, the concurrency-managed workqueue daemon.\n", f);
        for (size_t i = 0; i < ctl_n_verbs; i++) {
                const CtlVerb *v = &ctl_verbs[i];

                if (!group || strcmp(group, v->group) != 0) {
                        group = v->group;
                        fprintf(f, "\n%s:\n", group);
                }
                help_text(f, verb_synopsis(v, f, "  "), v->summary);
        }

        fputs("\nOptions:\n", f);
        for (const CtlOption *o = ctl_common_options; o->name; o++)
                option_help(o, f);

        for (size_t i = 0; i < ctl_n_verbs; i++) {
                const CtlVerb *v = &ctl_verbs[i];

                if (!v->options || !v->options->name)
                        continue;
                fprintf(f, "\nOptions of %s:\n", v->name);
                for (const CtlOption *o = v->options; o->name; o++)
                        option_help(o, f);
        }

        fputs("\n"
              "The socket is PATH, else $CMWQ_SOCKET, else $XDG_RUNTIME_DIR/cmwqd.sock\n"
              "if it exists, else /run/cmwqd/cmwqd.sock.\n"
              "\n"
              "Exit status: 0 success, 1 cmwqd refused the request, 2 usage error,\n"
              "3 cannot connect or protocol error.  submit --wait and wait exit with the\n"
              "item's exit status, 128+N if a signal N killed it, 124 if it timed out,\n"
              "125 if it was cancelled or interrupted, 127 if it could not be started.\n"
              "\n"
              "See the cmwqctl(1) manual page for details.\n", f);
}

void ctl_verb_help(const CtlVerb *v, FILE *f) {
        verb_synopsis(v, f, "cmwqctl ");
        fputs("\n\n", f);
        fprintf(f, "%s.\n", v->summary);
        fputs("\nOptions:\n", f);
        for (const CtlOption *o = v->options; o && o->name; o++)
                option_help(o, f);
        for (const CtlOption *o = ctl_common_options; o->name; o++)
                option_help(o, f);
        fputs("\nSee the cmwqctl(1) manual page for details.\n", f);
}
