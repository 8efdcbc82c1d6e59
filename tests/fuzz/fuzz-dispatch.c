/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fuzz target "dispatch": what one client sends down the socket, through the
 * daemon's real reading, framing, decoding, Hello check and request
 * dispatcher, into a real core (fresh for every input) whose items run on
 * the fake executor of fake-exec.c.
 *
 * Input: byte 0 picks the client (bit 0 set: uid/gid 65534, an unprivileged
 * user; clear: root); the rest is the byte stream the client writes to its
 * connection.  The client's end is a socketpair; the daemon's end is served
 * by ipc_server_add_client() as if accepted.
 *
 * Beyond the sanitizers, it checks what a client can check: every reply is a
 * whole frame that decodes as a Response, and once the client is gone and
 * the core freed, no item and no event of the daemon is left behind.
 */
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "cmwq.pb-c.h"
#include "core/core.h"
#include "fake-exec.h"
#include "frame.h"
#include "fuzz.h"
#include "ipc/socket.h"

/* Turns of the loop after the last byte was written and nothing moved, to
 * let items end and waiters be answered. */
#define SETTLE_TURNS 8
#define REPLY_BUFFER_MAX (64u * 1024u * 1024u)

static struct event_base *base;
static bool verbose;            /* $CMWQ_FUZZ_VERBOSE: print the replies (to look at a seed) */

struct replies {
        uint8_t *buf;
        size_t len;
        size_t size;
};

/* Reads what the daemon sent and checks each whole frame.  Returns whether
 * anything was read. */
static bool replies_read(struct replies *r, int fd) {
        bool any = false;

        for (;;) {
                if (r->size - r->len < 65536) {
                        size_t size = r->size ? r->size * 2 : 65536;

                        if (size > REPLY_BUFFER_MAX)
                                abort();
                        r->buf = realloc(r->buf, size);
                        if (!r->buf)
                                abort();
                        r->size = size;
                }
                ssize_t n = read(fd, r->buf + r->len, r->size - r->len);
                if (n <= 0)
                        break;
                r->len += (size_t) n;
                any = true;
        }

        size_t off = 0;
        for (;;) {
                uint32_t payload_len;
                size_t frame_len;
                int k = frame_parse(r->buf + off, r->len - off, CMWQ_FRAME_MAX_PAYLOAD, &payload_len, &frame_len);
                Cmwq__Response *resp;

                if (k < 0) {
                        fprintf(stderr, "the daemon sent a frame over the limit\n");
                        abort();
                }
                if (k == 0)
                        break;
                resp = cmwq__response__unpack(NULL, payload_len, r->buf + off + CMWQ_FRAME_HEADER_SIZE);
                if (!resp) {
                        fprintf(stderr, "the daemon sent a reply that does not decode\n");
                        abort();
                }
                if (verbose)
                        fprintf(stderr, "reply %" PRIu64 ": error %d, body %d%s%s\n", resp->id, (int) resp->error,
                                (int) resp->body_case, resp->message ? ": " : "", resp->message ? resp->message : "");
                cmwq__response__free_unpacked(resp, NULL);
                off += frame_len;
        }
        memmove(r->buf, r->buf + off, r->len - off);
        r->len -= off;
        return any;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static char *no_plugin_dirs[] = { NULL };
        struct core_config config = { .sleep_mode = SLEEPWATCH_PROC, .plugin_dirs = no_plugin_dirs };
        struct replies replies = {};
        struct ipc_server *server = NULL;
        struct ipc_client *client = NULL;
        struct core *core = NULL;
        int sv[2];
        size_t off = 1;
        unsigned quiet = 0;

        if (size < 1)
                return 0;
        if (!base) {
                verbose = getenv("CMWQ_FUZZ_VERBOSE");
                /* A log line per bad request would be most of the time. */
                log_setup(verbose ? LOG_DEBUG : LOG_CRIT);
                base = event_base_new();
                if (!base)
                        abort();
        }

        if (core_new(base, NULL, &config, &core) < 0 ||
            ipc_server_new_detached(base, core, false, &server) < 0 ||
            socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
                abort();
        if (ipc_server_add_client(server, sv[0], &client) < 0)
                abort();
        if (data[0] & 1)
                client->caller.uid = 65534;

        while (quiet < SETTLE_TURNS) {
                bool moved = false;

                if (off < size) {
                        ssize_t n = write(sv[1], data + off, size - off);
                        if (n > 0) {
                                off += (size_t) n;
                                moved = true;
                        }
                }
                event_base_loop(base, EVLOOP_NONBLOCK);
                if (replies_read(&replies, sv[1]))
                        moved = true;
                quiet = moved || off < size ? 0 : quiet + 1;
        }

        /* The client goes away; then the daemon. */
        close(sv[1]);
        event_base_loop(base, EVLOOP_NONBLOCK);
        server = ipc_server_free(server);
        core = core_free(core);
        free(replies.buf);

        if (fake_exec_nr_procs() != 0) {
                fprintf(stderr, "%u items still running after the core was freed\n", fake_exec_nr_procs());
                abort();
        }
        if (event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE) != 0) {
                fprintf(stderr, "%d events left behind by the core\n",
                        event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE));
                abort();
        }
        return 0;
}
