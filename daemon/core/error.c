/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdarg.h>
#include <stdio.h>

#include "core/error.h"

int core_error_set(struct core_error *e, int error, const char *fmt, ...) {
        va_list ap;

        if (!e)
                return error;
        e->error = error;
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof(e->message), fmt, ap);
        va_end(ap);
        return error;
}
