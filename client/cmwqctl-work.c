/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmwqctl: the work item commands, submit, wait, show and cancel. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmwqctl.h"
#include "cmwqctl-json.h"
#include "cmwqctl-print.h"
#include "cmwqctl-util.h"
#include "frame.h"
#include "request.h"
#include "request-limits.h"
#include "util.h"

extern char **environ;

/* Print an ended item's output as its own and return its exit status. */
static int item_finish(Context *ctx, const Cmwq__ItemInfo *item) {
        int code;

        code = item_exit_code(item);
        if (code < 0)
                return fail(CTL_EXIT_CONNECT, "cmwqd answered before item %" PRIu64 " ended (state %s)",
                            item->id, item_state_to_string(item->state));
        if (ctx->json)
                return code;

        if (item->has_stdout_data && item->stdout_data.len > 0) {
                fwrite(item->stdout_data.data, 1, item->stdout_data.len, stdout);
                fflush(stdout);
        }
        if (item->has_stderr_data && item->stderr_data.len > 0)
                fwrite(item->stderr_data.data, 1, item->stderr_data.len, stderr);
        if (item->has_stdout_truncated && item->stdout_truncated)
                fprintf(stderr, "cmwqctl: item %" PRIu64 ": stdout was truncated\n", item->id);
        if (item->has_stderr_truncated && item->stderr_truncated)
                fprintf(stderr, "cmwqctl: item %" PRIu64 ": stderr was truncated\n", item->id);

        switch (code) {
        case CTL_EXIT_ITEM_NOT_STARTED:
                fprintf(stderr, "cmwqctl: item %" PRIu64 " could not be started: ", item->id);
                print_daemon_message("", item->error ?: "unknown error");
                break;
        case CTL_EXIT_ITEM_CANCELLED:
                if (item->state == CMWQ__ITEM_STATE__STATE_INTERRUPTED)
                        fprintf(stderr, "cmwqctl: item %" PRIu64 " was interrupted: it was running when cmwqd "
                                "stopped, and its queue does not rerun such items\n", item->id);
                else
                        fprintf(stderr, "cmwqctl: item %" PRIu64 " was cancelled\n", item->id);
                break;
        case CTL_EXIT_ITEM_TIMED_OUT:
                fprintf(stderr, "cmwqctl: item %" PRIu64 " timed out\n", item->id);
                break;
        default:
                if (item->has_signal && item->signal > 0)
                        fprintf(stderr, "cmwqctl: item %" PRIu64 " killed by signal %" PRIi32 " (%s)\n",
                                item->id, item->signal, strsignal(item->signal));
        }
        return code;
}

/* An error answer to a wait: an item that ended badly may be reported so. */
static int wait_refused(const Cmwq__Response *resp) {
        int r = daemon_refused(resp);

        if (resp->error == CMWQ__ERROR__CANCELLED)
                return CTL_EXIT_ITEM_CANCELLED;
        if (resp->error == CMWQ__ERROR__TIMED_OUT)
                return CTL_EXIT_ITEM_TIMED_OUT;
        return r;
}

/* Wait for item @id to end: 0 and the response carrying it, or the exit
 * status after saying why not. */
static int call_wait(Context *ctx, uint64_t id, Cmwq__Response **ret) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        struct request req;
        int r;

        r = ctx_call(ctx, request_item(&req, CMWQ__REQUEST__BODY_WAIT, id), &resp);
        if (r != 0)
                return r;
        if (resp->error != CMWQ__ERROR__OK)
                return wait_refused(resp);
        if (resp->body_case != CMWQ__RESPONSE__BODY_ITEM)
                return unexpected_reply();
        *ret = TAKE_PTR(resp);
        return 0;
}

static int read_payload(const char *path, uint8_t **ret, size_t *ret_len) {
        _cleanup_(closep) int fd = -1;
        _cleanup_(freep) uint8_t *buf = NULL;
        size_t len = 0, size = 0;

        if (strcmp(path, "-") == 0)
                fd = dup(STDIN_FILENO);
        else
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;

        for (;;) {
                ssize_t k;

                if (len == size) {
                        size_t n = size ? size * 2 : 64 * 1024;
                        uint8_t *b;

                        if (size >= CMWQ_FRAME_MAX_PAYLOAD + 1)
                                return -EFBIG;
                        if (n > CMWQ_FRAME_MAX_PAYLOAD + 1)
                                n = CMWQ_FRAME_MAX_PAYLOAD + 1;
                        b = realloc(buf, n);
                        if (!b)
                                return -ENOMEM;
                        buf = b;
                        size = n;
                }
                k = read(fd, buf + len, size - len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                len += (size_t) k;
        }
        if (len > CMWQ_FRAME_MAX_PAYLOAD)
                return -EFBIG;

        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

static void submit_json(const Cmwq__SubmitReply *reply, const Cmwq__ItemInfo *item) {
        JsonWriter w;

        json_init(&w, stdout);
        json_object_begin(&w);
        json_kv_uint(&w, "id", reply->id);
        json_kv_bool(&w, "already_pending", reply->has_already_pending && reply->already_pending);
        if (item) {
                json_key(&w, "item");
                item_json(item, &w);
        }
        json_object_end(&w);
        json_finish(&w);
}

int verb_submit(Context *ctx, const CtlVerb *verb, const CtlArgs *a) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL, *wait_resp = NULL;
        _cleanup_(freep) char *cwd = NULL, *program = NULL;
        _cleanup_(freep) char **args = NULL, **env = NULL;
        _cleanup_(freep) uint8_t *payload = NULL;
        struct request_submit_args submit = {};
        struct request req;
        const Cmwq__SubmitReply *reply;
        const Cmwq__ItemInfo *item;
        const char *name = NULL, *stdin_path = a->opt[OPT_STDIN], *v;
        size_t n_env = 0;
        int32_t cpu;
        int n_args = a->n_command, r;

        if ((v = a->opt[OPT_CPU])) {
                if (parse_cpu(v, &cpu) < 0)
                        return usage_error("submit: invalid --cpu value '%s' (expected a CPU number)", v);
                submit.pin_cpu = true;
                submit.cpu = cpu;
        }
        if ((v = a->opt[OPT_DELAY])) {
                r = parse_seconds_option(verb->name, "delay", v, CMWQ_DELAY_MAX_USEC, &submit.delay_usec);
                if (r != 0)
                        return r;
        }
        if ((v = a->opt[OPT_TIMEOUT])) {
                r = parse_seconds_option(verb->name, "timeout", v, CMWQ_DELAY_MAX_USEC, &submit.timeout_usec);
                if (r != 0)
                        return r;
        }
        if ((v = a->opt[OPT_KEY])) {
                if (!*v || strlen(v) > CMWQ_WORK_KEY_MAX)
                        return usage_error("submit: --key must be 1-%u bytes", CMWQ_WORK_KEY_MAX);
                submit.key = v;
        }
        submit.wait = a->opt[OPT_WAIT] != NULL;

        r = parse_name(verb->name, a->args[0], &name);
        if (r != 0)
                return r;
        if (n_args <= 0)
                return usage_error("submit: missing PROGRAM (after --)");
        if (!*a->command[0])
                return usage_error("submit: PROGRAM must not be empty");

        if (stdin_path) {
                r = read_payload(stdin_path, &payload, &submit.stdin_len);
                if (r == -EFBIG)
                        return usage_error("submit: --stdin file '%s' is larger than %u bytes",
                                           stdin_path, CMWQ_FRAME_MAX_PAYLOAD);
                if (r == -ENOMEM)
                        return fail_oom();
                if (r < 0)
                        return usage_error("submit: cannot read --stdin file '%s': %s", stdin_path, strerror(-r));
                submit.stdin_data = payload;
        }

        cwd = getcwd(NULL, 0);
        if (!cwd)
                return fail(CTL_EXIT_REFUSED, "cannot determine the current directory: %s", strerror(errno));
        program = program_make_absolute(a->command[0], cwd);
        if (!program)
                return fail_oom();

        args = calloc((size_t) n_args, sizeof(char *));
        if (!args)
                return fail_oom();
        args[0] = program;
        for (int i = 1; i < n_args; i++)
                args[i] = a->command[i];

        for (char **e = environ; e && *e; e++)
                n_env++;
        env = calloc(n_env + 1, sizeof(char *));
        if (!env)
                return fail_oom();
        n_env = 0;
        for (char **e = environ; e && *e; e++)
                if (strchr(*e, '='))
                        env[n_env++] = *e;

        submit.workqueue = name;
        submit.n_argv = (size_t) n_args;
        submit.argv = args;
        submit.n_env = n_env;
        submit.env = env;
        submit.cwd = cwd;

        r = ctx_call(ctx, request_submit(&req, &submit), &resp);
        if (r != 0)
                return r;
        if (resp->error != CMWQ__ERROR__OK)
                return submit.wait ? wait_refused(resp) : daemon_refused(resp);
        if (resp->body_case != CMWQ__RESPONSE__BODY_SUBMIT)
                return unexpected_reply();
        reply = resp->submit;

        if (reply->has_already_pending && reply->already_pending) {
                fprintf(stderr, "cmwqctl: work key ");
                fputs_visible(stderr, submit.key ?: "", strlen(submit.key ?: ""));
                fprintf(stderr, " already pending as item %" PRIu64 "\n", reply->id);
        }

        if (!submit.wait) {
                if (ctx->json)
                        submit_json(reply, NULL);
                else
                        printf("%" PRIu64 "\n", reply->id);
                return CTL_EXIT_OK;
        }

        item = reply->item;
        if (!item) {
                /* The daemon answered at once (e.g. the key was pending):
                 * wait for the item separately. */
                r = call_wait(ctx, reply->id, &wait_resp);
                if (r != 0)
                        return r;
                item = wait_resp->item;
        }

        if (ctx->json)
                submit_json(reply, item);
        return item_finish(ctx, item);
}

/* wait, show, cancel: ID and nothing else. */
int verb_id(Context *ctx, const CtlVerb *verb, const CtlArgs *a) {
        _cleanup_(response_freep) Cmwq__Response *resp = NULL;
        struct request req;
        uint64_t id;
        JsonWriter w;
        int r;

        r = parse_id(verb->name, a->args[0], &id);
        if (r != 0)
                return r;

        if (verb->request == CMWQ__REQUEST__BODY_WAIT) {
                r = call_wait(ctx, id, &resp);
                if (r != 0)
                        return r;
                if (ctx->json) {
                        json_init(&w, stdout);
                        item_json(resp->item, &w);
                        json_finish(&w);
                }
                return item_finish(ctx, resp->item);
        }

        r = ctx_call(ctx, request_item(&req, verb->request, id), &resp);
        if (r != 0)
                return r;
        if (resp->error != CMWQ__ERROR__OK)
                return daemon_refused(resp);

        if (verb->request == CMWQ__REQUEST__BODY_SHOW) {
                if (resp->body_case != CMWQ__RESPONSE__BODY_ITEM)
                        return unexpected_reply();
                if (ctx->json) {
                        json_init(&w, stdout);
                        item_json(resp->item, &w);
                        json_finish(&w);
                } else
                        item_print(resp->item, stdout);
        } else if (ctx->json && resp->body_case == CMWQ__RESPONSE__BODY_ITEM) {
                json_init(&w, stdout);
                item_json(resp->item, &w);
                json_finish(&w);
        }
        return CTL_EXIT_OK;
}
