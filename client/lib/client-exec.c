/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libcmwq-client: exec work.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "request.h"
#include "util.h"

extern char **environ;

/* The public result and the response whose strings it points into. */
struct exec_result {
        struct cmwq_exec_result pub;
        Cmwq__Response *resp;
        char *out;
        char *err;
};

void cmwq_exec_result_free(struct cmwq_exec_result *r) {
        struct exec_result *x;

        if (!r)
                return;
        x = container_of(r, struct exec_result, pub);
        if (x->resp)
                cmwq__response__free_unpacked(x->resp, NULL);
        free(x->out);
        free(x->err);
        free(x);
}

static char *copy_bytes(const ProtobufCBinaryData *d, bool has) {
        size_t n = has ? d->len : 0;
        char *p = malloc(n + 1);

        if (!p)
                return NULL;
        if (n)
                memcpy(p, d->data, n);
        p[n] = 0;
        return p;
}

int client_exec_result_new(Cmwq__Response *resp, const Cmwq__ItemInfo *info, struct cmwq_exec_result **ret) {
        struct exec_result *x = calloc(1, sizeof(*x));

        if (!x)
                return client_error(-ENOMEM, "out of memory");
        x->out = copy_bytes(&info->stdout_data, info->has_stdout_data);
        x->err = copy_bytes(&info->stderr_data, info->has_stderr_data);
        if (!x->out || !x->err) {
                cmwq_exec_result_free(&x->pub);
                return client_error(-ENOMEM, "out of memory");
        }
        x->pub = (struct cmwq_exec_result) {
                .id = info->id,
                .state = (enum cmwq_exec_state) info->state,
                /* An interrupted item has no exit status, even from a
                 * daemon that sent one (0) before this was fixed. */
                .exited = info->has_exit_status && info->state != CMWQ__ITEM_STATE__STATE_INTERRUPTED,
                .exit_status = info->has_exit_status && info->state != CMWQ__ITEM_STATE__STATE_INTERRUPTED
                                       ? info->exit_status
                                       : 0,
                .signal = info->has_signal ? info->signal : 0,
                .timed_out = info->has_timed_out && info->timed_out,
                .cpu_intensive = info->has_cpu_intensive && info->cpu_intensive,
                .cpu_usec = info->has_cpu_usec ? info->cpu_usec : 0,
                .out = x->out,
                .out_len = info->has_stdout_data ? info->stdout_data.len : 0,
                .out_truncated = info->has_stdout_truncated && info->stdout_truncated,
                .err = x->err,
                .err_len = info->has_stderr_data ? info->stderr_data.len : 0,
                .err_truncated = info->has_stderr_truncated && info->stderr_truncated,
                .error = info->error,
        };
        x->resp = resp;
        *ret = &x->pub;
        return 0;
}

/* The item of a response to submit --wait, wait or cancel. */
static const Cmwq__ItemInfo *response_item(const Cmwq__Response *resp) {
        if (resp->body_case == CMWQ__RESPONSE__BODY_ITEM)
                return resp->item;
        if (resp->body_case == CMWQ__RESPONSE__BODY_SUBMIT)
                return resp->submit->item;
        return NULL;
}

/* Takes @resp in every case. */
static int result_from_response(Cmwq__Response *resp, const char *what, struct cmwq_exec_result **ret) {
        const Cmwq__ItemInfo *info;
        int r;

        if (resp->error != CMWQ__ERROR__OK)
                r = client_response_error(resp, what);
        else if (!(info = response_item(resp)))
                r = client_error(-EPROTO, "%s: cmwqd answered without the item", what);
        else if ((r = client_exec_result_new(resp, info, ret)) >= 0)
                return 0;
        cmwq__response__free_unpacked(resp, NULL);
        return r;
}

static size_t strv_count(const char *const *v) {
        size_t n = 0;

        while (v && v[n])
                n++;
        return n;
}

/* Fills @s from @a; *ret_cwd holds the current directory if needed. */
static int submit_fill(struct request_submit_args *s, struct cmwq_workqueue *wq, const struct cmwq_exec_args *a,
                       char **ret_cwd) {
        const char *const *envp;

        if (!wq || !a || !a->argv || !a->argv[0])
                return client_error(-EINVAL, "an exec item needs a workqueue and argv[0]");
        /* On the wire a CPU is an int32 whose -1 means the caller's: a
         * larger one must not turn into that. */
        if (a->pin_cpu && a->cpu > INT32_MAX)
                return client_error(-EINVAL, "CPU %u does not exist", a->cpu);
        if (a->stdin_len > 0 && !a->stdin_data)
                return client_error(-EINVAL, "stdin_len is %zu but stdin_data is NULL", a->stdin_len);

        s->workqueue = wq->name;
        s->n_argv = strv_count(a->argv);
        s->argv = (char *const *) a->argv;
        envp = a->envp ? a->envp : (const char *const *) environ;
        s->n_env = strv_count(envp);
        s->env = (char *const *) envp;
        if (a->cwd)
                s->cwd = a->cwd;
        else {
                *ret_cwd = getcwd(NULL, 0);
                if (!*ret_cwd)
                        return client_error(-errno, "cannot tell the current directory: %s", strerror(errno));
                s->cwd = *ret_cwd;
        }
        s->stdin_data = a->stdin_data;
        s->stdin_len = a->stdin_len;
        s->pin_cpu = a->pin_cpu;
        s->cpu = (int) a->cpu;
        s->delay_usec = a->delay_usec;
        s->timeout_usec = a->timeout_usec;
        s->key = a->key;
        return 0;
}

/* Submits; returns 0 or 1 (key pending) and the id, or a negative errno. */
static int exec_submit(struct cmwq_workqueue *wq, const struct cmwq_exec_args *a, bool wait,
                       Cmwq__Response **ret_resp) {
        struct request_submit_args submit = { .wait = wait };
        struct request req;
        _cleanup_(freep) char *cwd = NULL;
        Cmwq__Response *resp = NULL;
        int r;

        r = submit_fill(&submit, wq, a, &cwd);
        if (r < 0)
                return r;
        r = client_call(wq->c, request_submit(&req, &submit), &resp);
        if (r < 0)
                return r;
        if (resp->error != CMWQ__ERROR__OK) {
                r = client_response_error(resp, "cannot queue the exec item");
                cmwq__response__free_unpacked(resp, NULL);
                return r;
        }
        if (resp->body_case != CMWQ__RESPONSE__BODY_SUBMIT) {
                cmwq__response__free_unpacked(resp, NULL);
                return client_error(-EPROTO, "cmwqd answered a submit with something else");
        }
        *ret_resp = resp;
        return 0;
}

int cmwq_exec(struct cmwq_workqueue *wq, const struct cmwq_exec_args *args, uint64_t *ret_id) {
        Cmwq__Response *resp = NULL;
        bool already;
        int r;

        r = exec_submit(wq, args, false, &resp);
        if (r < 0)
                return r;
        if (ret_id)
                *ret_id = resp->submit->id;
        already = resp->submit->has_already_pending && resp->submit->already_pending;
        cmwq__response__free_unpacked(resp, NULL);
        return already ? 1 : 0;
}

int cmwq_exec_sync(struct cmwq_workqueue *wq, const struct cmwq_exec_args *args,
                   struct cmwq_exec_result **ret) {
        Cmwq__Response *resp = NULL;
        int r;

        if (!ret)
                return client_error(-EINVAL, "no place for the result");
        r = exec_submit(wq, args, true, &resp);
        if (r < 0)
                return r;
        if (!resp->submit->item) {
                /* The key was pending: wait for that item instead. */
                uint64_t id = resp->submit->id;

                cmwq__response__free_unpacked(resp, NULL);
                return cmwq_exec_wait(wq->c, id, ret);
        }
        return result_from_response(resp, "the exec item failed", ret);
}

int cmwq_exec_wait(struct cmwq *c, uint64_t id, struct cmwq_exec_result **ret) {
        struct request req;
        Cmwq__Response *resp = NULL;
        int r;

        if (!c || !ret)
                return client_error(-EINVAL, "no connection or no place for the result");
        r = client_call(c, request_item(&req, CMWQ__REQUEST__BODY_WAIT, id), &resp);
        if (r < 0)
                return r;
        return result_from_response(resp, "cannot wait for the item", ret);
}

int cmwq_exec_cancel(struct cmwq *c, uint64_t id) {
        struct request req;
        Cmwq__Response *resp = NULL;
        const Cmwq__ItemInfo *info;
        int r;

        if (!c)
                return client_error(-EINVAL, "no connection");
        r = client_call(c, request_item(&req, CMWQ__REQUEST__BODY_CANCEL, id), &resp);
        if (r < 0)
                return r;
        if (resp->error != CMWQ__ERROR__OK)
                r = client_response_error(resp, "cannot cancel the item");
        else {
                info = response_item(resp);
                r = info && info->state == CMWQ__ITEM_STATE__STATE_CANCELLED ? 0 : 1;
        }
        cmwq__response__free_unpacked(resp, NULL);
        return r;
}

static void exec_async_complete(struct cmwq *c, struct client_call *call) {
        struct cmwq_exec_result *result = NULL;
        int r = call->error;

        if (r >= 0) {
                r = result_from_response(TAKE_PTR(call->resp), "cannot wait for the item", &result);
        }
        call->exec_done(c, call->item_id, r < 0 ? r : 0, result, call->userdata);
        cmwq_exec_result_free(result);
}

int cmwq_exec_async(struct cmwq_workqueue *wq, const struct cmwq_exec_args *args,
                    cmwq_exec_done_fn done, void *userdata, uint64_t *ret_id) {
        struct request req;
        struct client_call *call;
        uint64_t id;
        int r, queued;

        if (!done)
                return client_error(-EINVAL, "no completion callback");
        queued = cmwq_exec(wq, args, &id);
        if (queued < 0)
                return queued;

        call = calloc(1, sizeof(*call));
        if (!call)
                return client_error(-ENOMEM, "out of memory");
        call->complete = exec_async_complete;
        call->exec_done = done;
        call->userdata = userdata;
        call->item_id = id;
        r = client_call_async(wq->c, request_item(&req, CMWQ__REQUEST__BODY_WAIT, id), call);
        if (r < 0) {
                /* The item is queued but we cannot hear of it. */
                free(call);
                return r;
        }
        if (ret_id)
                *ret_id = id;
        return queued;
}
