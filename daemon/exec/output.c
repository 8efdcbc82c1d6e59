/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * An exec item's output: the read ends of its stdout and stderr pipes, read
 * from the daemon's loop into a buffer bounded by the spec's output_limit
 * (what is more is read and discarded, and flags the stream truncated), and
 * drained once the process has ended.  Apart from exec.c because it is a
 * bounded buffer on a pipe and knows nothing of processes.
 */

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "exec/exec-internal.h"
#include "util.h"

/* One read() of output at most; also the size of the discard buffer. */
#define EXEC_READ_CHUNK (64u * 1024u)

/* When the process has ended, at most this many reads per stream collect what
 * is still in the pipe, so that an escaped writer cannot hold the loop. */
#define EXEC_DRAIN_READS_MAX 32u

void exec_stream_init(struct exec_stream *s, size_t limit) {
        *s = (struct exec_stream) { .fd = -1, .limit = limit };
}

static void exec_stream_close(struct exec_stream *s) {
        if (s->ev_assigned) {
                event_del(&s->ev);
                s->ev_assigned = false;
        }
        if (s->fd >= 0) {
                close(s->fd);
                s->fd = -1;
        }
}

void exec_stream_done(struct exec_stream *s) {
        exec_stream_close(s);
        free(s->buf);
        s->buf = NULL;
        s->len = s->cap = 0;
}

/* Hands the captured bytes out, trimmed to what was read: the daemon keeps
 * results of thousands of finished items, most of which printed nothing. */
char *exec_stream_take(struct exec_stream *s) {
        char *b = TAKE_PTR(s->buf), *shrunk;

        if (s->len == 0) {
                free(b);
                return NULL;
        }
        shrunk = realloc(b, s->len);
        return shrunk ? shrunk : b;
}

/*
 * One read from @s.  Returns 1 if something was read, 0 at EOF (or a read
 * error, which ends the stream the same way), -EAGAIN if the pipe is empty.
 * Bytes beyond the limit are read and discarded, and flag the stream.
 */
static int exec_stream_read(struct exec_stream *s) {
        char discard[EXEC_READ_CHUNK];
        char *dst = discard;
        size_t want = sizeof(discard);
        ssize_t n;

        if (s->fd < 0)
                return 0;

        if (s->len < s->limit) {
                if (s->cap == s->len) {
                        size_t cap = s->cap < 4096 ? 4096 : s->cap * 2;
                        char *b;

                        if (cap > s->limit)
                                cap = s->limit;
                        b = realloc(s->buf, cap);
                        if (b) {
                                s->buf = b;
                                s->cap = cap;
                        }
                }
                if (s->cap > s->len) {
                        dst = s->buf + s->len;
                        want = s->cap - s->len;
                        if (want > EXEC_READ_CHUNK)
                                want = EXEC_READ_CHUNK;
                }
                /* else: out of memory, what we could not store is discarded */
        }

        n = read(s->fd, dst, want);
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return -EAGAIN;
                exec_stream_close(s);
                return 0;
        }
        if (n == 0) {
                exec_stream_close(s);
                return 0;
        }
        if (dst == discard)
                s->truncated = true;
        else
                s->len += (size_t) n;
        return 1;
}

void exec_stream_drain(struct exec_stream *s) {
        for (unsigned i = 0; i < EXEC_DRAIN_READS_MAX; i++)
                if (exec_stream_read(s) <= 0)
                        break;
        exec_stream_close(s);
}

void exec_stream_on_read(evutil_socket_t fd, short what, void *userdata) {
        /* One read per wake-up; the event is level-triggered, so a chatty
         * child cannot starve the rest of the loop. */
        (void) exec_stream_read(userdata);
}
