/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config-file.h"
#include "util.h"

static char *strip(char *s) {
        char *end;

        s += strspn(s, " \t\r\n");
        end = s + strlen(s);
        while (end > s && strchr(" \t\r\n", end[-1]))
                *--end = 0;
        return s;
}

int config_file_load(const char *path, bool must_exist, struct limits *l) {
        _cleanup_(freep) char *line = NULL;
        bool in_limits = false;
        unsigned lineno = 0;
        size_t cap = 0;
        int r = 0;
        FILE *f;

        f = fopen(path, "re");
        if (!f) {
                if (errno == ENOENT && !must_exist)
                        return 0;
                r = -errno;
                fprintf(stderr, "cmwqd: cannot read %s: %s\n", path, strerror(-r));
                return r;
        }
        while (r == 0 && getline(&line, &cap, f) >= 0) {
                char *p = strip(line), *eq, assignment[512], err[160];

                lineno++;
                if (!*p || *p == '#' || *p == ';')
                        continue;
                if (*p == '[') {
                        in_limits = strcmp(p, "[Limits]") == 0;
                        if (!in_limits) {
                                fprintf(stderr, "cmwqd: %s:%u: unknown section %s (there is [Limits])\n", path, lineno,
                                        p);
                                r = -EINVAL;
                        }
                        continue;
                }
                eq = strchr(p, '=');
                if (!in_limits || !eq) {
                        fprintf(stderr, "cmwqd: %s:%u: expected NAME=VALUE in a [Limits] section, not '%s'\n", path,
                                lineno, p);
                        r = -EINVAL;
                        continue;
                }
                *eq = 0;
                snprintf(assignment, sizeof(assignment), "%s=%s", strip(p), strip(eq + 1));
                if (limits_parse(l, assignment, err, sizeof(err)) < 0) {
                        fprintf(stderr, "cmwqd: %s:%u: %s\n", path, lineno, err);
                        r = -EINVAL;
                }
        }
        if (r == 0 && ferror(f)) {
                fprintf(stderr, "cmwqd: cannot read %s\n", path);
                r = -EIO;
        }
        fclose(f);
        return r;
}
