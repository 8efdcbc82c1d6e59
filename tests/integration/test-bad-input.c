/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Every input from a client is untrusted (doc/design.md §3.10, §5): a raw
 * socket client sends garbage, oversized and out-of-order frames, malformed
 * messages and requests over every limit.  Each must end that client's
 * connection with an error (or be refused with one, the connection staying
 * usable), never the daemon; after each case the daemon is alive and serves
 * cmwqctl on another connection.  Also cmwqctl's own bad command lines.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmwq.pb-c.h"
#include "frame.h"
#include "harness.h"
#include "shm.h"

#define REPLY_TIMEOUT_MS 30000

static struct cmwqd d;

static void setup(void) {
        cmwqd_start(&d, NULL);
}

static void teardown(void) {
        cmwqd_stop(&d);
}

static bool log_contains(const char *needle) {
        char *log = read_file(d.log);
        bool found = strstr(log, needle) != NULL;

        free(log);
        return found;
}

static int64_t now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The daemon process exists and has not exited, and a fresh connection
 * (cmwqctl) is served. */
static void assert_serving(const char *after) {
        int status;
        char *out;

        ck_assert_msg(kill(d.pid, 0) == 0, "after %s: cmwqd (pid %d) is gone", after, (int) d.pid);
        ck_assert_msg(waitpid(d.pid, &status, WNOHANG) == 0, "after %s: cmwqd exited (status 0x%x); log:\n%s", after,
                      status, read_file(d.log));
        out = CTL_OK(&d, "list");
        ck_assert_msg(strstr(out, "system_unbound"), "after %s: list said: %s", after, out);
        free(out);
}

static int raw_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        ck_assert_uint_lt(strlen(d.socket), sizeof(sa.sun_path));
        memcpy(sa.sun_path, d.socket, strlen(d.socket) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_msg(connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
        return fd;
}

/* Writes all of @buf; false if the daemon closed the connection first. */
static bool raw_send(int fd, const void *buf, size_t len) {
        const uint8_t *p = buf;

        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
                        return false;
                ck_assert_msg(n > 0, "send: %s", strerror(errno));
                p += n;
                len -= (size_t) n;
        }
        return true;
}

static bool send_frame(int fd, const void *payload, uint32_t len) {
        uint8_t *buf = malloc(CMWQ_FRAME_HEADER_SIZE + (size_t) len);
        bool ok;

        ck_assert_ptr_nonnull(buf);
        frame_header_encode(buf, len);
        if (len > 0)
                memcpy(buf + CMWQ_FRAME_HEADER_SIZE, payload, len);
        ok = raw_send(fd, buf, CMWQ_FRAME_HEADER_SIZE + (size_t) len);
        free(buf);
        return ok;
}

static bool send_request(int fd, const Cmwq__Request *req) {
        size_t len = cmwq__request__get_packed_size(req);
        uint8_t *buf = malloc(len ? len : 1);
        bool ok;

        ck_assert_ptr_nonnull(buf);
        ck_assert_uint_le(len, UINT32_MAX);
        cmwq__request__pack(req, buf);
        ok = send_frame(fd, buf, (uint32_t) len);
        free(buf);
        return ok;
}

/* Reads exactly @len bytes.  1: read; 0: EOF (or reset) first; -1: nothing
 * for @timeout_ms. */
static int read_exact(int fd, void *buf, size_t len, int timeout_ms) {
        uint8_t *p = buf;
        int64_t deadline = now_ms() + timeout_ms;

        while (len > 0) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                int64_t left = deadline - now_ms();
                ssize_t n;

                if (left <= 0)
                        return -1;
                if (poll(&pfd, 1, (int) left) == 0)
                        return -1;
                n = read(fd, p, len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == ECONNRESET)
                        return 0;
                ck_assert_msg(n >= 0, "read: %s", strerror(errno));
                if (n == 0)
                        return 0;
                p += n;
                len -= (size_t) n;
        }
        return 1;
}

/* The next response; NULL at EOF.  Fails the test if none comes in time or
 * it is not a well-formed frame. */
static Cmwq__Response *recv_response(int fd) {
        uint8_t hdr[CMWQ_FRAME_HEADER_SIZE], *payload;
        Cmwq__Response *resp;
        uint32_t len;
        size_t frame_len;
        int r;

        r = read_exact(fd, hdr, sizeof(hdr), REPLY_TIMEOUT_MS);
        ck_assert_msg(r >= 0, "no reply from cmwqd within %d ms", REPLY_TIMEOUT_MS);
        if (r == 0)
                return NULL;
        /* The header alone: "more needed" for a payload, never too large. */
        ck_assert_int_ge(frame_parse(hdr, sizeof(hdr), CMWQ_FRAME_MAX_PAYLOAD, &len, &frame_len), 0);
        len = (uint32_t) hdr[0] | (uint32_t) hdr[1] << 8 | (uint32_t) hdr[2] << 16 | (uint32_t) hdr[3] << 24;
        payload = malloc(len ? len : 1);
        ck_assert_ptr_nonnull(payload);
        ck_assert_msg(read_exact(fd, payload, len, REPLY_TIMEOUT_MS) == 1, "truncated reply frame");
        resp = cmwq__response__unpack(NULL, len, payload);
        free(payload);
        ck_assert_msg(resp, "cmwqd sent a malformed response");
        return resp;
}

/* Waits for EOF, discarding whatever comes first. */
static void assert_closed(int fd, const char *what) {
        int64_t deadline = now_ms() + REPLY_TIMEOUT_MS;
        char buf[65536];

        for (;;) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                int64_t left = deadline - now_ms();
                ssize_t n;

                ck_assert_msg(left > 0 && poll(&pfd, 1, (int) left) > 0,
                              "%s: cmwqd kept the connection open for %d ms", what, REPLY_TIMEOUT_MS);
                n = read(fd, buf, sizeof(buf));
                if (n == 0 || (n < 0 && errno == ECONNRESET))
                        return;
                ck_assert_msg(n > 0 || errno == EINTR, "read: %s", strerror(errno));
        }
}

/* One error reply (@want, with a message containing @says when given), then
 * the end of the connection. */
static void assert_fatal_error(int fd, Cmwq__Error want, const char *says, const char *what) {
        Cmwq__Response *resp = recv_response(fd);

        ck_assert_msg(resp, "%s: cmwqd closed the connection without an error reply", what);
        ck_assert_msg(resp->error == want, "%s: error %d (want %d), message '%s'", what, resp->error, want,
                      resp->message ? resp->message : "");
        ck_assert_msg(resp->message && resp->message[0], "%s: error without a message", what);
        if (says)
                ck_assert_msg(strstr(resp->message, says), "%s: message '%s' does not say '%s'", what, resp->message,
                              says);
        cmwq__response__free_unpacked(resp, NULL);
        assert_closed(fd, what);
        close(fd);
        assert_serving(what);
}

static uint64_t next_id = 1;

static Cmwq__Response *call(int fd, Cmwq__Request *req) {
        Cmwq__Response *resp;

        req->id = next_id++;
        ck_assert_msg(send_request(fd, req), "cmwqd closed the connection before the request was sent");
        resp = recv_response(fd);
        ck_assert_msg(resp, "cmwqd closed the connection instead of answering request %d", (int) req->body_case);
        ck_assert_msg(resp->id == req->id, "reply to %llu for request %llu", (unsigned long long) resp->id,
                      (unsigned long long) req->id);
        return resp;
}

static bool send_hello(int fd, uint32_t version) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Hello hello = CMWQ__HELLO__INIT;

        hello.version = version;
        hello.client = (char *) "test-bad-input";
        req.id = next_id++;
        req.body_case = CMWQ__REQUEST__BODY_HELLO;
        req.hello = &hello;
        return send_request(fd, &req);
}

/* A connection past a successful Hello. */
static int greeted_connect(void) {
        int fd = raw_connect();
        Cmwq__Response *resp;

        ck_assert(send_hello(fd, CMWQ_PROTOCOL_VERSION));
        resp = recv_response(fd);
        ck_assert_ptr_nonnull(resp);
        ck_assert_int_eq(resp->error, CMWQ__ERROR__OK);
        ck_assert_int_eq(resp->body_case, CMWQ__RESPONSE__BODY_HELLO);
        ck_assert_uint_eq(resp->hello->version, CMWQ_PROTOCOL_VERSION);
        ck_assert(resp->hello->has_max_frame);
        ck_assert_uint_eq(resp->hello->max_frame, CMWQ_FRAME_MAX_PAYLOAD);
        cmwq__response__free_unpacked(resp, NULL);
        return fd;
}

/* The connection still answers: a list request gets the list. */
static void assert_usable(int fd, const char *what) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Empty empty = CMWQ__EMPTY__INIT;
        Cmwq__Response *resp;

        req.body_case = CMWQ__REQUEST__BODY_LIST;
        req.list = &empty;
        resp = call(fd, &req);
        ck_assert_msg(resp->error == CMWQ__ERROR__OK && resp->body_case == CMWQ__RESPONSE__BODY_LIST,
                      "after %s: list on the same connection got error %d", what, resp->error);
        ck_assert_uint_ge(resp->list->n_workqueues, 6);
        cmwq__response__free_unpacked(resp, NULL);
}

/* ------------------------------------------------------------------------ */

/* cmwqd takes no file descriptor from a client: closing one it did not
 * make could block its loop.  Linux 6.16 refuses them at the sender
 * (SO_PASSRIGHTS); an older kernel delivers them, and cmwqd ends the
 * connection.  Either way it keeps no copy and keeps serving. */
START_TEST(test_passed_file_descriptors_are_refused) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Empty empty = CMWQ__EMPTY__INIT;
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int))];
        } control = {};
        uint8_t frame[64];
        struct iovec iov;
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &control,
                              .msg_controllen = sizeof(control) };
        struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
        int fd = greeted_connect(), p[2];
        size_t len;
        ssize_t n;
        char byte;

        req.id = next_id++;
        req.body_case = CMWQ__REQUEST__BODY_LIST;
        req.list = &empty;
        len = cmwq__request__get_packed_size(&req);
        ck_assert_uint_le(CMWQ_FRAME_HEADER_SIZE + len, sizeof(frame));
        frame_header_encode(frame, (uint32_t) len);
        cmwq__request__pack(&req, frame + CMWQ_FRAME_HEADER_SIZE);
        iov = (struct iovec) { .iov_base = frame, .iov_len = CMWQ_FRAME_HEADER_SIZE + len };

        ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &p[1], sizeof(int));
        n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
                ck_assert_msg(errno == EPERM, "sendmsg with a file descriptor: %s", strerror(errno));
                close(fd);
        } else
                assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "file descriptors", "a passed pipe");

        /* No copy of the pipe's write end is left in cmwqd: EOF. */
        close(p[1]);
        for (int waited = 0; read(p[0], &byte, 1) < 0; waited++) {
                ck_assert_msg(errno == EAGAIN && waited < 3000, "read of the pipe: %s", strerror(errno));
                usleep(10000);
        }
        close(p[0]);
        assert_serving("a passed file descriptor");
}
END_TEST

START_TEST(test_garbage_bytes) {
        static const char http[] = "GET / HTTP/1.1\r\nHost: cmwqd\r\n\r\n";
        uint8_t junk[256];
        int fd;

        /* "GET " read as a length is far above the limit. */
        fd = raw_connect();
        raw_send(fd, http, sizeof(http) - 1);
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "too large", "an HTTP request");

        /* A plausible length with bytes that are no protobuf. */
        for (size_t k = 0; k < sizeof(junk); k++)
                junk[k] = 0xff;
        fd = raw_connect();
        send_frame(fd, junk, sizeof(junk));
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "malformed", "0xff bytes");

        /* Random bytes in a frame, after a good Hello too. */
        srand(42);
        for (int round = 0; round < 20; round++) {
                for (size_t k = 0; k < sizeof(junk); k++)
                        junk[k] = (uint8_t) rand();
                fd = round % 2 ? greeted_connect() : raw_connect();
                if (send_frame(fd, junk, sizeof(junk)))
                        (void) shutdown(fd, SHUT_WR);
                /* Whatever protobuf-c makes of it: an error reply or a
                 * refusal, and no crash.  The connection must end, since
                 * we sent EOF. */
                assert_closed(fd, "random bytes");
                close(fd);
        }
        assert_serving("random bytes");
}
END_TEST

START_TEST(test_empty_frame_and_frame_without_id) {
        int fd;

        /* An empty payload is a valid frame, but a Request needs its id. */
        fd = raw_connect();
        send_frame(fd, NULL, 0);
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "malformed", "an empty frame");

        fd = greeted_connect();
        send_frame(fd, NULL, 0);
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "malformed", "an empty frame after Hello");
}
END_TEST

START_TEST(test_oversized_frame_refused_from_its_header) {
        static const uint32_t sizes[] = { CMWQ_FRAME_MAX_PAYLOAD + 1, 0x7fffffffu, 0xffffffffu };

        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
                uint8_t hdr[CMWQ_FRAME_HEADER_SIZE];
                int64_t start = now_ms();
                int fd;

                /* The header alone, nothing of the payload: cmwqd must not
                 * wait for (or allocate) what it will never accept. */
                fd = raw_connect();
                frame_header_encode(hdr, sizes[k]);
                ck_assert(raw_send(fd, hdr, sizeof(hdr)));
                assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "too large", "an oversized header");
                ck_assert_msg(now_ms() - start < 3000, "took %lld ms", (long long) (now_ms() - start));

                /* Also after a Hello. */
                fd = greeted_connect();
                ck_assert(raw_send(fd, hdr, sizeof(hdr)));
                assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "too large", "an oversized header after Hello");
        }
}
END_TEST

/* The biggest frame accepted is exactly CMWQ_FRAME_MAX_PAYLOAD; a Submit that
 * big is over the request limits, refused, and the connection goes on. */
START_TEST(test_frame_at_the_limit) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Submit s = CMWQ__SUBMIT__INIT;
        char *argv[2], *big;
        Cmwq__Response *resp;
        size_t len = CMWQ_FRAME_MAX_PAYLOAD - 64, packed;
        int fd;

        big = malloc(CMWQ_FRAME_MAX_PAYLOAD);
        ck_assert_ptr_nonnull(big);
        argv[0] = (char *) "/bin/echo";
        argv[1] = big;
        s.workqueue = (char *) "system";
        s.n_argv = 2;
        s.argv = argv;
        req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
        req.submit = &s;
        req.id = next_id;
        for (int tries = 0; tries < 8; tries++) {
                memset(big, 'a', len);
                big[len] = 0;
                packed = cmwq__request__get_packed_size(&req);
                if (packed == CMWQ_FRAME_MAX_PAYLOAD)
                        break;
                len += CMWQ_FRAME_MAX_PAYLOAD - packed;
        }
        ck_assert_uint_eq(packed, CMWQ_FRAME_MAX_PAYLOAD);

        fd = greeted_connect();
        resp = call(fd, &req);
        ck_assert_int_eq(resp->error, CMWQ__ERROR__LIMIT_EXCEEDED);
        ck_assert_msg(resp->message && strstr(resp->message, "limit 'item-args-bytes'"), "message: %s", resp->message);
        ck_assert_msg(resp->limit && strcmp(resp->limit, "item-args-bytes") == 0, "limit: %s", resp->limit);
        cmwq__response__free_unpacked(resp, NULL);
        assert_usable(fd, "a frame of exactly the maximum size");
        close(fd);
        free(big);
        assert_serving("a frame of exactly the maximum size");
}
END_TEST

START_TEST(test_request_before_hello) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Empty empty = CMWQ__EMPTY__INIT;
        Cmwq__Submit s = CMWQ__SUBMIT__INIT;
        char *argv[] = { (char *) "/bin/true" };
        int fd;

        fd = raw_connect();
        req.id = 7;
        req.body_case = CMWQ__REQUEST__BODY_LIST;
        req.list = &empty;
        send_request(fd, &req);
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "Hello", "list before Hello");

        /* A Submit before Hello must not run anything. */
        fd = raw_connect();
        s.workqueue = (char *) "system";
        s.n_argv = 1;
        s.argv = argv;
        req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
        req.submit = &s;
        send_request(fd, &req);
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "Hello", "submit before Hello");
        ck_assert_msg(!log_contains("Queued item"), "an item was queued before Hello");
}
END_TEST

START_TEST(test_hello_with_another_version) {
        static const uint32_t versions[] = { 0, 2, 99, UINT32_MAX };

        for (size_t k = 0; k < sizeof(versions) / sizeof(versions[0]); k++) {
                int fd = raw_connect();
                Cmwq__Response *resp;

                send_hello(fd, versions[k]);
                resp = recv_response(fd);
                ck_assert_ptr_nonnull(resp);
                ck_assert_int_eq(resp->error, CMWQ__ERROR__VERSION_MISMATCH);
                ck_assert_msg(resp->message && strstr(resp->message, "version 1"),
                              "the refusal does not name the supported version: %s", resp->message);
                cmwq__response__free_unpacked(resp, NULL);
                assert_closed(fd, "a Hello with another version");
                close(fd);
                assert_serving("a Hello with another version");
        }
}
END_TEST

START_TEST(test_hello_twice) {
        int fd = greeted_connect();

        send_hello(fd, CMWQ_PROTOCOL_VERSION);
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "Hello", "Hello twice");
}
END_TEST

START_TEST(test_truncated_frames) {
        uint8_t buf[64] = { 0 };
        int fd, idle;

        /* Half a header, then EOF. */
        fd = raw_connect();
        raw_send(fd, "\x10\x00", 2);
        close(fd);
        assert_serving("half a header");

        /* A header for 1000 bytes and 10 of them, then EOF. */
        fd = raw_connect();
        frame_header_encode(buf, 1000);
        raw_send(fd, buf, CMWQ_FRAME_HEADER_SIZE + 10);
        close(fd);
        assert_serving("a truncated frame");

        /* The same after Hello, and a client that stays silent halfway: it
         * waits alone, the others are served. */
        fd = greeted_connect();
        raw_send(fd, buf, CMWQ_FRAME_HEADER_SIZE + 10);
        idle = greeted_connect();
        assert_serving("a client stuck in the middle of a frame");
        close(fd);
        close(idle);
        assert_serving("a truncated frame after Hello");

        /* Truncated inside the protobuf itself: the frame is complete but
         * its last field is cut. */
        {
                Cmwq__Request req = CMWQ__REQUEST__INIT;
                Cmwq__CreateWorkqueue create = CMWQ__CREATE_WORKQUEUE__INIT;
                uint8_t packed[128];
                size_t len;

                create.name = (char *) "truncated-queue-name";
                req.id = 3;
                req.body_case = CMWQ__REQUEST__BODY_CREATE;
                req.create = &create;
                len = cmwq__request__pack(&req, packed);
                fd = greeted_connect();
                send_frame(fd, packed, (uint32_t) len - 5);
                assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "malformed", "a cut protobuf");
        }
}
END_TEST

START_TEST(test_unknown_or_empty_request_body) {
        /* id = 5, then field 99 (not in the oneof), length-delimited, empty. */
        static const uint8_t unknown_field[] = { 0x08, 0x05, 0x9a, 0x06, 0x00 };
        /* id = 6 and no body at all. */
        static const uint8_t no_body[] = { 0x08, 0x06 };
        /* id = 8, then "list" (field 12) with the wrong wire type (varint). */
        static const uint8_t wrong_wire_type[] = { 0x08, 0x08, 0x60, 0x00 };
        /* id = 9, then a Hello (field 2) that lacks its required version. */
        static const uint8_t missing_required[] = { 0x08, 0x09, 0x12, 0x00 };
        int fd;

        fd = greeted_connect();
        send_frame(fd, unknown_field, sizeof(unknown_field));
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "unknown request", "an unknown request");

        fd = greeted_connect();
        send_frame(fd, no_body, sizeof(no_body));
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "unknown request", "a request without a body");

        fd = greeted_connect();
        send_frame(fd, wrong_wire_type, sizeof(wrong_wire_type));
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, NULL, "a field of the wrong wire type");

        fd = raw_connect();
        send_frame(fd, missing_required, sizeof(missing_required));
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "malformed", "a Hello without its version");

        /* The same unknown field first on a new connection: not a Hello. */
        fd = raw_connect();
        send_frame(fd, unknown_field, sizeof(unknown_field));
        assert_fatal_error(fd, CMWQ__ERROR__PROTOCOL, "Hello", "an unknown request before Hello");
}
END_TEST

/* ---- Submits over the limits: refused, and the connection goes on. ---- */

static void submit_init(Cmwq__Submit *s, char **argv, size_t argc) {
        cmwq__submit__init(s);
        s->workqueue = (char *) "system";
        s->argv = argv;
        s->n_argv = argc;
}

/* Sends @s and expects @want (with @says in the message); the connection
 * must stay usable. */
static void submit_expect(int fd, Cmwq__Submit *s, Cmwq__Error want, const char *says, const char *what) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Response *resp;

        req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
        req.submit = s;
        resp = call(fd, &req);
        ck_assert_msg(resp->error == want, "%s: error %d (want %d), message '%s'", what, resp->error, want,
                      resp->message ? resp->message : "");
        if (want != CMWQ__ERROR__OK) {
                ck_assert_msg(resp->message && resp->message[0] && strlen(resp->message) < 512,
                              "%s: no clear message: '%s'", what, resp->message ? resp->message : "");
                if (says)
                        ck_assert_msg(strstr(resp->message, says), "%s: message '%s' does not say '%s'", what,
                                      resp->message, says);
        }
        cmwq__response__free_unpacked(resp, NULL);
        assert_usable(fd, what);
}

START_TEST(test_submit_over_the_limits) {
        enum { MANY = 100000 };
        char **many = calloc(MANY, sizeof(char *));
        char *big = malloc(3 * 1024 * 1024 + 1);
        char *argv[2] = { (char *) "/bin/echo", NULL };
        Cmwq__Submit s;
        int fd;

        ck_assert_ptr_nonnull(many);
        ck_assert_ptr_nonnull(big);
        fd = greeted_connect();

        /* 100k arguments: about 300 KiB, within the frame limit. */
        many[0] = (char *) "/bin/echo";
        for (size_t k = 1; k < MANY; k++)
                many[k] = (char *) "x";
        submit_init(&s, many, MANY);
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "too many arguments", "100k arguments");

        /* 100k environment entries. */
        for (size_t k = 0; k < MANY; k++)
                many[k] = (char *) "A=1";
        submit_init(&s, argv, 1);
        s.env = many;
        s.n_env = MANY;
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "environment", "100k environment entries");

        /* One 3 MiB argument. */
        memset(big, 'a', 3 * 1024 * 1024);
        big[3 * 1024 * 1024] = 0;
        argv[1] = big;
        submit_init(&s, argv, 2);
        submit_expect(fd, &s, CMWQ__ERROR__LIMIT_EXCEEDED, "item-args-bytes", "a 3 MiB argument");

        /* A 3 MiB environment entry, and a 3 MiB working directory. */
        big[0] = 'A';
        big[1] = '=';
        submit_init(&s, argv, 1);
        s.env = &big;
        s.n_env = 1;
        submit_expect(fd, &s, CMWQ__ERROR__LIMIT_EXCEEDED, "item-args-bytes", "a 3 MiB environment entry");
        big[0] = '/';
        big[1] = 'a';
        submit_init(&s, argv, 1);
        s.cwd = big;
        submit_expect(fd, &s, CMWQ__ERROR__LIMIT_EXCEEDED, "item-args-bytes", "a 3 MiB working directory");

        /* A 3 MiB program name, and a 3 MiB key. */
        submit_init(&s, &big, 1);
        submit_expect(fd, &s, CMWQ__ERROR__LIMIT_EXCEEDED, "item-args-bytes", "a 3 MiB program");
        submit_init(&s, argv, 1);
        s.key = big;
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "key", "a 3 MiB key");

        /* A 3 MiB stdin payload (the limit is 1 MiB). */
        submit_init(&s, argv, 1);
        s.has_stdin_payload = true;
        s.stdin_payload.data = (uint8_t *) big;
        s.stdin_payload.len = 3 * 1024 * 1024;
        submit_expect(fd, &s, CMWQ__ERROR__LIMIT_EXCEEDED, "item-payload-bytes", "a 3 MiB payload");

        /* A 3 MiB workqueue name. */
        submit_init(&s, argv, 1);
        s.workqueue = big;
        submit_expect(fd, &s, CMWQ__ERROR__NOT_FOUND, NULL, "a 3 MiB workqueue name");

        close(fd);
        /* None of them was queued. */
        ck_assert_msg(!log_contains("Queued item"), "an item over the limits was queued");
        free(many);
        free(big);
        assert_serving("submits over the limits");
}
END_TEST

START_TEST(test_submit_invalid_values) {
        char *argv[] = { (char *) "/bin/true", NULL };
        char *empty_argv[] = { (char *) "" };
        char *relative_argv[] = { (char *) "bin/true" };
        char *bad_env[][1] = { { (char *) "NOEQUALS" }, { (char *) "=value" }, { (char *) "" } };
        static const int32_t bad_cpus[] = { 1000, 4096, INT32_MAX, -2, -1000, INT32_MIN };
        Cmwq__Submit s;
        int fd;

        fd = greeted_connect();
        for (size_t k = 0; k < sizeof(bad_cpus) / sizeof(bad_cpus[0]); k++) {
                char what[64];

                snprintf(what, sizeof(what), "cpu %d", (int) bad_cpus[k]);
                submit_init(&s, argv, 1);
                s.has_cpu = true;
                s.cpu = bad_cpus[k];
                submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "CPU", what);
        }

        submit_init(&s, argv, 1);
        s.workqueue = (char *) "";
        submit_expect(fd, &s, CMWQ__ERROR__NOT_FOUND, "no workqueue", "an empty workqueue name");
        submit_init(&s, argv, 1);
        s.workqueue = (char *) "no-such-queue";
        submit_expect(fd, &s, CMWQ__ERROR__NOT_FOUND, "no-such-queue", "an unknown workqueue");

        submit_init(&s, argv, 0);
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "no program", "no argv");
        submit_init(&s, empty_argv, 1);
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "no program", "an empty program");
        submit_init(&s, relative_argv, 1);
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "absolute", "a relative program path");

        for (size_t k = 0; k < sizeof(bad_env) / sizeof(bad_env[0]); k++) {
                submit_init(&s, argv, 1);
                s.env = bad_env[k];
                s.n_env = 1;
                submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "NAME=VALUE", "an invalid environment entry");
        }

        submit_init(&s, argv, 1);
        s.cwd = (char *) "relative/dir";
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "not absolute", "a relative working directory");
        submit_init(&s, argv, 1);
        s.cwd = (char *) "..";
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "not absolute", "cwd ..");

        submit_init(&s, argv, 1);
        s.key = (char *) "";
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "key", "an empty key");
        submit_init(&s, argv, 1);
        s.has_delay_usec = true;
        s.delay_usec = UINT64_MAX;
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "delay", "an endless delay");
        submit_init(&s, argv, 1);
        s.has_timeout_usec = true;
        s.timeout_usec = UINT64_MAX;
        submit_expect(fd, &s, CMWQ__ERROR__INVALID_ARGUMENT, "timeout", "an endless timeout");

        close(fd);
        ck_assert_msg(!log_contains("Queued item"), "an invalid item was queued");

        /* A valid submission still works, on a CPU that exists. */
        fd = greeted_connect();
        submit_init(&s, argv, 1);
        s.has_cpu = true;
        s.cpu = 0;
        s.has_wait = true;
        s.wait = true;
        submit_expect(fd, &s, CMWQ__ERROR__OK, NULL, "a valid submit");
        close(fd);
        assert_serving("invalid submit values");
}
END_TEST

static void expect_error(int fd, Cmwq__Request *req, Cmwq__Error want, const char *says, const char *what) {
        Cmwq__Response *resp = call(fd, req);

        ck_assert_msg(resp->error == want, "%s: error %d (want %d), message '%s'", what, resp->error, want,
                      resp->message ? resp->message : "");
        if (says)
                ck_assert_msg(resp->message && strstr(resp->message, says), "%s: message '%s' does not say '%s'",
                              what, resp->message ? resp->message : "", says);
        cmwq__response__free_unpacked(resp, NULL);
        assert_usable(fd, what);
}

START_TEST(test_workqueue_requests_invalid_values) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CreateWorkqueue create = CMWQ__CREATE_WORKQUEUE__INIT;
        Cmwq__SetMaxActive set = CMWQ__SET_MAX_ACTIVE__INIT;
        Cmwq__WorkqueueName name = CMWQ__WORKQUEUE_NAME__INIT;
        Cmwq__ItemId item = CMWQ__ITEM_ID__INIT;
        static const char *const bad_names[] = { "", "a/b", "../x", "with space", "tab\tname", "\xff\xfe", "x\n" };
        char long_name[4096];
        int fd;

        fd = greeted_connect();
        req.body_case = CMWQ__REQUEST__BODY_CREATE;
        req.create = &create;
        for (size_t k = 0; k < sizeof(bad_names) / sizeof(bad_names[0]); k++) {
                create.name = (char *) bad_names[k];
                expect_error(fd, &req, CMWQ__ERROR__INVALID_ARGUMENT, "invalid workqueue name", "a bad name");
        }
        memset(long_name, 'q', sizeof(long_name) - 1);
        long_name[sizeof(long_name) - 1] = 0;
        create.name = long_name;
        expect_error(fd, &req, CMWQ__ERROR__INVALID_ARGUMENT, "invalid workqueue name", "a 4 KiB name");

        create.name = (char *) "flags";
        create.has_flags = true;
        create.flags = UINT32_MAX;
        expect_error(fd, &req, CMWQ__ERROR__INVALID_ARGUMENT, "flags", "unknown flags");
        create.flags = CMWQ__WORKQUEUE_FLAG__FLAG_ORDERED;
        create.has_max_active = true;
        create.max_active = 5;
        expect_error(fd, &req, CMWQ__ERROR__INVALID_ARGUMENT, "ordered", "an ordered queue with max_active 5");
        create.flags = 0;
        create.max_active = 513;
        expect_error(fd, &req, CMWQ__ERROR__INVALID_ARGUMENT, "512", "max_active 513");
        create.max_active = UINT32_MAX;
        expect_error(fd, &req, CMWQ__ERROR__INVALID_ARGUMENT, "512", "max_active 2^32-1");
        create.name = (char *) "system";
        create.max_active = 0;
        expect_error(fd, &req, CMWQ__ERROR__ALREADY_EXISTS, "already exists", "a second 'system'");

        req.body_case = CMWQ__REQUEST__BODY_SET_MAX_ACTIVE;
        req.set_max_active = &set;
        set.name = (char *) "system";
        set.max_active = 100000;
        expect_error(fd, &req, CMWQ__ERROR__INVALID_ARGUMENT, "512", "set-max-active 100000");
        set.name = (char *) "";
        set.max_active = 1;
        expect_error(fd, &req, CMWQ__ERROR__NOT_FOUND, NULL, "set-max-active of ''");

        name.name = (char *) "";
        req.body_case = CMWQ__REQUEST__BODY_DESTROY;
        req.destroy = &name;
        expect_error(fd, &req, CMWQ__ERROR__NOT_FOUND, NULL, "destroy ''");
        req.body_case = CMWQ__REQUEST__BODY_FLUSH;
        req.flush = &name;
        expect_error(fd, &req, CMWQ__ERROR__NOT_FOUND, NULL, "flush ''");
        req.body_case = CMWQ__REQUEST__BODY_DRAIN;
        req.drain = &name;
        expect_error(fd, &req, CMWQ__ERROR__NOT_FOUND, NULL, "drain ''");

        req.body_case = CMWQ__REQUEST__BODY_SHOW;
        req.show = &item;
        for (int k = 0; k < 2; k++) {
                item.id = k ? UINT64_MAX : 0;
                expect_error(fd, &req, CMWQ__ERROR__NOT_FOUND, "no work item", "show of an unknown id");
        }
        req.body_case = CMWQ__REQUEST__BODY_WAIT;
        req.wait = &item;
        expect_error(fd, &req, CMWQ__ERROR__NOT_FOUND, "no work item", "wait for an unknown id");
        req.body_case = CMWQ__REQUEST__BODY_CANCEL;
        req.cancel = &item;
        expect_error(fd, &req, CMWQ__ERROR__NOT_FOUND, "no work item", "cancel of an unknown id");

        close(fd);
        assert_serving("invalid workqueue requests");
        /* No queue was created by any of it. */
        {
                char *out = CTL_OK(&d, "list");

                ck_assert_msg(!strstr(out, "\nflags ") && !strstr(out, "qqqq"), "list: %s", out);
                free(out);
        }
}
END_TEST

/* Root's freeze with an absurd timeout while an item runs is refused, and
 * nothing is frozen (before, the deadline wrapped past UINT64_MAX and the
 * freeze timed out at once, its queues left frozen); one at the limit waits,
 * and its client may go away meanwhile. */
START_TEST(test_freeze_with_huge_timeout) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__FreezeRequest freeze = CMWQ__FREEZE_REQUEST__INIT;
        struct pollfd pfd;
        char *id, *out;
        int fd;

        id = CTL_OK(&d, "submit", "system_freezable", "--", "/bin/sleep", "30");
        fd = greeted_connect();
        freeze.name = (char *) "system_freezable";
        freeze.has_timeout_usec = true;
        req.body_case = CMWQ__REQUEST__BODY_FREEZE;
        req.freeze = &freeze;
        /* Wait for the item to run, so that a freeze has to wait. */
        for (int waited = 0; waited < 10000; waited += 20) {
                char *shown = CTL_OK(&d, "show", id);
                bool running = strstr(shown, "running") != NULL;

                free(shown);
                if (running)
                        break;
                usleep(20 * 1000);
        }
        freeze.timeout_usec = UINT64_MAX;
        req.id = next_id++;
        expect_error(fd, &req, CMWQ__ERROR__INVALID_ARGUMENT, "over the limit of 30 days", "a UINT64_MAX freeze timeout");
        out = CTL_OK(&d, "submit", "system_freezable", "--wait", "--", "/bin/echo", "not frozen");
        ck_assert_str_eq(out, "not frozen");
        free(out);

        freeze.timeout_usec = UINT64_C(30) * 24 * 3600 * 1000000;
        req.id = next_id++;
        ck_assert(send_request(fd, &req));
        pfd = (struct pollfd) { .fd = fd, .events = POLLIN };
        /* It waits (the item runs for 30 s): no answer yet. */
        ck_assert_int_eq(poll(&pfd, 1, 300), 0);
        close(fd);
        assert_serving("a freeze with a 30-day timeout whose client went away");
        free(CTL_OK(&d, "thaw"));
        free(CTL_OK(&d, "cancel", id));
        free(id);
        assert_serving("thaw after a freeze with a long timeout");
}
END_TEST

/* The daemon's peak resident set (VmHWM, KiB) since the last
 * reset_peak_rss(). */
static long peak_rss_kib(void) {
        char path[64], *status, *p;
        long kib;

        snprintf(path, sizeof(path), "/proc/%d/status", (int) d.pid);
        status = read_file(path);
        p = strstr(status, "VmHWM:");
        ck_assert_msg(p, "no VmHWM in %s", path);
        kib = strtol(p + strlen("VmHWM:"), NULL, 10);
        free(status);
        return kib;
}

static void reset_peak_rss(void) {
        char path[64];
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int) d.pid);
        f = fopen(path, "we");
        ck_assert_msg(f, "%s: %s", path, strerror(errno));
        ck_assert_int_ge(fputs("5", f), 0);    /* the peak RSS: from now */
        ck_assert_int_eq(fclose(f), 0);
}

/* Clients that pipeline large replies and never read them (issue 12: 60 of
 * them made other users' list take seconds) are served only as they read:
 * the daemon keeps a bounded backlog of replies for each, the others are
 * served meanwhile, and a client that reads at last gets every reply, in
 * order. */
START_TEST(test_client_that_never_reads) {
        enum { CLIENTS = 8, REQUESTS = 600 };
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__ItemId item = CMWQ__ITEM_ID__INIT;
        int fds[CLIENTS];
        uint8_t *batch;
        size_t batch_len = 0, one;
        long base_kib, grown_kib;
        char *id;

        /* An item with 64 KiB of stdout and stderr: every show of it is a
         * reply of about 128 KiB; 600 of them, 77 MiB, per client. */
        id = CTL_OK(&d, "submit", "system", "--", "/bin/sh", "-c",
                    "head -c 70000 /dev/zero | tr '\\0' o; head -c 70000 /dev/zero | tr '\\0' e >&2");
        free(CTL_OK(&d, "wait", id));

        item.id = strtoull(id, NULL, 10);
        req.body_case = CMWQ__REQUEST__BODY_SHOW;
        req.show = &item;
        req.id = 1;
        one = cmwq__request__get_packed_size(&req);
        batch = malloc(REQUESTS * (CMWQ_FRAME_HEADER_SIZE + one + 16));
        ck_assert_ptr_nonnull(batch);
        for (int k = 0; k < REQUESTS; k++) {
                req.id = 1000 + (uint64_t) k;
                one = cmwq__request__get_packed_size(&req);
                frame_header_encode(batch + batch_len, (uint32_t) one);
                cmwq__request__pack(&req, batch + batch_len + CMWQ_FRAME_HEADER_SIZE);
                batch_len += CMWQ_FRAME_HEADER_SIZE + one;
        }

        reset_peak_rss();
        base_kib = peak_rss_kib();
        for (int k = 0; k < CLIENTS; k++) {
                fds[k] = greeted_connect();
                ck_assert_msg(raw_send(fds[k], batch, batch_len), "client %d was dropped while sending", k);
        }
        /* One of them has sent all it will. */
        ck_assert_int_eq(shutdown(fds[1], SHUT_WR), 0);

        /* Others are served while those replies wait unread. */
        for (int k = 0; k < 3; k++)
                assert_serving("clients that do not read");
        /* What the daemon keeps for them is bounded (1 MiB of replies and
         * one reply more, each), where it used to pack up to 32 MiB for
         * each before it dropped the client. */
        grown_kib = peak_rss_kib() - base_kib;
        ck_assert_msg(grown_kib < 20 * 1024, "cmwqd's peak RSS grew by %ld KiB for %d clients that do not read",
                      grown_kib, CLIENTS);

        /* They are not dropped: the first two read at last and get every
         * reply, in order; then the half-closed one is closed. */
        for (int c = 0; c < 2; c++)
                for (int k = 0; k < REQUESTS; k++) {
                        Cmwq__Response *resp = recv_response(fds[c]);

                        ck_assert_msg(resp, "client %d, which did not read, was dropped after %d replies", c, k);
                        ck_assert_uint_eq(resp->id, 1000 + (uint64_t) k);
                        ck_assert_int_eq(resp->error, CMWQ__ERROR__OK);
                        ck_assert_int_eq(resp->body_case, CMWQ__RESPONSE__BODY_ITEM);
                        ck_assert_uint_eq(resp->item->id, item.id);
                        ck_assert_uint_ge(resp->item->stdout_data.len, 65536);
                        cmwq__response__free_unpacked(resp, NULL);
                }
        assert_usable(fds[0], "600 replies read late");
        assert_closed(fds[1], "a half-closed client after its 600 replies");
        close(fds[1]);
        for (int k = 2; k < CLIENTS; k++) {
                struct pollfd pfd = { .fd = fds[k], .events = POLLIN };

                ck_assert_int_eq(poll(&pfd, 1, 0), 1);
                ck_assert_msg(!(pfd.revents & (POLLHUP | POLLERR)), "client %d was dropped", k);
                close(fds[k]);
        }
        close(fds[0]);
        free(batch);
        free(id);
        assert_serving("clients that do not read");
}
END_TEST

/* Many waits on one connection are bounded; the connection goes on. */
START_TEST(test_too_many_waiting_requests) {
        enum { WAITS = 4200 };
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__ItemId item = CMWQ__ITEM_ID__INIT;
        int fd, refused = 0, answered = 0;
        char *id;

        id = CTL_OK(&d, "submit", "system", "--delay", "60", "--", "/bin/true");
        item.id = strtoull(id, NULL, 10);
        fd = greeted_connect();
        req.body_case = CMWQ__REQUEST__BODY_WAIT;
        req.wait = &item;
        for (int k = 0; k < WAITS; k++) {
                req.id = next_id++;
                ck_assert(send_request(fd, &req));
                /* Read the refusals as they come, so that the socket never
                 * fills up. */
                for (;;) {
                        struct pollfd pfd = { .fd = fd, .events = POLLIN };
                        Cmwq__Response *resp;

                        if (poll(&pfd, 1, 0) <= 0)
                                break;
                        resp = recv_response(fd);
                        ck_assert_ptr_nonnull(resp);
                        ck_assert_int_eq(resp->error, CMWQ__ERROR__LIMIT_EXCEEDED);
                        refused++;
                        cmwq__response__free_unpacked(resp, NULL);
                }
        }
        assert_serving("4200 waits on one connection");
        /* Cancelling the item answers every wait that was accepted. */
        free(CTL_OK(&d, "cancel", id));
        while (refused + answered < WAITS) {
                Cmwq__Response *resp = recv_response(fd);

                ck_assert_ptr_nonnull(resp);
                if (resp->error == CMWQ__ERROR__LIMIT_EXCEEDED)
                        refused++;
                else
                        answered++;
                cmwq__response__free_unpacked(resp, NULL);
        }
        ck_assert_int_eq(answered, 4096);
        ck_assert_int_eq(refused, WAITS - 4096);
        assert_usable(fd, "4200 waits");
        close(fd);
        free(id);
        assert_serving("4200 waits on one connection");
}
END_TEST

/* Clients that connect and go away in every state of the protocol. */
START_TEST(test_clients_that_vanish) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__ItemId item = CMWQ__ITEM_ID__INIT;
        Cmwq__Submit s;
        char *argv[] = { (char *) "/bin/sleep", (char *) "0.3" };
        int fds[64];

        for (int k = 0; k < 64; k++)
                fds[k] = raw_connect();
        for (int k = 0; k < 64; k++)
                close(fds[k]);
        assert_serving("64 silent clients");

        /* Submit --wait and go away before the item ends: the item still
         * runs to its end, and nobody is called back on a freed client. */
        for (int k = 0; k < 8; k++) {
                int fd = greeted_connect();

                submit_init(&s, argv, 2);
                s.has_wait = true;
                s.wait = true;
                req.id = next_id++;
                req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
                req.submit = &s;
                ck_assert(send_request(fd, &req));
                /* And a wait for an item that does not exist. */
                item.id = 999999;
                req.id = next_id++;
                req.body_case = CMWQ__REQUEST__BODY_WAIT;
                req.wait = &item;
                ck_assert(send_request(fd, &req));
                close(fd);
        }
        assert_serving("clients gone while their items run");
        /* Their items end (0.3 s each, however long a loaded machine takes). */
        for (int waited = 0;; waited += 50) {
                char *out = CTL_OK(&d, "--json", "stats");
                bool idle = json_sum(out, "in_flight") == 0;

                ck_assert_msg(idle || waited < 60000, "stats: %s", out);
                free(out);
                if (idle)
                        break;
                usleep(50 * 1000);
        }
}
END_TEST

/* ---- The memory shared for callback work (proto/shm.h). */

/* A region passed with a CallbackAttached reply. */
struct attached_region {
        int memfd, doorbell;
        size_t size;
        struct cmwq_shm *shm;
};

/* Sends CallbackAttach (credits set as @credits, or unset when @credits is
 * negative) and takes the reply with its two fds, which come on the reply
 * frame's first byte, and maps the region. */
static void attach_region(int fd, int credits, struct attached_region *r) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CallbackAttach attach = CMWQ__CALLBACK_ATTACH__INIT;
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(2 * sizeof(int))];
        } control = {};
        uint8_t hdr[CMWQ_FRAME_HEADER_SIZE], *payload;
        struct iovec iov = { .iov_base = hdr, .iov_len = 1 };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &control,
                              .msg_controllen = sizeof(control) };
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        Cmwq__Response *resp;
        struct cmsghdr *h;
        struct stat st;
        uint32_t len;
        ssize_t n;

        attach.layout_version = CMWQ_SHM_VERSION;
        if (credits >= 0) {
                attach.has_credits = true;
                attach.credits = credits > 0;
        }
        req.id = next_id++;
        req.body_case = CMWQ__REQUEST__BODY_CALLBACK_ATTACH;
        req.callback_attach = &attach;
        ck_assert(send_request(fd, &req));

        ck_assert_msg(poll(&pfd, 1, REPLY_TIMEOUT_MS) == 1, "no reply to CallbackAttach within %d ms",
                      REPLY_TIMEOUT_MS);
        do
                n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        ck_assert_msg(n == 1, "recvmsg of the reply's first byte: %zd (%s)", n, n < 0 ? strerror(errno) : "EOF");
        ck_assert_msg(!(msg.msg_flags & MSG_CTRUNC), "the reply's ancillary data was truncated");
        r->memfd = r->doorbell = -1;
        for (h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h))
                if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
                        int fds[2];

                        ck_assert_uint_eq(h->cmsg_len, CMSG_LEN(2 * sizeof(int)));
                        memcpy(fds, CMSG_DATA(h), sizeof(fds));
                        r->memfd = fds[0];
                        r->doorbell = fds[1];
                }
        ck_assert_msg(r->memfd >= 0 && r->doorbell >= 0, "CallbackAttached came without its two fds");

        /* The rest of the frame. */
        ck_assert_msg(read_exact(fd, hdr + 1, sizeof(hdr) - 1, REPLY_TIMEOUT_MS) == 1, "truncated reply header");
        len = (uint32_t) hdr[0] | (uint32_t) hdr[1] << 8 | (uint32_t) hdr[2] << 16 | (uint32_t) hdr[3] << 24;
        ck_assert_uint_le(len, CMWQ_FRAME_MAX_PAYLOAD);
        payload = malloc(len ? len : 1);
        ck_assert_ptr_nonnull(payload);
        ck_assert_msg(read_exact(fd, payload, len, REPLY_TIMEOUT_MS) == 1, "truncated reply frame");
        resp = cmwq__response__unpack(NULL, len, payload);
        free(payload);
        ck_assert_msg(resp, "cmwqd sent a malformed response");
        ck_assert_uint_eq(resp->id, req.id);
        ck_assert_msg(resp->error == CMWQ__ERROR__OK, "CallbackAttach refused: %s",
                      resp->message ? resp->message : "");
        ck_assert_int_eq(resp->body_case, CMWQ__RESPONSE__BODY_CALLBACK_ATTACHED);
        ck_assert_uint_eq(resp->callback_attached->layout_version, CMWQ_SHM_VERSION);
        cmwq__response__free_unpacked(resp, NULL);

        ck_assert_int_eq(fstat(r->memfd, &st), 0);
        ck_assert_int_ge(st.st_size, 0);
        r->size = (size_t) st.st_size;
        r->shm = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->memfd, 0);
        ck_assert_msg(r->shm != MAP_FAILED, "mmap of %zu bytes: %s", r->size, strerror(errno));
        ck_assert_uint_eq(r->shm->magic, CMWQ_SHM_MAGIC);
        ck_assert_uint_eq(r->shm->version, CMWQ_SHM_VERSION);
}

static void release_region(struct attached_region *r) {
        munmap(r->shm, r->size);
        close(r->memfd);
        close(r->doorbell);
}

/* A client that does not ask for credits (one older than them) gets the
 * region it knows, without the credits entries; pushing a CREDITS entry
 * anyway breaks its region, and only its connection ends.  One that asks
 * gets them. */
START_TEST(test_an_older_client_gets_the_region_it_knows) {
        struct attached_region old, cur;
        Cmwq__Response *resp;
        bool broken = false;
        uint32_t tail;
        int fd;

        fd = greeted_connect();
        attach_region(fd, -1, &old);
        ck_assert_uint_eq(old.size, offsetof(struct cmwq_shm, credits));
        ck_assert_msg((old.shm->features & CMWQ_SHM_FEATURE_CREDITS) == 0, "features 0x%x",
                      (unsigned) old.shm->features);
        ck_assert_msg((old.shm->features & CMWQ_SHM_FEATURE_LINGER) != 0, "features 0x%x",
                      (unsigned) old.shm->features);

        /* A CREDITS entry it has no credits entries for, pushed as the
         * library pushes (work_ring_push). */
        tail = __atomic_load_n(&old.shm->sq_tail, __ATOMIC_RELAXED);
        __atomic_store_n(&old.shm->sq[tail & (CMWQ_SHM_RING - 1)], CMWQ_SHM_ENTRY(CMWQ_SHM_OP_CREDITS, 0),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&old.shm->sq_tail, tail + 1, __ATOMIC_RELEASE);
        ck_assert_int_eq(eventfd_write(old.doorbell, 1), 0);
        /* An error about the broken region, then the end. */
        while ((resp = recv_response(fd))) {
                if (resp->error != CMWQ__ERROR__OK && resp->message &&
                    strstr(resp->message, "the shared memory is broken"))
                        broken = true;
                cmwq__response__free_unpacked(resp, NULL);
        }
        ck_assert_msg(broken, "cmwqd closed the connection without saying the shared memory is broken");
        close(fd);
        release_region(&old);
        assert_serving("a CREDITS entry in a region without credits");

        fd = greeted_connect();
        attach_region(fd, 1, &cur);
        ck_assert_uint_eq(cur.size, sizeof(struct cmwq_shm));
        ck_assert_msg((cur.shm->features & CMWQ_SHM_FEATURE_CREDITS) != 0, "features 0x%x",
                      (unsigned) cur.shm->features);
        ck_assert_msg((cur.shm->features & CMWQ_SHM_FEATURE_LINGER) != 0, "features 0x%x",
                      (unsigned) cur.shm->features);
        assert_usable(fd, "an attach with credits");
        close(fd);
        release_region(&cur);
}
END_TEST

/* ---- cmwqctl's own bad command lines: exit 2, one line, no daemon call. */

static void assert_usage_error(const char *const *args, const char *says) {
        struct ctl_result r;

        ctl_run(&d, (uid_t) -1, &r, args);
        ck_assert_msg(r.status == 2, "cmwqctl %s ...: exit %d (want 2), stderr '%s'", args[0], r.status, r.err);
        ck_assert_msg(r.out[0] == 0, "cmwqctl %s ...: printed '%s'", args[0], r.out);
        ck_assert_msg(r.err[0] && strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "cmwqctl %s ...: not one line: '%s'",
                      args[0], r.err);
        ck_assert_msg(strstr(r.err, says), "cmwqctl %s ...: '%s' does not say '%s'", args[0], r.err, says);
        ctl_result_free(&r);
}
#define USAGE_ERROR(says, ...) assert_usage_error((const char *const[]) { __VA_ARGS__, NULL }, says)

START_TEST(test_cmwqctl_bad_command_lines) {
        USAGE_ERROR("unknown command", "frobnicate");
        USAGE_ERROR("unknown option", "--no-such-option", "list");
        USAGE_ERROR("missing", "submit");
        USAGE_ERROR("missing", "submit", "system");
        USAGE_ERROR("missing", "submit", "system", "--");
        USAGE_ERROR("missing", "show");
        USAGE_ERROR("missing", "wait");
        USAGE_ERROR("missing", "cancel");
        USAGE_ERROR("missing", "create");
        USAGE_ERROR("missing", "destroy");
        USAGE_ERROR("missing", "set-max-active", "system");
        USAGE_ERROR("unexpected", "show", "1", "2");
        USAGE_ERROR("invalid work ID", "show", "abc");
        USAGE_ERROR("invalid work ID", "wait", "1x");
        USAGE_ERROR("--cpu", "submit", "system", "--cpu", "abc", "--", "/bin/true");
        USAGE_ERROR("--cpu", "submit", "system", "--cpu", "-1", "--", "/bin/true");
        USAGE_ERROR("--cpu", "submit", "system", "--cpu", "99999999999", "--", "/bin/true");
        USAGE_ERROR("--delay", "submit", "system", "--delay", "-1", "--", "/bin/true");
        USAGE_ERROR("--delay", "submit", "system", "--delay", "soon", "--", "/bin/true");
        USAGE_ERROR("--timeout", "submit", "system", "--timeout", "1e3", "--", "/bin/true");
        USAGE_ERROR("--max-active", "create", "q", "--max-active", "9999");
        USAGE_ERROR("--max-active", "create", "q", "--max-active", "-3");
        USAGE_ERROR("max_active", "set-max-active", "system", "9999");
        USAGE_ERROR("--stdin", "submit", "system", "--stdin", "/nonexistent/file", "--", "/bin/cat");
        USAGE_ERROR("empty", "submit", "", "--", "/bin/true");
        assert_serving("bad command lines");
        /* Nothing reached the daemon as a request that did anything. */
        ck_assert_msg(!log_contains("Queued item"), "a bad command line queued an item");
        ck_assert_msg(!log_contains("Created workqueue q "), "a bad command line created a queue");
}
END_TEST


/* ---- Connections that stall, half-close, or come in too many. ---- */

/* A daemon whose clients must say Hello (and finish a started frame) within
 * 1 s, and where one unprivileged uid may hold 3 connections. */
static void setup_deadline(void) {
        cmwqd_start(&d, (const char *const[]) { "--limit", "hello-timeout=1", "--limit", "connections=3", "--limit",
                                                "reply-bytes=8M", "--limit", "output-bytes=1M", NULL });
}

/* Waits (up to 30 s, the daemon's deadline is 1 s) for cmwqd to end the
 * connection: EOF, with nothing or an error reply first. */
static void assert_dropped(int fd, const char *what) {
        int64_t deadline = now_ms() + 30000;
        char buf[4096];

        for (;;) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                int64_t left = deadline - now_ms();
                ssize_t n;

                ck_assert_msg(left > 0 && poll(&pfd, 1, (int) left) > 0, "%s: still connected after 30 s", what);
                n = read(fd, buf, sizeof(buf));
                if (n == 0 || (n < 0 && errno == ECONNRESET))
                        break;
                ck_assert_msg(n > 0 || errno == EINTR, "%s: read: %s", what, strerror(errno));
        }
        close(fd);
}

START_TEST(test_silent_and_stalled_clients_are_dropped) {
        int fds_before, fd, busy;
        uint8_t partial[2] = { 10, 0 };

        fds_before = count_fds(d.pid);

        /* Connects and says nothing. */
        fd = raw_connect();
        assert_dropped(fd, "a client that sends nothing");
        ck_assert_msg(log_contains("no Hello within 1 s"), "log:\n%s", read_file(d.log));

        /* Half a Hello frame, then nothing. */
        fd = raw_connect();
        ck_assert(raw_send(fd, partial, sizeof(partial)));
        assert_dropped(fd, "half a Hello frame");

        /* Greeted, then half of a request frame. */
        fd = greeted_connect();
        ck_assert(raw_send(fd, partial, sizeof(partial)));
        assert_dropped(fd, "half a request frame after Hello");
        ck_assert_msg(log_contains("a started request was not completed"), "log:\n%s", read_file(d.log));

        /* A greeted client that is merely quiet stays: it may be waiting. */
        busy = greeted_connect();
        struct pollfd pfd = { .fd = busy, .events = POLLIN };
        ck_assert_msg(poll(&pfd, 1, 2500) == 0, "an idle greeted client was dropped");
        assert_usable(busy, "2.5 s of silence after Hello");
        close(busy);

        /* Every connection's fd is closed again.  Not "equal": the count
         * taken just after start can include an fd the daemon was still
         * using for its start-up (seen under AddressSanitizer). */
        for (int waited = 0; count_fds(d.pid) > fds_before && waited < 30000; waited += 50)
                usleep(50000);
        ck_assert_int_le(count_fds(d.pid), fds_before);
        assert_serving("stalled clients");
}
END_TEST

/* A client that sends its requests and then shuts down its sending side
 * still gets every reply, also those that wait for an item. */
START_TEST(test_half_closed_client_gets_its_replies) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__Submit s = CMWQ__SUBMIT__INIT;
        Cmwq__Empty empty = CMWQ__EMPTY__INIT;
        char *argv[] = { (char *) "/bin/sh", (char *) "-c", (char *) "sleep 0.5; echo waited-for", NULL };
        Cmwq__Response *resp;
        uint64_t submit_id, list_id;
        int fd = greeted_connect();

        s.workqueue = (char *) "system";
        s.n_argv = 3;
        s.argv = argv;
        s.has_wait = true;
        s.wait = true;
        req.body_case = CMWQ__REQUEST__BODY_SUBMIT;
        req.submit = &s;
        req.id = submit_id = next_id++;
        ck_assert(send_request(fd, &req));
        req.body_case = CMWQ__REQUEST__BODY_LIST;
        req.list = &empty;
        req.id = list_id = next_id++;
        ck_assert(send_request(fd, &req));
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);

        resp = recv_response(fd);
        ck_assert_msg(resp, "no reply to list after the half-close");
        ck_assert_uint_eq(resp->id, list_id);
        ck_assert_int_eq(resp->body_case, CMWQ__RESPONSE__BODY_LIST);
        cmwq__response__free_unpacked(resp, NULL);
        resp = recv_response(fd);
        ck_assert_msg(resp, "no reply to submit --wait after the half-close");
        ck_assert_uint_eq(resp->id, submit_id);
        ck_assert_int_eq(resp->error, CMWQ__ERROR__OK);
        ck_assert_int_eq(resp->body_case, CMWQ__RESPONSE__BODY_SUBMIT);
        ck_assert_ptr_nonnull(resp->submit->item);
        ck_assert_uint_eq(resp->submit->item->stdout_data.len, strlen("waited-for\n"));
        ck_assert(memcmp(resp->submit->item->stdout_data.data, "waited-for\n", strlen("waited-for\n")) == 0);
        cmwq__response__free_unpacked(resp, NULL);
        /* Then the daemon closes. */
        assert_closed(fd, "a half-closed client after its last reply");
        close(fd);
        assert_serving("a half-closed client");
}
END_TEST

/* Connects as uid 65534 (the effective uid is what SO_PEERCRED reports). */
static int connect_as_nobody(void) {
        int fd;

        ck_assert_int_eq(setresuid((uid_t) -1, 65534, (uid_t) -1), 0);
        fd = raw_connect();
        ck_assert_int_eq(setresuid((uid_t) -1, 0, (uid_t) -1), 0);
        return fd;
}

/* Replies one user does not read are bounded over all its connections:
 * each connection's backlog is bounded (backpressure), and 'reply-bytes'
 * bounds their sum. */
START_TEST(test_unread_replies_per_user) {
        enum { CONNECTIONS = 12, SHOWS = 6 };
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__ItemId iid = CMWQ__ITEM_ID__INIT;
        Cmwq__Response *resp;
        struct ctl_result r;
        int fds[CONNECTIONS], dropped = 0;
        char *id;

        cmwqd_stop(&d);
        cmwqd_start(&d, (const char *const[]) { "--limit", "connections=16", "--limit", "reply-bytes=8M", "--limit",
                                                "output-bytes=1M", NULL });
        /* An item of uid 65534 with 1 MiB of output to show. */
        CTL_AS(&d, 65534, &r, "submit", "system", "--", "/bin/sh", "-c", "head -c 1048576 /dev/zero");
        ck_assert_msg(r.status == 0, "submit: %s", r.err);
        id = strndup(r.out, strcspn(r.out, "\n"));
        ctl_result_free(&r);
        CTL_AS(&d, 65534, &r, "wait", id);
        ck_assert_int_eq(r.status, 0);
        ctl_result_free(&r);

        /* Twelve connections ask for six shows each, none read: each
         * connection holds up to 2 MiB of them, 24 MiB against 8 MiB. */
        iid.id = strtoull(id, NULL, 10);
        req.body_case = CMWQ__REQUEST__BODY_SHOW;
        req.show = &iid;
        for (int k = 0; k < CONNECTIONS; k++) {
                fds[k] = connect_as_nobody();
                ck_assert(send_hello(fds[k], CMWQ_PROTOCOL_VERSION));
                resp = recv_response(fds[k]);
                ck_assert_msg(resp && resp->error == CMWQ__ERROR__OK, "Hello refused");
                cmwq__response__free_unpacked(resp, NULL);
                for (int n = 0; n < SHOWS; n++) {
                        req.id = next_id++;
                        if (!send_request(fds[k], &req))
                                break;
                }
        }
        for (int waited = 0; !log_contains("over the per-user limit 'reply-bytes'"); waited += 50) {
                ck_assert_msg(waited < 10000, "24 MiB of unread replies were kept; log:\n%s", read_file(d.log));
                usleep(50000);
        }
        for (int k = 0; k < CONNECTIONS; k++) {
                struct pollfd pfd = { .fd = fds[k], .events = POLLIN };

                if (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLHUP))
                        dropped++;
                close(fds[k]);
        }
        ck_assert_msg(dropped > 0, "no connection over reply-bytes was closed");

        /* The user afterwards is served. */
        CTL_AS(&d, 65534, &r, "show", id);
        ck_assert_msg(r.status == 0, "show after the drop: %s", r.err);
        ctl_result_free(&r);
        free(id);
}
END_TEST

START_TEST(test_connections_per_user) {
        Cmwq__Response *resp;
        struct ctl_result r;
        int fds[3], extra;

        for (int k = 0; k < 3; k++) {
                fds[k] = connect_as_nobody();
                ck_assert(send_hello(fds[k], CMWQ_PROTOCOL_VERSION));
                resp = recv_response(fds[k]);
                ck_assert_msg(resp && resp->error == CMWQ__ERROR__OK, "connection %d of 3 refused", k + 1);
                cmwq__response__free_unpacked(resp, NULL);
        }

        /* The fourth: refused with the limit named, over the protocol ... */
        extra = connect_as_nobody();
        (void) send_hello(extra, CMWQ_PROTOCOL_VERSION);
        resp = recv_response(extra);
        ck_assert_msg(resp, "a fourth connection was closed without a word");
        ck_assert_int_eq(resp->error, CMWQ__ERROR__LIMIT_EXCEEDED);
        ck_assert_str_eq(resp->message, "per-user limit 'connections' (3) reached for uid 65534");
        cmwq__response__free_unpacked(resp, NULL);
        assert_closed(extra, "a connection over the limit");
        close(extra);
        /* ... at once, without waiting for a Hello: nothing is kept of it. */
        extra = connect_as_nobody();
        resp = recv_response(extra);
        ck_assert_msg(resp, "a connection over the limit waited for its Hello");
        ck_assert_int_eq(resp->error, CMWQ__ERROR__LIMIT_EXCEEDED);
        ck_assert_str_eq(resp->message, "per-user limit 'connections' (3) reached for uid 65534");
        cmwq__response__free_unpacked(resp, NULL);
        assert_closed(extra, "a connection over the limit, without Hello");
        close(extra);

        /* ... and by cmwqctl, in one line, exit 1. */
        CTL_AS(&d, 65534, &r, "list");
        ck_assert_msg(r.status == 1, "exit %d, stderr %s", r.status, r.err);
        ck_assert_msg(strstr(r.err, "per-user limit 'connections' (3) reached for uid 65534") &&
                              strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
                      "stderr: '%s'", r.err);
        ctl_result_free(&r);

        /* Other users and root are not affected. */
        CTL_AS(&d, 65533, &r, "list");
        ck_assert_msg(r.status == 0, "uid 65533: exit %d, %s", r.status, r.err);
        ctl_result_free(&r);
        free(CTL_OK(&d, "list"));

        /* One closed: the slot is free again. */
        close(fds[0]);
        for (int waited = 0;; waited += 50) {
                CTL_AS(&d, 65534, &r, "list");
                if (r.status == 0)
                        break;
                ctl_result_free(&r);
                ck_assert_msg(waited < 30000, "the closed connection's slot was not given back");
                usleep(50000);
        }
        ctl_result_free(&r);
        close(fds[1]);
        close(fds[2]);
}
END_TEST

/* Forks a child with pid @want, which pauses; -1 if another process took
 * that pid first every time.  @want must be free. */
static pid_t fork_with_pid(pid_t want) {
        for (int attempt = 0; attempt < 200; attempt++) {
                int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
                pid_t pid;

                ck_assert_msg(fd >= 0, "ns_last_pid: %s", strerror(errno));
                ck_assert_int_gt(dprintf(fd, "%d", (int) want - 1), 0);
                close(fd);
                pid = fork();
                if (pid == 0) {
                        pause();
                        _exit(0);
                }
                /* In the parent only: a passing assertion writes to Check's
                 * messages too, and a child's would go in among ours. */
                ck_assert_int_ge(pid, 0);
                if (pid == want)
                        return pid;
                /* Someone else on the machine forked in between: again. */
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
        }
        return -1;
}

/*
 * Connects @fd to cmwqd from a child running as uid 65534, makes the
 * connection a callback client, and lets the child end.  Returns the dead
 * child's pid; the connection stays open through @fd.
 */
static pid_t connect_from_a_child_that_dies(int fd) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CallbackAttach attach = CMWQ__CALLBACK_ATTACH__INIT;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        Cmwq__Response *resp;
        int go[2], ready[2], status;
        pid_t connector;
        char byte;

        memcpy(sa.sun_path, d.socket, strlen(d.socket) + 1);
        ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(ready, O_CLOEXEC), 0);
        connector = fork();
        if (connector == 0) {
                if (setresuid(65534, 65534, 65534) < 0 || connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                        _exit(1);
                close(go[1]);
                if (write(ready[1], "c", 1) != 1)
                        _exit(1);
                /* Until the test is done with what it needs us alive for
                 * (its end closes the pipe: EOF; an error ends it too). */
                if (read(go[0], &byte, 1) < 0) {
                }
                _exit(0);
        }
        ck_assert_int_ge(connector, 0);
        close(go[0]);
        close(ready[1]);
        ck_assert_msg(read(ready[0], &byte, 1) == 1, "the connector did not connect");
        close(ready[0]);

        ck_assert(send_hello(fd, CMWQ_PROTOCOL_VERSION));
        resp = recv_response(fd);
        ck_assert_msg(resp && resp->error == CMWQ__ERROR__OK, "Hello refused: %s",
                      resp && resp->message ? resp->message : "");
        cmwq__response__free_unpacked(resp, NULL);
        attach.layout_version = 1;      /* CMWQ_SHM_VERSION */
        req.body_case = CMWQ__REQUEST__BODY_CALLBACK_ATTACH;
        req.callback_attach = &attach;
        resp = call(fd, &req);
        ck_assert_msg(resp->error == CMWQ__ERROR__OK, "CallbackAttach refused: %s", resp->message);
        cmwq__response__free_unpacked(resp, NULL);

        close(go[1]);
        ck_assert_int_eq(waitpid(connector, &status, 0), connector);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the connector: status 0x%x", status);
        return connector;
}

/*
 * Issue 12 ("Also"): thread registration trusted the pid SO_PEERCRED gave at
 * connect().  A connection outlives the process that made it when another
 * keeps the fd; once that process has died and its pid is another's, a
 * registration of "thread <pid>" named a thread of the other process (here
 * root's), which cmwqd would watch and grant CPUs to.  It must be refused.
 */
START_TEST(test_callback_registration_after_the_connector_died_and_its_pid_was_reused) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__CallbackWorker worker = CMWQ__CALLBACK_WORKER__INIT;
        Cmwq__Response *resp;
        pid_t connector = -1, victim = -1;
        int fd = -1;

        /* The dead connector's pid goes to root's process.  Another program
         * of a parallel `make check` may fork in between and keep that pid;
         * then the whole scenario runs again with a new connector. */
        for (int round = 0; round < 10 && victim < 0; round++) {
                if (fd >= 0)
                        close(fd);
                fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                ck_assert_int_ge(fd, 0);
                connector = connect_from_a_child_that_dies(fd);
                victim = fork_with_pid(connector);
        }
        ck_assert_msg(victim == connector, "pid %d could not be had again (10 connectors)", (int) connector);

        worker.tid = (uint32_t) victim;
        worker.cpu = 0;
        worker.slot = 0;
        req = (Cmwq__Request) CMWQ__REQUEST__INIT;
        req.body_case = CMWQ__REQUEST__BODY_CALLBACK_REGISTER;
        req.callback_register = &worker;
        resp = call(fd, &req);
        kill(victim, SIGKILL);
        waitpid(victim, NULL, 0);
        ck_assert_msg(resp->error != CMWQ__ERROR__OK, "root's process %d was registered as a worker of uid 65534",
                      (int) victim);
        ck_assert_msg(resp->message && strstr(resp->message, "has exited"), "refused with: %s",
                      resp->message ? resp->message : "");
        cmwq__response__free_unpacked(resp, NULL);
        close(fd);
        assert_serving("a registration for a reused pid");
}
END_TEST

int main(void) {
        Suite *s = suite_create("bad-input");
        TCase *tc = tcase_create("bad-input");
        SRunner *sr;
        int failed;

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 90);
        tcase_add_test(tc, test_garbage_bytes);
        tcase_add_test(tc, test_empty_frame_and_frame_without_id);
        tcase_add_test(tc, test_oversized_frame_refused_from_its_header);
        tcase_add_test(tc, test_frame_at_the_limit);
        tcase_add_test(tc, test_request_before_hello);
        tcase_add_test(tc, test_hello_with_another_version);
        tcase_add_test(tc, test_hello_twice);
        tcase_add_test(tc, test_truncated_frames);
        tcase_add_test(tc, test_unknown_or_empty_request_body);
        tcase_add_test(tc, test_submit_over_the_limits);
        tcase_add_test(tc, test_submit_invalid_values);
        tcase_add_test(tc, test_workqueue_requests_invalid_values);
        tcase_add_test(tc, test_freeze_with_huge_timeout);
        tcase_add_test(tc, test_client_that_never_reads);
        tcase_add_test(tc, test_too_many_waiting_requests);
        tcase_add_test(tc, test_clients_that_vanish);
        tcase_add_test(tc, test_cmwqctl_bad_command_lines);
        tcase_add_test(tc, test_an_older_client_gets_the_region_it_knows);
        suite_add_tcase(s, tc);

        tc = tcase_create("connections");
        tcase_add_checked_fixture(tc, setup_deadline, teardown);
        tcase_set_timeout(tc, 90);
        tcase_add_test(tc, test_silent_and_stalled_clients_are_dropped);
        tcase_add_test(tc, test_half_closed_client_gets_its_replies);
        tcase_add_test(tc, test_connections_per_user);
        tcase_add_test(tc, test_unread_replies_per_user);
        tcase_add_test(tc, test_passed_file_descriptors_are_refused);
        tcase_add_test(tc, test_callback_registration_after_the_connector_died_and_its_pid_was_reused);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}
