/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

int log_internal(int level, int error, const char *file, int line, const char *fmt, ...) {
        char buf[2048];
        va_list ap;

        if (level > max_level)
                return error;

        /* %m must mean the error we were handed, not whatever errno is. */
        errno = error < 0 ? -error : error;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);

        if (to_journal) {
                char code_line[32];
                snprintf(code_line, sizeof(code_line), "%d", line);
                sd_journal_send("MESSAGE=%s", buf, "PRIORITY=%d", level, "CODE_FILE=%s", file,
                                "CODE_LINE=%s", code_line, "SYSLOG_IDENTIFIER=cmwqd",
                                error ? "ERRNO=%d" : NULL, error < 0 ? -error : error, NULL);
        } else
                fprintf(stderr, "cmwqd[%s]: %s\n", level_names[level], buf);

        return error;
}
