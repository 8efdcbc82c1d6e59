/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The OpenMetrics 1.0 text format's rules (openmetrics-lint.h), after the
 * specification's ABNF ("Text format" and "Metric types"). */

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openmetrics-lint.h"

#define MAX_FAMILIES 256
#define MAX_SERIES 8192
#define MAX_LABELS 16

struct family {
        char name[128];
        char type[32];          /* "" until a TYPE line: unknown */
        bool has_type, has_help, has_unit, has_samples;
};

struct lint {
        struct family families[MAX_FAMILIES];
        size_t n_families;
        struct family *cur;
        char **series;
        size_t n_series;
        unsigned line;
        char *err;
        size_t err_size;
};

static int bad(struct lint *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct lint *l, const char *fmt, ...) {
        va_list ap;
        int n;

        n = snprintf(l->err, l->err_size, "line %u: ", l->line);
        va_start(ap, fmt);
        if (n >= 0 && (size_t) n < l->err_size)
                vsnprintf(l->err + n, l->err_size - (size_t) n, fmt, ap);
        va_end(ap);
        return -1;
}

static bool metric_name_valid(const char *s, size_t n) {
        if (n == 0 || !(isalpha((unsigned char) s[0]) || s[0] == '_' || s[0] == ':'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!(isalnum((unsigned char) s[i]) || s[i] == '_' || s[i] == ':'))
                        return false;
        return true;
}

static bool label_name_valid(const char *s, size_t n) {
        if (n == 0 || !(isalpha((unsigned char) s[0]) || s[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!(isalnum((unsigned char) s[i]) || s[i] == '_'))
                        return false;
        return true;
}

static bool ends_with(const char *s, const char *suffix) {
        size_t a = strlen(s), b = strlen(suffix);

        return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* OpenMetrics' realnumber, or NaN / +Inf / -Inf. */
static bool number_valid(const char *s, double *ret) {
        char *end;

        if (strcmp(s, "NaN") == 0 || strcmp(s, "+Inf") == 0 || strcmp(s, "-Inf") == 0) {
                *ret = strcmp(s, "-Inf") == 0 ? -1 : 0;
                return true;
        }
        if (!*s || !(isdigit((unsigned char) s[*s == '-' || *s == '+']) || s[*s == '-' || *s == '+'] == '.'))
                return false;
        for (const char *p = s; *p; p++)
                if (!strchr("0123456789+-.eE", *p))
                        return false;
        *ret = strtod(s, &end);
        return *end == '\0';
}

static struct family *family_find(struct lint *l, const char *name) {
        for (size_t i = 0; i < l->n_families; i++)
                if (strcmp(l->families[i].name, name) == 0)
                        return &l->families[i];
        return NULL;
}

/* Makes @name the current family: a new one, or the current one again.
 * A family seen before and left is interleaving. */
static int family_enter(struct lint *l, const char *name, size_t n) {
        struct family *f;
        char buf[128];

        if (n >= sizeof(buf))
                return bad(l, "metric name too long");
        memcpy(buf, name, n);
        buf[n] = '\0';
        if (l->cur && strcmp(l->cur->name, buf) == 0)
                return 0;
        if (family_find(l, buf))
                return bad(l, "metric family '%s' appears again after another family", buf);
        if (l->n_families == MAX_FAMILIES)
                return bad(l, "too many families for this checker");
        f = &l->families[l->n_families++];
        memset(f, 0, sizeof(*f));
        strcpy(f->name, buf);
        l->cur = f;
        return 0;
}

static int check_descriptor(struct lint *l, const char *line) {
        const char *kind = line + 2, *name, *rest;
        size_t n;

        if (strcmp(line, "# EOF") == 0)
                return 1;
        if (strncmp(line, "# ", 2) != 0)
                return bad(l, "a comment other than '# HELP', '# TYPE', '# UNIT' or '# EOF'");
        if (strncmp(kind, "HELP ", 5) != 0 && strncmp(kind, "TYPE ", 5) != 0 && strncmp(kind, "UNIT ", 5) != 0)
                return bad(l, "a comment other than '# HELP', '# TYPE', '# UNIT' or '# EOF'");
        name = kind + 5;
        rest = strchr(name, ' ');
        n = rest ? (size_t) (rest - name) : strlen(name);
        if (!metric_name_valid(name, n))
                return bad(l, "invalid metric name '%.*s'", (int) n, name);
        if (family_enter(l, name, n) < 0)
                return -1;
        if (l->cur->has_samples)
                return bad(l, "metadata of '%s' after its samples", l->cur->name);
        rest = rest ? rest + 1 : "";

        if (kind[0] == 'T') {
                static const char *const types[] = { "counter", "gauge", "histogram", "gaugehistogram",
                                                     "stateset", "info", "summary", "unknown" };
                bool known = false;

                if (l->cur->has_type)
                        return bad(l, "second TYPE for '%s'", l->cur->name);
                for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
                        known = known || strcmp(rest, types[i]) == 0;
                if (!known)
                        return bad(l, "unknown type '%s'", rest);
                if (strcmp(rest, "counter") == 0 && ends_with(l->cur->name, "_total"))
                        return bad(l, "counter family '%s' ends in _total (its samples add it)", l->cur->name);
                l->cur->has_type = true;
                snprintf(l->cur->type, sizeof(l->cur->type), "%s", rest);
        } else if (kind[0] == 'H') {
                if (l->cur->has_help)
                        return bad(l, "second HELP for '%s'", l->cur->name);
                for (const char *p = rest; *p; p++)
                        if (*p == '\\' && (p[1] != '\\' && p[1] != 'n' && p[1] != '"'))
                                return bad(l, "invalid escape in HELP");
                        else if (*p == '\\')
                                p++;
                l->cur->has_help = true;
        } else {
                char suffix[64];

                if (l->cur->has_unit)
                        return bad(l, "second UNIT for '%s'", l->cur->name);
                snprintf(suffix, sizeof(suffix), "_%s", rest);
                if (*rest && !ends_with(l->cur->name, suffix))
                        return bad(l, "family '%s' does not end with its unit '%s'", l->cur->name, rest);
                l->cur->has_unit = true;
        }
        return 0;
}

/* Is sample @name one of family @f's? */
static bool sample_of(const struct family *f, const char *name) {
        static const char *const counter[] = { "_total", "_created", NULL };
        static const char *const histogram[] = { "_bucket", "_count", "_sum", "_created", NULL };
        static const char *const gaugehistogram[] = { "_bucket", "_gcount", "_gsum", NULL };
        static const char *const summary[] = { "", "_count", "_sum", "_created", NULL };
        static const char *const info[] = { "_info", NULL };
        static const char *const plain[] = { "", NULL };
        const char *const *suffixes = plain;
        size_t n = strlen(f->name);

        if (strcmp(f->type, "counter") == 0)
                suffixes = counter;
        else if (strcmp(f->type, "histogram") == 0)
                suffixes = histogram;
        else if (strcmp(f->type, "gaugehistogram") == 0)
                suffixes = gaugehistogram;
        else if (strcmp(f->type, "summary") == 0)
                suffixes = summary;
        else if (strcmp(f->type, "info") == 0)
                suffixes = info;
        if (strncmp(name, f->name, n) != 0)
                return false;
        for (; *suffixes; suffixes++)
                if (strcmp(name + n, *suffixes) == 0)
                        return true;
        return false;
}

static int label_cmp(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static int check_sample(struct lint *l, const char *line) {
        char name[128], key[2048], *labels[MAX_LABELS];
        size_t n_labels = 0, n = strcspn(line, "{ ");
        const char *p = line + n;
        char value[64], *sp;
        double v;
        int r = 0;

        if (!metric_name_valid(line, n) || n >= sizeof(name))
                return bad(l, "invalid metric name '%.*s'", (int) n, line);
        memcpy(name, line, n);
        name[n] = '\0';
        if (!l->cur || !sample_of(l->cur, name)) {
                /* A sample without metadata is a family of its own, unknown. */
                if (family_enter(l, name, n) < 0)
                        return -1;
                if (!sample_of(l->cur, name))
                        return bad(l, "sample '%s' does not belong to family '%s' (type %s)", name, l->cur->name,
                                   l->cur->type[0] ? l->cur->type : "unknown");
        }
        l->cur->has_samples = true;

        if (*p == '{') {
                p++;
                while (*p != '}') {
                        size_t k = strcspn(p, "=");
                        char buf[512];
                        size_t m = 0;

                        if (!label_name_valid(p, k))
                                return bad(l, "invalid label name '%.*s'", (int) k, p);
                        if (k + 2 >= sizeof(buf))
                                return bad(l, "label too long");
                        memcpy(buf, p, k);
                        m = k;
                        buf[m++] = '=';
                        p += k + 1;
                        if (*p != '"')
                                return bad(l, "label value not quoted");
                        for (p++; *p != '"'; p++) {
                                if (!*p)
                                        return bad(l, "unterminated label value");
                                if (*p == '\\') {
                                        if (p[1] != '\\' && p[1] != '"' && p[1] != 'n')
                                                return bad(l, "invalid escape '\\%c' in a label value", p[1]);
                                        if (m + 2 < sizeof(buf))
                                                buf[m++] = *p;
                                        p++;
                                }
                                if (m + 2 < sizeof(buf))
                                        buf[m++] = *p;
                        }
                        buf[m] = '\0';
                        p++;
                        if (n_labels == MAX_LABELS)
                                return bad(l, "too many labels for this checker");
                        for (size_t i = 0; i < n_labels; i++)
                                if (strncmp(labels[i], buf, k + 1) == 0) {
                                        r = bad(l, "label '%.*s' twice", (int) k, buf);
                                        goto out;
                                }
                        labels[n_labels] = strdup(buf);
                        if (!labels[n_labels]) {
                                r = bad(l, "out of memory");
                                goto out;
                        }
                        n_labels++;
                        if (*p == ',' && p[1] != '}')
                                p++;
                        else if (*p != '}') {
                                r = bad(l, "expected ',' or '}' after a label");
                                goto out;
                        }
                }
                p++;
        }
        if (*p != ' ') {
                r = bad(l, "expected one space before the value");
                goto out;
        }
        p++;
        snprintf(value, sizeof(value), "%s", p);
        sp = strchr(value, ' ');
        if (sp) {
                double ts;

                *sp = '\0';
                if (!number_valid(sp + 1, &ts)) {
                        r = bad(l, "invalid timestamp '%s'", sp + 1);
                        goto out;
                }
        }
        if (!number_valid(value, &v)) {
                r = bad(l, "invalid value '%s'", value);
                goto out;
        }
        if (strcmp(l->cur->type, "counter") == 0 && (v < 0 || strcmp(value, "NaN") == 0)) {
                r = bad(l, "counter '%s' has value %s", name, value);
                goto out;
        }

        /* The series: the name and the sorted labels. */
        qsort(labels, n_labels, sizeof(char *), label_cmp);
        snprintf(key, sizeof(key), "%s", name);
        for (size_t i = 0; i < n_labels; i++) {
                size_t len = strlen(key);

                snprintf(key + len, sizeof(key) - len, "\x1f%s", labels[i]);
        }
        for (size_t i = 0; i < l->n_series; i++)
                if (strcmp(l->series[i], key) == 0) {
                        r = bad(l, "series '%s' appears twice", line);
                        goto out;
                }
        if (l->n_series == MAX_SERIES || !(l->series[l->n_series] = strdup(key))) {
                r = bad(l, "too many series for this checker");
                goto out;
        }
        l->n_series++;
out:
        for (size_t i = 0; i < n_labels; i++)
                free(labels[i]);
        return r;
}

int openmetrics_lint(const char *text, char *err, size_t err_size) {
        struct lint *l;
        const char *p = text;
        bool eof = false;
        int r = 0;

        l = calloc(1, sizeof(*l));
        if (!l || !(l->series = calloc(MAX_SERIES, sizeof(char *)))) {
                free(l);
                snprintf(err, err_size, "out of memory");
                return -1;
        }
        l->err = err;
        l->err_size = err_size;

        while (*p && r == 0) {
                const char *nl = strchr(p, '\n');
                char *line;

                l->line++;
                if (eof) {
                        r = bad(l, "text after '# EOF'");
                        break;
                }
                if (!nl) {
                        r = bad(l, "last line without a newline");
                        break;
                }
                line = strndup(p, (size_t) (nl - p));
                if (!line) {
                        r = bad(l, "out of memory");
                        break;
                }
                if (!*line)
                        r = bad(l, "empty line");
                else if (line[0] == '#') {
                        r = check_descriptor(l, line);
                        if (r == 1) {
                                eof = true;
                                r = 0;
                        }
                } else
                        r = check_sample(l, line);
                free(line);
                p = nl + 1;
        }
        if (r == 0 && !eof) {
                l->line++;
                r = bad(l, "no '# EOF' at the end");
        }

        for (size_t i = 0; i < l->n_series; i++)
                free(l->series[i]);
        free(l->series);
        free(l);
        return r;
}
