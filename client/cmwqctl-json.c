/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "cmwqctl-json.h"

void json_init(JsonWriter *w, FILE *f) {
        *w = (JsonWriter) { .f = f };
}

int json_finish(JsonWriter *w) {
        fputc('\n', w->f);
        return ferror(w->f) ? -EIO : 0;
}

/* Separate this value from the previous one at the same level. */
static void json_prefix(JsonWriter *w) {
        if (w->after_key)
                w->after_key = false;
        else if (w->need_comma)
                fputc(',', w->f);
}

void json_object_begin(JsonWriter *w) {
        json_prefix(w);
        fputc('{', w->f);
        w->need_comma = false;
}

void json_object_end(JsonWriter *w) {
        fputc('}', w->f);
        w->need_comma = true;
}

void json_array_begin(JsonWriter *w) {
        json_prefix(w);
        fputc('[', w->f);
        w->need_comma = false;
}

void json_array_end(JsonWriter *w) {
        fputc(']', w->f);
        w->need_comma = true;
}

void json_key(JsonWriter *w, const char *key) {
        json_prefix(w);
        json_write_escaped(w->f, key, strlen(key));
        fputc(':', w->f);
        w->after_key = true;
}

void json_string(JsonWriter *w, const char *s) {
        if (!s) {
                json_null(w);
                return;
        }
        json_string_len(w, s, strlen(s));
}

void json_string_len(JsonWriter *w, const void *p, size_t n) {
        json_prefix(w);
        json_write_escaped(w->f, p, n);
        w->need_comma = true;
}

void json_base64(JsonWriter *w, const void *p, size_t n) {
        static const char table[] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const uint8_t *b = p;

        json_prefix(w);
        fputc('"', w->f);
        for (size_t i = 0; i < n; i += 3) {
                uint32_t v = (uint32_t) b[i] << 16;
                size_t left = n - i;

                if (left > 1)
                        v |= (uint32_t) b[i + 1] << 8;
                if (left > 2)
                        v |= b[i + 2];
                fputc(table[(v >> 18) & 63], w->f);
                fputc(table[(v >> 12) & 63], w->f);
                fputc(left > 1 ? table[(v >> 6) & 63] : '=', w->f);
                fputc(left > 2 ? table[v & 63] : '=', w->f);
        }
        fputc('"', w->f);
        w->need_comma = true;
}

void json_uint(JsonWriter *w, uint64_t v) {
        json_prefix(w);
        fprintf(w->f, "%" PRIu64, v);
        w->need_comma = true;
}

/* Three decimals; JSON has no NaN or infinity: those write null. */
void json_double(JsonWriter *w, double v) {
        if (!isfinite(v)) {
                json_null(w);
                return;
        }
        json_prefix(w);
        fprintf(w->f, "%.3f", v);
        w->need_comma = true;
}

void json_int(JsonWriter *w, int64_t v) {
        json_prefix(w);
        fprintf(w->f, "%" PRId64, v);
        w->need_comma = true;
}

void json_bool(JsonWriter *w, bool b) {
        json_prefix(w);
        fputs(b ? "true" : "false", w->f);
        w->need_comma = true;
}

void json_null(JsonWriter *w) {
        json_prefix(w);
        fputs("null", w->f);
        w->need_comma = true;
}

size_t utf8_sequence_length(const uint8_t *p, size_t n) {
        uint8_t lo = 0x80, hi = 0xbf;   /* allowed range of the second byte */
        size_t len;

        if (p[0] < 0x80)
                return 1;
        if (p[0] >= 0xc2 && p[0] <= 0xdf)
                len = 2;
        else if (p[0] >= 0xe0 && p[0] <= 0xef) {
                len = 3;
                if (p[0] == 0xe0)
                        lo = 0xa0;      /* overlong */
                else if (p[0] == 0xed)
                        hi = 0x9f;      /* UTF-16 surrogates */
        } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
                len = 4;
                if (p[0] == 0xf0)
                        lo = 0x90;      /* overlong */
                else if (p[0] == 0xf4)
                        hi = 0x8f;      /* beyond U+10FFFF */
        } else
                return 0;               /* continuation byte, 0xc0, 0xc1, 0xf5.. */

        if (n < len)
                return 0;
        if (p[1] < lo || p[1] > hi)
                return 0;
        for (size_t i = 2; i < len; i++)
                if (p[i] < 0x80 || p[i] > 0xbf)
                        return 0;
        return len;
}

bool utf8_is_valid(const void *p, size_t n) {
        const uint8_t *b = p;

        for (size_t i = 0; i < n;) {
                size_t k = utf8_sequence_length(b + i, n - i);
                if (k == 0)
                        return false;
                i += k;
        }
        return true;
}

void json_write_escaped(FILE *f, const void *p, size_t n) {
        const uint8_t *b = p;

        fputc('"', f);
        for (size_t i = 0; i < n;) {
                uint8_t c = b[i];
                size_t k;

                if (c >= 0x80) {
                        k = utf8_sequence_length(b + i, n - i);
                        if (k == 0) {
                                fputs("\\ufffd", f);
                                i++;
                        } else {
                                fwrite(b + i, 1, k, f);
                                i += k;
                        }
                        continue;
                }

                switch (c) {
                case '"':  fputs("\\\"", f); break;
                case '\\': fputs("\\\\", f); break;
                case '\b': fputs("\\b", f); break;
                case '\f': fputs("\\f", f); break;
                case '\n': fputs("\\n", f); break;
                case '\r': fputs("\\r", f); break;
                case '\t': fputs("\\t", f); break;
                default:
                        if (c < 0x20 || c == 0x7f)
                                fprintf(f, "\\u%04x", c);
                        else
                                fputc(c, f);
                }
                i++;
        }
        fputc('"', f);
}
