/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cmwqctl-util.h"

int parse_uint64(const char *s, uint64_t *ret) {
        uint64_t v = 0;

        if (!s || !*s)
                return -EINVAL;
        for (const char *p = s; *p; p++) {
                unsigned d;

                if (*p < '0' || *p > '9')
                        return -EINVAL;
                d = (unsigned) (*p - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                v = v * 10 + d;
        }
        *ret = v;
        return 0;
}

int parse_uint32(const char *s, uint32_t *ret) {
        uint64_t v;
        int r;

        r = parse_uint64(s, &v);
        if (r < 0)
                return r;
        if (v > UINT32_MAX)
                return -ERANGE;
        *ret = (uint32_t) v;
        return 0;
}

int parse_cpu(const char *s, int32_t *ret) {
        uint64_t v;
        int r;

        r = parse_uint64(s, &v);
        if (r < 0)
                return r;
        if (v > INT32_MAX)
                return -ERANGE;
        *ret = (int32_t) v;
        return 0;
}

int parse_seconds_usec(const char *s, uint64_t *ret) {
        uint64_t whole = 0, frac = 0, scale = 100000;
        bool digits = false;
        const char *p = s;

        if (!s)
                return -EINVAL;

        for (; *p >= '0' && *p <= '9'; p++) {
                unsigned d = (unsigned) (*p - '0');

                if (whole > (UINT64_MAX / 1000000 - d) / 10)
                        return -ERANGE;
                whole = whole * 10 + d;
                digits = true;
        }
        if (*p == '.')
                for (p++; *p >= '0' && *p <= '9'; p++) {
                        frac += (uint64_t) (*p - '0') * scale;
                        scale /= 10;
                        digits = true;
                }
        if (*p != '\0' || !digits)
                return -EINVAL;
        if (whole > (UINT64_MAX - frac) / 1000000)
                return -ERANGE;

        *ret = whole * 1000000 + frac;
        return 0;
}

char *program_make_absolute(const char *program, const char *cwd) {
        char *p;

        if (program[0] == '/' || !strchr(program, '/') || !cwd)
                return strdup(program);

        while (program[0] == '.' && program[1] == '/') {
                program += 2;
                while (program[0] == '/')
                        program++;
        }
        if (asprintf(&p, "%s%s%s", cwd,
                     cwd[0] && cwd[strlen(cwd) - 1] == '/' ? "" : "/", program) < 0)
                return NULL;
        return p;
}

int item_exit_code(const Cmwq__ItemInfo *item) {
        switch (item->state) {
        case CMWQ__ITEM_STATE__STATE_FAILED:
                return CTL_EXIT_ITEM_NOT_STARTED;
        case CMWQ__ITEM_STATE__STATE_CANCELLED:
        case CMWQ__ITEM_STATE__STATE_INTERRUPTED:
                return CTL_EXIT_ITEM_CANCELLED;
        case CMWQ__ITEM_STATE__STATE_FINISHED:
                break;
        default:
                return -EAGAIN;
        }

        if (item->has_timed_out && item->timed_out)
                return CTL_EXIT_ITEM_TIMED_OUT;
        if (item->has_signal && item->signal > 0)
                return CTL_EXIT_ITEM_SIGNAL_BASE + (item->signal & 0x7f);
        if (item->has_exit_status)
                return item->exit_status & 0xff;
        return 0;
}

const char *item_state_to_string(Cmwq__ItemState s) {
        switch (s) {
        case CMWQ__ITEM_STATE__STATE_DELAYED:   return "delayed";
        case CMWQ__ITEM_STATE__STATE_INACTIVE:  return "inactive";
        case CMWQ__ITEM_STATE__STATE_PENDING:   return "pending";
        case CMWQ__ITEM_STATE__STATE_RUNNING:   return "running";
        case CMWQ__ITEM_STATE__STATE_FINISHED:  return "finished";
        case CMWQ__ITEM_STATE__STATE_CANCELLED: return "cancelled";
        case CMWQ__ITEM_STATE__STATE_FAILED:    return "failed";
        case CMWQ__ITEM_STATE__STATE_INTERRUPTED: return "interrupted";
        default:                                return "unknown";
        }
}

static const struct {
        uint32_t bit;
        const char *name;
} workqueue_flag_names[] = {
        { CMWQ__WORKQUEUE_FLAG__FLAG_UNBOUND,       "unbound" },
        { CMWQ__WORKQUEUE_FLAG__FLAG_FREEZABLE,     "freezable" },
        { CMWQ__WORKQUEUE_FLAG__FLAG_MEM_RECLAIM,   "mem_reclaim" },
        { CMWQ__WORKQUEUE_FLAG__FLAG_HIGHPRI,       "highpri" },
        { CMWQ__WORKQUEUE_FLAG__FLAG_CPU_INTENSIVE, "cpu_intensive" },
        { CMWQ__WORKQUEUE_FLAG__FLAG_ORDERED,       "ordered" },
};

const char *workqueue_flag_to_string(uint32_t bit) {
        for (size_t i = 0; i < sizeof(workqueue_flag_names) / sizeof(workqueue_flag_names[0]); i++)
                if (workqueue_flag_names[i].bit == bit)
                        return workqueue_flag_names[i].name;
        return NULL;
}

const char *workqueue_flags_to_string(uint32_t flags, char *buf, size_t size) {
        size_t n = 0;

        if (size == 0)
                return buf;
        buf[0] = '\0';
        for (size_t i = 0; i < sizeof(workqueue_flag_names) / sizeof(workqueue_flag_names[0]); i++) {
                if (!(flags & workqueue_flag_names[i].bit))
                        continue;
                flags &= ~workqueue_flag_names[i].bit;
                if (n < size)
                        n += (size_t) snprintf(buf + n, size - n, "%s%s", n ? "," : "",
                                               workqueue_flag_names[i].name);
        }
        if (flags && n < size)
                n += (size_t) snprintf(buf + n, size - n, "%s0x%x", n ? "," : "", flags);
        if (n == 0)
                snprintf(buf, size, "-");
        return buf;
}

void fputs_visible(FILE *f, const void *p, size_t n) {
        const unsigned char *b = p;

        for (size_t i = 0; i < n; i++) {
                if ((b[i] < 0x20 && b[i] != '\n' && b[i] != '\t') || b[i] == 0x7f)
                        fprintf(f, "\\x%02x", b[i]);
                else
                        fputc(b[i], f);
        }
}

void fputs_shell_quoted(FILE *f, const char *s) {
        static const char safe[] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-";
        bool control = false;

        if (*s && strspn(s, safe) == strlen(s)) {
                fputs(s, f);
                return;
        }
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        control = true;

        if (!control) {
                /* 'it'\''s' */
                fputc('\'', f);
                for (const char *p = s; *p; p++)
                        if (*p == '\'')
                                fputs("'\\''", f);
                        else
                                fputc(*p, f);
                fputc('\'', f);
                return;
        }

        /* $'...' for strings with control characters */
        fputs("$'", f);
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                switch (*p) {
                case '\n': fputs("\\n", f); break;
                case '\t': fputs("\\t", f); break;
                case '\r': fputs("\\r", f); break;
                case '\'': fputs("\\'", f); break;
                case '\\': fputs("\\\\", f); break;
                default:
                        if (*p < 0x20 || *p == 0x7f)
                                fprintf(f, "\\x%02x", *p);
                        else
                                fputc(*p, f);
                }
        fputc('\'', f);
}
