/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>

#include "base/log.h"

static int max_level = LOG_INFO;
static bool to_journal;

static const char *const level_names[] = {
        [LOG_EMERG] = "emerg",     [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
        [LOG_ERR] = "error",       [LOG_WARNING] = "warning",
        [LOG_NOTICE] = "notice",   [LOG_INFO] = "info",   [LOG_DEBUG] = "debug",
};

void log_setup(int level) {
        max_level = level;
        /* systemd sets $JOURNAL_STREAM to "DEV:INODE" of the stream it connected
         * to our stderr; only then is structured logging to the journal right. */
        const char *e = getenv("JOURNAL_STREAM");
        if (e) {
                unsigned long dev, ino;
                if (sscanf(e, "%lu:%lu", &dev, &ino) == 2)
                        to_journal = true;
        }
}

int log_get_max_level(void) {
        return max_level;
}

int log_level_from_string(const char *s) {
        for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
                if (strcasecmp(s, level_names[i]) == 0)
                        return (int) i;
        if (strcasecmp(s, "err") == 0)
                return LOG_ERR;
        if (strcasecmp(s, "warn") == 0)
                return LOG_WARNING;
        return -EINVAL;
}

size_t log_fields_format(const struct log_fields *f, char buf[static LOG_FIELDS_MAX][LOG_FIELD_SIZE]) {
        size_t n = 0;

        if (!f)
                return 0;
        if (f->queue)
                snprintf(buf[n++], LOG_FIELD_SIZE, "CMWQ_QUEUE=%s", f->queue);
        if (f->item > 0)
                snprintf(buf[n++], LOG_FIELD_SIZE, "CMWQ_ITEM=%" PRIu64, f->item);
        if (f->has_uid)
                snprintf(buf[n++], LOG_FIELD_SIZE, "CMWQ_UID=%u", (unsigned) f->uid);
        if (f->has_cpu)
                snprintf(buf[n++], LOG_FIELD_SIZE, "CMWQ_CPU=%u", f->cpu);
        if (f->pool)
                snprintf(buf[n++], LOG_FIELD_SIZE, "CMWQ_POOL=%s", f->pool);
        return n;
}

#define MESSAGE_PREFIX "MESSAGE="

/* @message is "MESSAGE=text". */
static void log_journal(int level, int error, const char *file, int line, const struct log_fields *f,
                        const char *message) {
        char fields[LOG_FIELDS_MAX][LOG_FIELD_SIZE], priority[16], code_file[256], code_line[32], errno_field[32];
        struct iovec iov[6 + LOG_FIELDS_MAX];
        size_t n = 0, nf;

        snprintf(priority, sizeof(priority), "PRIORITY=%d", level);
        snprintf(code_file, sizeof(code_file), "CODE_FILE=%s", file);
        snprintf(code_line, sizeof(code_line), "CODE_LINE=%d", line);
        iov[n++] = (struct iovec) { (char *) message, strlen(message) };
        iov[n++] = (struct iovec) { priority, strlen(priority) };
        iov[n++] = (struct iovec) { code_file, strlen(code_file) };
        iov[n++] = (struct iovec) { code_line, strlen(code_line) };
        iov[n++] = (struct iovec) { (char *) "SYSLOG_IDENTIFIER=cmwqd", strlen("SYSLOG_IDENTIFIER=cmwqd") };
        if (error) {
                snprintf(errno_field, sizeof(errno_field), "ERRNO=%d", error < 0 ? -error : error);
                iov[n++] = (struct iovec) { errno_field, strlen(errno_field) };
        }
        nf = log_fields_format(f, fields);
        for (size_t k = 0; k < nf; k++)
                iov[n++] = (struct iovec) { fields[k], strlen(fields[k]) };
        sd_journal_sendv(iov, (int) n);
}

/* Copies @text into @out (@size bytes) with its control characters
 * escaped (\n, \xNN): what a client chose (a program's path, a queue's
 * name, a key) makes no line of its own in the log, which could pass for
 * one of cmwqd's. */
static void log_escape_controls(const char *text, char *out, size_t size) {
        static const char hex[] = "0123456789abcdef";
        size_t n = 0;

        for (const unsigned char *p = (const unsigned char *) text; *p && n + 5 < size; p++) {
                if (*p >= 0x20 && *p != 0x7f) {
                        out[n++] = (char) *p;
                        continue;
                }
                out[n++] = '\\';
                if (*p == '\n')
                        out[n++] = 'n';
                else if (*p == '\t')
                        out[n++] = 't';
                else if (*p == '\r')
                        out[n++] = 'r';
                else {
                        out[n++] = 'x';
                        out[n++] = hex[*p >> 4];
                        out[n++] = hex[*p & 0xf];
                }
        }
        out[n] = '\0';
}

static int log_va(int level, int error, const char *file, int line, const struct log_fields *f, const char *fmt,
                  va_list ap) {
        char raw[2048], buf[sizeof(MESSAGE_PREFIX) - 1 + 2048] = MESSAGE_PREFIX;
        char *text = buf + sizeof(MESSAGE_PREFIX) - 1;

        if (level > max_level)
                return error;

        /* %m must mean the error we were handed, not whatever errno is. */
        errno = error < 0 ? -error : error;
        vsnprintf(raw, sizeof(raw), fmt, ap);
        log_escape_controls(raw, text, sizeof(buf) - (sizeof(MESSAGE_PREFIX) - 1));

        if (to_journal)
                log_journal(level, error, file, line, f, buf);
        else
                fprintf(stderr, "cmwqd[%s]: %s\n", level_names[level], text);

        return error;
}

int log_internal(int level, int error, const char *file, int line, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = log_va(level, error, file, line, NULL, fmt, ap);
        va_end(ap);
        return r;
}

int log_internal_fields(int level, int error, const char *file, int line, const struct log_fields *f,
                        const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = log_va(level, error, file, line, f, fmt, ap);
        va_end(ap);
        return r;
}
