/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cmwqctl __complete: the shell completion's helper (shell-completion/bash/cmwqctl).
 *
 * The shell passes the index of the word being completed and the words of
 * the command line; this prints what the word can be, read from the same
 * table of verbs as the parser (cmwqctl-verbs.h), so that completion never
 * lags behind the options: one line naming the kind of candidates, then
 * the candidates, one a line, that start with the word typed so far:
 *
 *   words      the candidates follow (verbs, options, an option's choices,
 *              workqueue names and the caller's item IDs asked from the
 *              running cmwqd)
 *   file       a file name: the shell completes it
 *   command    a program: the shell completes it
 *   none       nothing to offer
 *
 * The completion of "--option=VALUE" offers VALUEs.  Nothing is printed on
 * stderr: a daemon that is not running just means no names.  Not in the
 * table, so not in --help: it is for the completion scripts only.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cmwqctl.h"
#include "cmwqctl-util.h"
#include "request.h"
#include "util.h"

static const CtlOption *option_find(const CtlVerb *verb, const char *word, const char **ret_value) {
        const CtlOption *const lists[2] = { ctl_common_options, verb ? verb->options : NULL };

        *ret_value = NULL;
        for (size_t l = 0; l < 2; l++)
                for (const CtlOption *o = lists[l]; o && o->name; o++) {
                        size_t n = strlen(o->name);

                        if (word[1] == '-' && strncmp(word + 2, o->name, n) == 0 &&
                            (word[2 + n] == '\0' || word[2 + n] == '=')) {
                                if (word[2 + n] == '=')
                                        *ret_value = word + 3 + n;
                                return o;
                        }
                        if (word[1] != '-' && o->short_name && word[1] == o->short_name) {
                                if (word[2])
                                        *ret_value = word + 2;
                                return o;
                        }
                }
        return NULL;
}

static void candidate(const char *word, const char *prefix) {
        if (strncmp(word, prefix, strlen(prefix)) == 0)
                printf("%s\n", word);
}

static void complete_options(const CtlVerb *verb, const char *prefix) {
        const CtlOption *const lists[2] = { verb ? verb->options : NULL, ctl_common_options };
        char buf[128];

        puts("words");
        for (size_t l = 0; l < 2; l++)
                for (const CtlOption *o = lists[l]; o && o->name; o++) {
                        snprintf(buf, sizeof(buf), "--%s", o->name);
                        candidate(buf, prefix);
                }
}

static void complete_words(const char *words, const char *prefix) {
        char buf[128];

        puts("words");
        while (words && *words) {
                size_t n = strcspn(words, " ");

                snprintf(buf, sizeof(buf), "%.*s", (int) n, words);
                candidate(buf, prefix);
                words += n;
                words += strspn(words, " ");
        }
}

/* The names of the workqueues the caller sees. */
static void complete_queues(Context *ctx, const char *prefix) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        struct request req;

        puts("words");
        fflush(stdout);
        if (ctx_call(ctx, request_empty(&req, CMWQ__REQUEST__BODY_LIST), &resp) != 0 ||
            resp->error != CMWQ__ERROR__OK || resp->body_case != CMWQ__RESPONSE__BODY_LIST)
                return;
        for (size_t i = 0; i < resp->list->n_workqueues; i++)
                candidate(resp->list->workqueues[i]->name, prefix);
}

/* The IDs of the caller's own items (the daemon's Items request): for
 * wait and cancel those that have not ended, for show those its history
 * keeps too. */
static void complete_items(Context *ctx, const char *prefix, bool unfinished) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        struct request req;
        char buf[24];    /* 2^64 in decimal, and the NUL */

        puts("words");
        fflush(stdout);
        if (ctx_call(ctx, request_empty(&req, CMWQ__REQUEST__BODY_ITEMS), &resp) != 0 ||
            resp->error != CMWQ__ERROR__OK || resp->body_case != CMWQ__RESPONSE__BODY_ITEMS)
                return;
        for (size_t i = 0; i < resp->items->n_items; i++) {
                const Cmwq__ItemInfo *item = resp->items->items[i];

                if (unfinished && item->state >= CMWQ__ITEM_STATE__STATE_FINISHED)
                        continue;
                snprintf(buf, sizeof(buf), "%" PRIu64, item->id);
                candidate(buf, prefix);
        }
}

static int complete_value(Context *ctx, CtlValue kind, const char *words, const char *prefix) {
        switch (kind) {
        case CTL_VALUE_WORDS:
                complete_words(words, prefix);
                break;
        case CTL_VALUE_QUEUE:
                complete_queues(ctx, prefix);
                break;
        case CTL_VALUE_FILE:
                puts("file");
                break;
        case CTL_VALUE_COMMAND:
                puts("command");
                break;
        case CTL_VALUE_ITEM:
        case CTL_VALUE_ITEM_UNFINISHED:
                complete_items(ctx, prefix, kind == CTL_VALUE_ITEM_UNFINISHED);
                break;
        default:
                puts("none");
        }
        return CTL_EXIT_OK;
}

/* argv: "__complete" CWORD WORD... with WORD[0] the program. */
int ctl_complete(Context *ctx, int argc, char **argv) {
        const CtlVerb *verb = NULL;
        const char *cur, *value;
        const CtlOption *o;
        char **words = argv + 2;
        int n_words = argc - 2, cword, n_pos = 0;
        bool options_end = false, command = false, program = false;
        uint32_t u;

        /* Errors about the daemon would garble the shell's line. */
        if (!freopen("/dev/null", "w", stderr))
                return CTL_EXIT_REFUSED;
        if (argc < 3 || parse_uint32(argv[1], &u) < 0 || u == 0 || u > (uint32_t) n_words)
                return usage_error("__complete: expected CWORD and the words of the command line");
        cword = (int) u;
        cur = cword < n_words ? words[cword] : "";

        for (int i = 1; i < cword; i++) {
                const char *w = words[i];

                if (command) {
                        program = true;
                        continue;
                }
                if (!options_end && w[0] == '-' && w[1]) {
                        if (strcmp(w, "--") == 0) {
                                if (verb && (verb->flags & CTL_VERB_COMMAND))
                                        command = true;
                                options_end = verb != NULL;
                                continue;
                        }
                        o = option_find(verb, w, &value);
                        if (o && o->value && !value) {
                                if (i + 1 == cword)     /* the word is this option's value */
                                        return complete_value(ctx, o->complete, o->words, cur);
                                value = words[++i];
                        }
                        if (o && o->id == OPT_SOCKET)
                                ctx->socket_arg = value;
                        continue;
                }
                if (!verb) {
                        verb = ctl_verb_find(w);
                        if (!verb)
                                return complete_value(ctx, CTL_VALUE_NONE, NULL, cur);
                        continue;
                }
                n_pos++;
                /* submit NAME PROGRAM: the first word after NAME that is
                 * not an option starts the command. */
                if ((verb->flags & CTL_VERB_COMMAND) && n_pos > verb->max_args)
                        command = program = true;
        }

        /* PROGRAM, then its arguments: files as good a guess as any. */
        if (command)
                return complete_value(ctx, program ? CTL_VALUE_FILE : CTL_VALUE_COMMAND, NULL, cur);
        if (!options_end && cur[0] == '-') {
                o = option_find(verb, cur, &value);
                if (o && o->value && value && cur[1] == '-')
                        return complete_value(ctx, o->complete, o->words, value);
                complete_options(verb, cur);
                return CTL_EXIT_OK;
        }
        if (!verb) {
                puts("words");
                for (size_t i = 0; i < ctl_n_verbs; i++)
                        candidate(ctl_verbs[i].name, cur);
                return CTL_EXIT_OK;
        }
        if ((verb->flags & CTL_VERB_COMMAND) && n_pos >= verb->max_args)
                return complete_value(ctx, CTL_VALUE_COMMAND, NULL, cur);
        if (n_pos == 0)
                return complete_value(ctx, verb->complete, NULL, cur);
        return complete_value(ctx, CTL_VALUE_NONE, NULL, cur);
}
