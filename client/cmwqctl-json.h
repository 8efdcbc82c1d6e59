/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * A small streaming JSON writer for cmwqctl's --json output.  It writes
 * compact JSON to a FILE, inserting commas itself, so that callers only say
 * what comes next.  Strings are escaped so that the output is always valid
 * JSON, even for bytes that are not UTF-8 (each invalid byte becomes
 * U+FFFD); data that must survive byte for byte can also be written as
 * base64.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct JsonWriter {
        FILE *f;
        bool need_comma;        /* a value was written at the current level */
        bool after_key;         /* a key was written, its value comes next */
} JsonWriter;

void json_init(JsonWriter *w, FILE *f);
/* End the document with a newline.  Returns 0, or -EIO if writing failed. */
int json_finish(JsonWriter *w);

void json_object_begin(JsonWriter *w);
void json_object_end(JsonWriter *w);
void json_array_begin(JsonWriter *w);
void json_array_end(JsonWriter *w);
void json_key(JsonWriter *w, const char *key);

void json_string(JsonWriter *w, const char *s);          /* NULL writes null */
void json_string_len(JsonWriter *w, const void *p, size_t n);
void json_base64(JsonWriter *w, const void *p, size_t n);
void json_uint(JsonWriter *w, uint64_t v);
void json_int(JsonWriter *w, int64_t v);
void json_double(JsonWriter *w, double v);
void json_bool(JsonWriter *w, bool b);
void json_null(JsonWriter *w);

static inline void json_kv_string(JsonWriter *w, const char *k, const char *s) {
        json_key(w, k);
        json_string(w, s);
}
static inline void json_kv_uint(JsonWriter *w, const char *k, uint64_t v) {
        json_key(w, k);
        json_uint(w, v);
}
static inline void json_kv_int(JsonWriter *w, const char *k, int64_t v) {
        json_key(w, k);
        json_int(w, v);
}
static inline void json_kv_double(JsonWriter *w, const char *k, double v) {
        json_key(w, k);
        json_double(w, v);
}
static inline void json_kv_bool(JsonWriter *w, const char *k, bool b) {
        json_key(w, k);
        json_bool(w, b);
}

/* Write @n bytes at @p as a quoted, escaped JSON string. */
void json_write_escaped(FILE *f, const void *p, size_t n);

/* Length (1..4) of the well-formed UTF-8 sequence at the start of @p, or 0
 * if none starts there (stray continuation byte, overlong form, surrogate,
 * beyond U+10FFFF, or cut short).  @n must be > 0. */
size_t utf8_sequence_length(const uint8_t *p, size_t n);
bool utf8_is_valid(const void *p, size_t n);
