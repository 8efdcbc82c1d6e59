/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The client connection against a scripted server in a child process:
 * split and stale frames, hang-ups, oversized and undecodable frames,
 * refusals.  Also the socket path resolution. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conn.h"
#include "frame.h"

typedef void (*Script)(int fd);

static struct {
        char dir[64];
        char path[128];
        pid_t pid;
} srv;

static bool read_exact(int fd, void *p, size_t n) {
        while (n > 0) {
                ssize_t k = read(fd, p, n);
                if (k <= 0)
                        return false;
                p = (uint8_t *) p + k;
                n -= (size_t) k;
        }
        return true;
}

static Cmwq__Request *read_request(int fd) {
        uint8_t hdr[CMWQ_FRAME_HEADER_SIZE], *buf;
        Cmwq__Request *req;
        uint32_t len;

        if (!read_exact(fd, hdr, sizeof(hdr)))
                _exit(10);
        len = hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (uint32_t) hdr[3] << 24;
        buf = malloc(len + 1);
        if (!read_exact(fd, buf, len))
                _exit(11);
        req = cmwq__request__unpack(NULL, len, buf);
        free(buf);
        if (!req)
                _exit(12);
        return req;
}

/* Pack @resp into a frame; returns its length. */
static size_t frame(const Cmwq__Response *resp, uint8_t *buf) {
        size_t len = cmwq__response__get_packed_size(resp);

        frame_header_encode(buf, (uint32_t) len);
        cmwq__response__pack(resp, buf + CMWQ_FRAME_HEADER_SIZE);
        return CMWQ_FRAME_HEADER_SIZE + len;
}

static void write_all(int fd, const uint8_t *p, size_t n) {
        if (send(fd, p, n, MSG_NOSIGNAL) != (ssize_t) n)
                _exit(13);
}

/* Read the Hello and answer it well, announcing @max_frame if not 0. */
static void hello_ok(int fd, uint32_t max_frame) {
        Cmwq__Request *req = read_request(fd);
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__HelloReply hello = CMWQ__HELLO_REPLY__INIT;
        uint8_t buf[256];

        if (req->body_case != CMWQ__REQUEST__BODY_HELLO || req->hello->version != CMWQ_PROTOCOL_VERSION ||
            !req->hello->client || strcmp(req->hello->client, "test") != 0)
                _exit(14);
        resp.id = req->id;
        hello.version = CMWQ_PROTOCOL_VERSION;
        hello.daemon = (char *) "cmwqd test";
        hello.has_max_frame = max_frame > 0;
        hello.max_frame = max_frame;
        resp.body_case = CMWQ__RESPONSE__BODY_HELLO;
        resp.hello = &hello;
        write_all(fd, buf, frame(&resp, buf));
        cmwq__request__free_unpacked(req, NULL);
}

static void server_start(Script script) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        strcpy(srv.dir, "/tmp/test-cmwq-conn-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(srv.dir));
        snprintf(srv.path, sizeof(srv.path), "%s/s", srv.dir);
        strcpy(sa.sun_path, srv.path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(fd, 4), 0);

        srv.pid = fork();
        ck_assert_int_ge(srv.pid, 0);
        if (srv.pid == 0) {
                int cfd = accept(fd, NULL, NULL);

                if (cfd < 0)
                        _exit(15);
                script(cfd);
                close(cfd);
                _exit(0);
        }
        close(fd);
}

/* Wait for the server and check that its script ran to the end. */
static void server_finish(void) {
        int status;

        ck_assert_int_eq(waitpid(srv.pid, &status, 0), srv.pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "server failed: %d", status);
        unlink(srv.path);
        rmdir(srv.dir);
}

static struct conn *connect_ok(void) {
        struct conn *c = NULL;

        ck_assert_int_eq(conn_new(&c), 0);
        ck_assert_int_eq(conn_connect(c, srv.path, "test"), 0);
        return c;
}

static void list_request(Cmwq__Request *req, Cmwq__Empty *empty) {
        *req = (Cmwq__Request) CMWQ__REQUEST__INIT;
        *empty = (Cmwq__Empty) CMWQ__EMPTY__INIT;
        req->body_case = CMWQ__REQUEST__BODY_LIST;
        req->list = empty;
}

START_TEST(test_socket_path) {
        char dir[] = "/tmp/test-cmwq-conn-XXXXXX", sock[128];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char *p = NULL;
        int fd;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        unsetenv("CMWQ_SOCKET");
        setenv("XDG_RUNTIME_DIR", dir, 1);

        /* no socket in the runtime dir: the system one */
        ck_assert_int_eq(conn_socket_path(NULL, &p), 0);
        ck_assert_str_eq(p, CONN_SYSTEM_SOCKET_PATH);
        free(p);

        /* a socket there: the user instance */
        snprintf(sock, sizeof(sock), "%s/cmwqd.sock", dir);
        strcpy(sa.sun_path, sock);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(conn_socket_path(NULL, &p), 0);
        ck_assert_str_eq(p, sock);
        free(p);

        /* $CMWQ_SOCKET beats it, an empty one does not */
        setenv("CMWQ_SOCKET", "", 1);
        ck_assert_int_eq(conn_socket_path(NULL, &p), 0);
        ck_assert_str_eq(p, sock);
        free(p);
        setenv("CMWQ_SOCKET", "/env/sock", 1);
        ck_assert_int_eq(conn_socket_path(NULL, &p), 0);
        ck_assert_str_eq(p, "/env/sock");
        free(p);

        /* and the explicit path beats everything */
        ck_assert_int_eq(conn_socket_path("/explicit", &p), 0);
        ck_assert_str_eq(p, "/explicit");
        free(p);

        close(fd);
        unlink(sock);
        rmdir(dir);
}
END_TEST

START_TEST(test_connect_errors) {
        struct conn *c = NULL;
        char longpath[200];

        ck_assert_int_eq(conn_new(&c), 0);
        ck_assert_int_eq(conn_connect(c, "/nonexistent-cmwq/s", "test"), -ENOENT);
        ck_assert_ptr_null(conn_last_error(c));
        memset(longpath, 'a', sizeof(longpath) - 1);
        longpath[0] = '/';
        longpath[sizeof(longpath) - 1] = '\0';
        ck_assert_int_eq(conn_connect(c, longpath, "test"), -ENAMETOOLONG);
        ck_assert_int_eq(conn_connect(c, "", "test"), -EINVAL);
        ck_assert_ptr_null(conn_close(c));
        ck_assert_ptr_null(conn_close(NULL));
}
END_TEST

/* A stale answer first, then the right one dribbled out byte by byte,
 * followed in the same write by the start of the next. */
static void script_split_and_stale(int fd) {
        Cmwq__Response resp = CMWQ__RESPONSE__INIT, stale = CMWQ__RESPONSE__INIT;
        Cmwq__ListReply list = CMWQ__LIST_REPLY__INIT;
        Cmwq__Request *req;
        uint8_t buf[512];
        size_t n;

        hello_ok(fd, 0);
        req = read_request(fd);
        if (req->body_case != CMWQ__REQUEST__BODY_LIST)
                _exit(20);

        stale.id = req->id + 1000;
        stale.error = CMWQ__ERROR__INTERNAL;
        n = frame(&stale, buf);
        resp.id = req->id;
        resp.body_case = CMWQ__RESPONSE__BODY_LIST;
        resp.list = &list;
        n += frame(&resp, buf + n);
        for (size_t i = 0; i < n; i++) {
                write_all(fd, buf + i, 1);
                usleep(200);
        }
        cmwq__request__free_unpacked(req, NULL);

        /* second call: answered together with a stale frame after it */
        req = read_request(fd);
        resp.id = req->id;
        n = frame(&resp, buf);
        n += frame(&stale, buf + n);
        write_all(fd, buf, n);
        cmwq__request__free_unpacked(req, NULL);

        /* third call: the stale frame left in the buffer is skipped */
        req = read_request(fd);
        resp.id = req->id;
        write_all(fd, buf, frame(&resp, buf));
        cmwq__request__free_unpacked(req, NULL);
}

START_TEST(test_split_and_stale) {
        Cmwq__Response *resp = NULL;
        Cmwq__Request req;
        Cmwq__Empty empty;
        struct conn *c;

        server_start(script_split_and_stale);
        c = connect_ok();
        ck_assert_str_eq(conn_daemon_name(c), "cmwqd test");
        ck_assert_uint_eq(conn_daemon_protocol(c), CMWQ_PROTOCOL_VERSION);
        ck_assert_uint_eq(conn_max_payload(c), CMWQ_FRAME_MAX_PAYLOAD);

        for (int i = 0; i < 3; i++) {
                list_request(&req, &empty);
                ck_assert_int_eq(conn_call(c, &req, &resp), 0);
                ck_assert_uint_eq(resp->id, req.id);
                ck_assert_int_eq(resp->error, CMWQ__ERROR__OK);
                ck_assert_int_eq(resp->body_case, CMWQ__RESPONSE__BODY_LIST);
                cmwq__response__free_unpacked(resp, NULL);
        }
        conn_close(c);
        server_finish();
}
END_TEST

static void script_hang_up(int fd) {
        Cmwq__Request *req;
        uint8_t hdr[CMWQ_FRAME_HEADER_SIZE + 2];

        hello_ok(fd, 0);
        req = read_request(fd);
        cmwq__request__free_unpacked(req, NULL);
        /* half a frame, then EOF */
        frame_header_encode(hdr, 10);
        hdr[4] = hdr[5] = 0;
        write_all(fd, hdr, sizeof(hdr));
}

START_TEST(test_hang_up_mid_call) {
        Cmwq__Response *resp = NULL;
        Cmwq__Request req;
        Cmwq__Empty empty;
        struct conn *c;

        server_start(script_hang_up);
        c = connect_ok();
        list_request(&req, &empty);
        ck_assert_int_eq(conn_call(c, &req, &resp), -ECONNRESET);
        ck_assert_ptr_null(resp);
        conn_close(c);
        server_finish();
}
END_TEST

static void script_oversized(int fd) {
        uint8_t hdr[CMWQ_FRAME_HEADER_SIZE];

        hello_ok(fd, 0);
        cmwq__request__free_unpacked(read_request(fd), NULL);
        frame_header_encode(hdr, CMWQ_FRAME_MAX_PAYLOAD + 1);
        write_all(fd, hdr, sizeof(hdr));
        /* nothing else is sent: the client must judge by the header */
        sleep(1);
}

START_TEST(test_oversized_frame) {
        Cmwq__Response *resp = NULL;
        Cmwq__Request req;
        Cmwq__Empty empty;
        struct conn *c;

        server_start(script_oversized);
        c = connect_ok();
        list_request(&req, &empty);
        ck_assert_int_eq(conn_call(c, &req, &resp), -EMSGSIZE);
        conn_close(c);
        server_finish();
}
END_TEST

static void script_garbage(int fd) {
        uint8_t buf[CMWQ_FRAME_HEADER_SIZE + 3] = { 0, 0, 0, 0, 0xff, 0xff, 0xff };

        hello_ok(fd, 0);
        cmwq__request__free_unpacked(read_request(fd), NULL);
        frame_header_encode(buf, 3);
        write_all(fd, buf, sizeof(buf));
}

START_TEST(test_garbage_frame) {
        Cmwq__Response *resp = NULL;
        Cmwq__Request req;
        Cmwq__Empty empty;
        struct conn *c;

        server_start(script_garbage);
        c = connect_ok();
        list_request(&req, &empty);
        ck_assert_int_eq(conn_call(c, &req, &resp), -EBADMSG);
        conn_close(c);
        server_finish();
}
END_TEST

static void script_version_mismatch(int fd) {
        Cmwq__Request *req = read_request(fd);
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        uint8_t buf[256];

        resp.id = req->id;
        resp.error = CMWQ__ERROR__VERSION_MISMATCH;
        resp.message = (char *) "protocol version 1 not supported (daemon speaks 2)";
        write_all(fd, buf, frame(&resp, buf));
        cmwq__request__free_unpacked(req, NULL);
}

START_TEST(test_version_mismatch) {
        struct conn *c = NULL;

        server_start(script_version_mismatch);
        ck_assert_int_eq(conn_new(&c), 0);
        ck_assert_int_eq(conn_connect(c, srv.path, "test"), -EPROTONOSUPPORT);
        ck_assert_str_eq(conn_last_error(c), "protocol version 1 not supported (daemon speaks 2)");
        conn_close(c);
        server_finish();
}
END_TEST

/* The daemon drops us with a connection-level error (id 0). */
static void script_goodbye(int fd) {
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        uint8_t buf[256];

        hello_ok(fd, 0);
        cmwq__request__free_unpacked(read_request(fd), NULL);
        resp.id = 0;
        resp.error = CMWQ__ERROR__PROTOCOL;
        resp.message = (char *) "malformed request";
        write_all(fd, buf, frame(&resp, buf));
}

START_TEST(test_connection_error) {
        Cmwq__Response *resp = NULL;
        Cmwq__Request req;
        Cmwq__Empty empty;
        struct conn *c;

        server_start(script_goodbye);
        c = connect_ok();
        list_request(&req, &empty);
        ck_assert_int_eq(conn_call(c, &req, &resp), -EPROTO);
        ck_assert_str_eq(conn_last_error(c), "malformed request");
        conn_close(c);
        server_finish();
}
END_TEST

/* The daemon announces a small limit; a bigger request is not sent. */
static void script_small_limit(int fd) {
        Cmwq__Response resp = CMWQ__RESPONSE__INIT;
        Cmwq__Request *req;
        uint8_t buf[256];

        hello_ok(fd, 64);
        req = read_request(fd);
        if (req->body_case != CMWQ__REQUEST__BODY_DESTROY || strcmp(req->destroy->name, "small") != 0)
                _exit(30);
        resp.id = req->id;
        resp.error = CMWQ__ERROR__NOT_FOUND;
        resp.message = (char *) "no such workqueue";
        write_all(fd, buf, frame(&resp, buf));
        cmwq__request__free_unpacked(req, NULL);
}

START_TEST(test_request_too_large) {
        Cmwq__Request req = CMWQ__REQUEST__INIT;
        Cmwq__WorkqueueName name = CMWQ__WORKQUEUE_NAME__INIT;
        Cmwq__Response *resp = NULL;
        char big[100];
        struct conn *c;

        server_start(script_small_limit);
        c = connect_ok();
        ck_assert_uint_eq(conn_max_payload(c), 64);

        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        name.name = big;
        req.body_case = CMWQ__REQUEST__BODY_DESTROY;
        req.destroy = &name;
        ck_assert_int_eq(conn_call(c, &req, &resp), -EMSGSIZE);

        /* nothing was sent, so the connection still works */
        name.name = (char *) "small";
        ck_assert_int_eq(conn_call(c, &req, &resp), 0);
        ck_assert_int_eq(resp->error, CMWQ__ERROR__NOT_FOUND);
        ck_assert_str_eq(resp->message, "no such workqueue");
        ck_assert_int_eq(conn_error_to_errno(resp->error), -ENOENT);
        cmwq__response__free_unpacked(resp, NULL);
        conn_close(c);
        server_finish();
}
END_TEST

int main(void) {
        Suite *s = suite_create("cmwqctl-conn");
        TCase *tc = tcase_create("conn");
        SRunner *sr;
        int failed;

        signal(SIGPIPE, SIG_IGN);
        tcase_add_test(tc, test_socket_path);
        tcase_add_test(tc, test_connect_errors);
        tcase_add_test(tc, test_split_and_stale);
        tcase_add_test(tc, test_hang_up_mid_call);
        tcase_add_test(tc, test_oversized_frame);
        tcase_add_test(tc, test_garbage_frame);
        tcase_add_test(tc, test_version_mismatch);
        tcase_add_test(tc, test_connection_error);
        tcase_add_test(tc, test_request_too_large);
        suite_add_tcase(s, tc);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}
