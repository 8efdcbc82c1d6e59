/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmwqctl-print.h"
#include "cmwqctl-util.h"
#include "util.h"

struct Table {
        const TableColumn *columns;
        size_t n_columns;
        char **cells;
        size_t n_cells;
        size_t allocated;
};

int table_new(const TableColumn *columns, size_t n_columns, Table **ret) {
        Table *t;

        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->columns = columns;
        t->n_columns = n_columns;
        *ret = t;
        return 0;
}

Table *table_free(Table *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n_cells; i++)
                free(t->cells[i]);
        free(t->cells);
        free(t);
        return NULL;
}

static int table_add_owned(Table *t, char *cell) {
        if (!cell)
                return -ENOMEM;
        if (t->n_cells == t->allocated) {
                size_t n = t->allocated ? t->allocated * 2 : 64;
                char **c = reallocarray(t->cells, n, sizeof(char *));

                if (!c) {
                        free(cell);
                        return -ENOMEM;
                }
                t->cells = c;
                t->allocated = n;
        }
        t->cells[t->n_cells++] = cell;
        return 0;
}

int table_add(Table *t, const char *cell) {
        return table_add_owned(t, strdup(cell ?: "-"));
}

int table_addf(Table *t, const char *fmt, ...) {
        va_list ap;
        char *s;
        int r;

        va_start(ap, fmt);
        r = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        return table_add_owned(t, s);
}

/* Display width: UTF-8 continuation bytes take no column. */
static size_t text_width(const char *s) {
        size_t w = 0;

        for (; *s; s++)
                if (((unsigned char) *s & 0xc0) != 0x80)
                        w++;
        return w;
}

static void table_print_cell(const Table *t, size_t col, const char *s, size_t width, FILE *f) {
        size_t pad = width - text_width(s);
        bool last = col + 1 == t->n_columns;

        if (col > 0)
                fputs("  ", f);
        if (t->columns[col].right)
                fprintf(f, "%*s", (int) pad, "");
        fputs_visible(f, s, strlen(s));
        if (!t->columns[col].right && !last)
                fprintf(f, "%*s", (int) pad, "");
}

void table_print(const Table *t, FILE *f) {
        size_t *w;

        w = calloc(t->n_columns, sizeof(size_t));
        if (!w)
                return;

        for (size_t c = 0; c < t->n_columns; c++)
                w[c] = text_width(t->columns[c].header);
        for (size_t i = 0; i < t->n_cells; i++) {
                size_t k = text_width(t->cells[i]);
                if (k > w[i % t->n_columns])
                        w[i % t->n_columns] = k;
        }

        for (size_t c = 0; c < t->n_columns; c++)
                table_print_cell(t, c, t->columns[c].header, w[c], f);
        fputc('\n', f);
        for (size_t i = 0; i < t->n_cells; i++) {
                table_print_cell(t, i % t->n_columns, t->cells[i], w[i % t->n_columns], f);
                if (i % t->n_columns == t->n_columns - 1 || i + 1 == t->n_cells)
                        fputc('\n', f);
        }
        free(w);
}

static const char *format_timespan(char *buf, size_t size, uint64_t usec) {
        if (usec < 1000)
                snprintf(buf, size, "%" PRIu64 "us", usec);
        else if (usec < 1000000)
                snprintf(buf, size, "%.1fms", (double) usec / 1000.0);
        else
                snprintf(buf, size, "%.3fs", (double) usec / 1000000.0);
        return buf;
}

static const char *format_timestamp(char *buf, size_t size, uint64_t usec) {
        time_t sec = (time_t) (usec / 1000000);
        struct tm tm;
        size_t n;

        if (!localtime_r(&sec, &tm) || (n = strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm)) == 0) {
                snprintf(buf, size, "@%" PRIu64, usec);
                return buf;
        }
        snprintf(buf + n, size - n, ".%03u", (unsigned) (usec % 1000000 / 1000));
        return buf;
}

static const char *format_user(char *buf, size_t size, uint32_t uid) {
        struct passwd *pw = getpwuid((uid_t) uid);

        if (pw && pw->pw_name)
                snprintf(buf, size, "%s", pw->pw_name);
        else
                snprintf(buf, size, "%" PRIu32, uid);
        return buf;
}

#define ITEM_KEY "%-15s"

static void item_print_output(const char *name, bool has, const ProtobufCBinaryData *d,
                              bool truncated, FILE *f) {
        if (!has)
                return;
        fprintf(f, ITEM_KEY "%zu bytes%s\n", name, d->len, truncated ? " (truncated)" : "");
        for (size_t i = 0; i < d->len;) {
                const uint8_t *nl = memchr(d->data + i, '\n', d->len - i);
                size_t n = nl ? (size_t) (nl - (d->data + i)) : d->len - i;

                fputs("  ", f);
                fputs_visible(f, d->data + i, n);
                fputc('\n', f);
                i += n + (nl ? 1 : 0);
        }
}

void item_print(const Cmwq__ItemInfo *item, FILE *f) {
        char buf[64], buf2[64];

        fprintf(f, ITEM_KEY "%" PRIu64 "\n", "id:", item->id);
        fprintf(f, ITEM_KEY, "workqueue:");
        fputs_visible(f, item->workqueue, strlen(item->workqueue));
        fprintf(f, "\n" ITEM_KEY "%s\n", "state:", item_state_to_string(item->state));
        if (item->has_uid)
                fprintf(f, ITEM_KEY "%" PRIu32 " (%s)\n", "uid:", item->uid,
                        format_user(buf, sizeof(buf), item->uid));
        fprintf(f, ITEM_KEY, "command:");
        for (size_t i = 0; i < item->n_argv; i++) {
                if (i > 0)
                        fputc(' ', f);
                fputs_shell_quoted(f, item->argv[i]);
        }
        fputc('\n', f);
        if (item->key) {
                fprintf(f, ITEM_KEY, "key:");
                fputs_visible(f, item->key, strlen(item->key));
                fputc('\n', f);
        }
        if (item->has_cpu) {
                if (item->cpu < 0)
                        fprintf(f, ITEM_KEY "unbound\n", "cpu:");
                else
                        fprintf(f, ITEM_KEY "%" PRIi32 "\n", "cpu:", item->cpu);
        }
        /* Never for an interrupted item: how it ended is unknown (a daemon
         * from before this was fixed sent 0). */
        if (item->has_exit_status && item->state != CMWQ__ITEM_STATE__STATE_INTERRUPTED)
                fprintf(f, ITEM_KEY "%" PRIi32 "\n", "exit status:", item->exit_status);
        if (item->has_signal && item->signal > 0)
                fprintf(f, ITEM_KEY "%" PRIi32 " (%s)\n", "signal:", item->signal, strsignal(item->signal));
        if (item->has_timed_out && item->timed_out)
                fprintf(f, ITEM_KEY "yes\n", "timed out:");
        if (item->error) {
                fprintf(f, ITEM_KEY, "error:");
                fputs_visible(f, item->error, strlen(item->error));
                fputc('\n', f);
        }
        if (item->has_cpu_usec)
                fprintf(f, ITEM_KEY "%s\n", "cpu time:", format_timespan(buf, sizeof(buf), item->cpu_usec));
        if (item->has_cpu_intensive && item->cpu_intensive)
                fprintf(f, ITEM_KEY "yes\n", "cpu-intensive:");
        if (item->has_requeues && item->requeues > 0)
                fprintf(f, ITEM_KEY "%" PRIu32 "\n", "requeues:", item->requeues);
        if (item->has_interruptions && item->interruptions > 0)
                fprintf(f, ITEM_KEY "%" PRIu32 "\n", "interrupted:", item->interruptions);
        if (item->has_queued_usec && item->queued_usec > 0)
                fprintf(f, ITEM_KEY "%s\n", "queued:", format_timestamp(buf, sizeof(buf), item->queued_usec));
        if (item->has_started_usec && item->started_usec > 0) {
                fprintf(f, ITEM_KEY "%s", "started:", format_timestamp(buf, sizeof(buf), item->started_usec));
                if (item->has_queued_usec && item->queued_usec > 0 && item->started_usec >= item->queued_usec)
                        fprintf(f, " (waited %s)",
                                format_timespan(buf2, sizeof(buf2), item->started_usec - item->queued_usec));
                fputc('\n', f);
        }
        if (item->has_finished_usec && item->finished_usec > 0) {
                fprintf(f, ITEM_KEY "%s", "finished:", format_timestamp(buf, sizeof(buf), item->finished_usec));
                if (item->has_started_usec && item->started_usec > 0 && item->finished_usec >= item->started_usec)
                        fprintf(f, " (ran %s)",
                                format_timespan(buf2, sizeof(buf2), item->finished_usec - item->started_usec));
                fputc('\n', f);
        }
        item_print_output("stdout:", item->has_stdout_data, &item->stdout_data,
                          item->has_stdout_truncated && item->stdout_truncated, f);
        item_print_output("stderr:", item->has_stderr_data, &item->stderr_data,
                          item->has_stderr_truncated && item->stderr_truncated, f);
}

static void item_json_output(JsonWriter *w, const char *name, bool has, const ProtobufCBinaryData *d,
                             bool has_truncated, bool truncated) {
        char key[32];

        if (has) {
                json_key(w, name);
                json_string_len(w, d->data, d->len);
                if (!utf8_is_valid(d->data, d->len)) {
                        /* The string above is lossy; this is byte for byte. */
                        snprintf(key, sizeof(key), "%s_base64", name);
                        json_key(w, key);
                        json_base64(w, d->data, d->len);
                }
        }
        if (has || has_truncated) {
                snprintf(key, sizeof(key), "%s_truncated", name);
                json_kv_bool(w, key, has_truncated && truncated);
        }
}

void item_json(const Cmwq__ItemInfo *item, JsonWriter *w) {
        json_object_begin(w);
        json_kv_uint(w, "id", item->id);
        json_kv_string(w, "workqueue", item->workqueue);
        json_kv_string(w, "state", item_state_to_string(item->state));
        if (item->has_uid)
                json_kv_uint(w, "uid", item->uid);
        json_key(w, "argv");
        json_array_begin(w);
        for (size_t i = 0; i < item->n_argv; i++)
                json_string(w, item->argv[i]);
        json_array_end(w);
        if (item->key)
                json_kv_string(w, "key", item->key);
        if (item->has_cpu)
                json_kv_int(w, "cpu", item->cpu);
        if (item->has_exit_status && item->state != CMWQ__ITEM_STATE__STATE_INTERRUPTED)
                json_kv_int(w, "exit_status", item->exit_status);
        if (item->has_signal)
                json_kv_int(w, "signal", item->signal);
        if (item->has_timed_out)
                json_kv_bool(w, "timed_out", item->timed_out);
        if (item->error)
                json_kv_string(w, "error", item->error);
        if (item->has_cpu_usec)
                json_kv_uint(w, "cpu_usec", item->cpu_usec);
        if (item->has_cpu_intensive)
                json_kv_bool(w, "cpu_intensive", item->cpu_intensive);
        if (item->has_requeues)
                json_kv_uint(w, "requeues", item->requeues);
        if (item->has_interruptions)
                json_kv_uint(w, "interruptions", item->interruptions);
        if (item->has_queued_usec)
                json_kv_uint(w, "queued_usec", item->queued_usec);
        if (item->has_started_usec)
                json_kv_uint(w, "started_usec", item->started_usec);
        if (item->has_finished_usec)
                json_kv_uint(w, "finished_usec", item->finished_usec);
        item_json_output(w, "stdout", item->has_stdout_data, &item->stdout_data,
                         item->has_stdout_truncated, item->stdout_truncated);
        item_json_output(w, "stderr", item->has_stderr_data, &item->stderr_data,
                         item->has_stderr_truncated, item->stderr_truncated);
        json_object_end(w);
}

static const char *yes_no(bool has, bool b) {
        return !has ? "-" : b ? "yes" : "no";
}

int list_print(const Cmwq__ListReply *list, FILE *f) {
        static const TableColumn columns[] = {
                { "NAME", false },
                { "FLAGS", false },
                { "MAX_ACTIVE", true },
                { "PENDING", true },
                { "RUNNING", true },
                { "TOTAL", true },
                { "FROZEN", false },
                { "DRAINING", false },
                { "OWNER", false },
        };
        _cleanup_(table_freep) Table *t = NULL;
        int r;

        r = table_new(columns, sizeof(columns) / sizeof(columns[0]), &t);
        if (r < 0)
                return r;

        for (size_t i = 0; i < list->n_workqueues; i++) {
                const Cmwq__WorkqueueInfo *q = list->workqueues[i];
                char flags[128], user[64], owner[160];

                if (q->has_owner_uid)
                        format_user(user, sizeof(user), q->owner_uid);
                else
                        snprintf(user, sizeof(user), "-");
                /* Why it will go away on its own: it lives as long as the
                 * library connection that made it. */
                if (q->has_owner_pid)
                        snprintf(owner, sizeof(owner), "%s, %sconnection of pid %" PRIu32, user,
                                 q->has_owner_gone && q->owner_gone ? "closed " : "", q->owner_pid);
                else
                        snprintf(owner, sizeof(owner), "%s", user);

                if (table_add(t, q->name) < 0 ||
                    table_add(t, workqueue_flags_to_string(q->flags, flags, sizeof(flags))) < 0 ||
                    table_addf(t, "%" PRIu32, q->max_active) < 0 ||
                    (q->has_pending ? table_addf(t, "%" PRIu64, q->pending) : table_add(t, "-")) < 0 ||
                    (q->has_running ? table_addf(t, "%" PRIu64, q->running) : table_add(t, "-")) < 0 ||
                    (q->has_total ? table_addf(t, "%" PRIu64, q->total) : table_add(t, "-")) < 0 ||
                    table_add(t, yes_no(q->has_frozen, q->frozen)) < 0 ||
                    table_add(t, yes_no(q->has_draining, q->draining)) < 0 ||
                    table_add(t, owner) < 0)
                        return -ENOMEM;
        }
        table_print(t, f);
        return 0;
}

void list_json(const Cmwq__ListReply *list, JsonWriter *w) {
        json_array_begin(w);
        for (size_t i = 0; i < list->n_workqueues; i++) {
                const Cmwq__WorkqueueInfo *q = list->workqueues[i];

                json_object_begin(w);
                json_kv_string(w, "name", q->name);
                json_key(w, "flags");
                json_array_begin(w);
                for (unsigned b = 0; b < 32; b++) {
                        uint32_t bit = UINT32_C(1) << b;
                        const char *n;

                        if (!(q->flags & bit))
                                continue;
                        n = workqueue_flag_to_string(bit);
                        if (n)
                                json_string(w, n);
                        else {
                                char hex[16];

                                snprintf(hex, sizeof(hex), "0x%" PRIx32, bit);
                                json_string(w, hex);
                        }
                }
                json_array_end(w);
                json_kv_uint(w, "flags_value", q->flags);
                json_kv_uint(w, "max_active", q->max_active);
                if (q->has_owner_uid)
                        json_kv_uint(w, "owner_uid", q->owner_uid);
                if (q->has_owner_pid) {
                        json_kv_uint(w, "owner_pid", q->owner_pid);
                        json_kv_bool(w, "owner_gone", q->has_owner_gone && q->owner_gone);
                }
                if (q->has_on_interrupt)
                        json_kv_string(w, "on_interrupt",
                                       q->on_interrupt == CMWQ__INTERRUPT_POLICY__INTERRUPT_RERUN ? "rerun" : "drop");
                if (q->has_pending)
                        json_kv_uint(w, "pending", q->pending);
                if (q->has_running)
                        json_kv_uint(w, "running", q->running);
                if (q->has_total)
                        json_kv_uint(w, "total", q->total);
                json_kv_bool(w, "frozen", q->has_frozen && q->frozen);
                json_kv_bool(w, "draining", q->has_draining && q->draining);
                json_kv_bool(w, "builtin", q->has_builtin && q->builtin);
                json_object_end(w);
        }
        json_array_end(w);
}

static int table_add_opt_u32(Table *t, bool has, uint32_t v) {
        return has ? table_addf(t, "%" PRIu32, v) : table_add(t, "-");
}

int pools_print(const Cmwq__PoolsReply *pools, FILE *f) {
        static const TableColumn columns[] = {
                { "CPU", false },
                { "PRIO", false },
                { "WORKERS", true },
                { "RUNNING", true },
                { "IDLE", true },
                { "PENDING", true },
                { "BUSY", true },
                { "BLOCKED", true },
                { "CB-THREADS", true },
                { "CALLBACKS", true },
        };
        _cleanup_(table_freep) Table *t = NULL;
        int r;

        r = table_new(columns, sizeof(columns) / sizeof(columns[0]), &t);
        if (r < 0)
                return r;

        for (size_t i = 0; i < pools->n_pools; i++) {
                const Cmwq__PoolInfo *p = pools->pools[i];

                if ((p->cpu < 0 ? table_add(t, "unbound") : table_addf(t, "%" PRIi32, p->cpu)) < 0 ||
                    table_add(t, p->highpri ? "highpri" : "normal") < 0 ||
                    table_addf(t, "%" PRIu32, p->workers) < 0 ||
                    table_addf(t, "%" PRIu32, p->running) < 0 ||
                    table_addf(t, "%" PRIu32, p->idle) < 0 ||
                    table_addf(t, "%" PRIu64, p->pending) < 0 ||
                    table_add_opt_u32(t, p->has_busy, p->busy) < 0 ||
                    table_add_opt_u32(t, p->has_blocked, p->blocked) < 0 ||
                    table_add_opt_u32(t, p->has_callback_threads, p->callback_threads) < 0 ||
                    (p->has_callbacks ? table_addf(t, "%" PRIu64, p->callbacks) : table_add(t, "-")) < 0)
                        return -ENOMEM;
        }
        table_print(t, f);
        return 0;
}

void pools_json(const Cmwq__PoolsReply *pools, JsonWriter *w) {
        json_array_begin(w);
        for (size_t i = 0; i < pools->n_pools; i++) {
                const Cmwq__PoolInfo *p = pools->pools[i];

                json_object_begin(w);
                json_kv_int(w, "cpu", p->cpu);
                json_kv_bool(w, "unbound", p->cpu < 0);
                json_kv_bool(w, "highpri", p->highpri);
                json_kv_uint(w, "workers", p->workers);
                json_kv_uint(w, "running", p->running);
                json_kv_uint(w, "idle", p->idle);
                json_kv_uint(w, "pending", p->pending);
                if (p->has_busy)
                        json_kv_uint(w, "busy", p->busy);
                if (p->has_blocked)
                        json_kv_uint(w, "blocked", p->blocked);
                if (p->has_callback_threads)
                        json_kv_uint(w, "callback_threads", p->callback_threads);
                if (p->has_callbacks)
                        json_kv_uint(w, "callbacks", p->callbacks);
                if (p->has_started)
                        json_kv_uint(w, "started", p->started);
                if (p->has_sleeps)
                        json_kv_uint(w, "sleeps", p->sleeps);
                if (p->has_wakes)
                        json_kv_uint(w, "wakes", p->wakes);
                if (p->has_cm_wakeups)
                        json_kv_uint(w, "cm_wakeups", p->cm_wakeups);
                if (p->has_contended)
                        json_kv_uint(w, "contended", p->contended);
                json_object_end(w);
        }
        json_array_end(w);
}

static const Cmwq__WorkqueueInfo *list_find(const Cmwq__ListReply *list, const char *name) {
        if (!list)
                return NULL;
        for (size_t i = 0; i < list->n_workqueues; i++)
                if (strcmp(list->workqueues[i]->name, name) == 0)
                        return list->workqueues[i];
        return NULL;
}

int stats_print(const Cmwq__StatsReply *stats, const Cmwq__ListReply *list, FILE *f) {
        /* The kernel's tools/workqueue/wq_monitor.py columns. */
        static const TableColumn columns[] = {
                { "NAME", false },
                { "total", true },
                { "infl", true },
                { "CPUtime", true },
                { "CPUitsv", true },
                { "CMW/RPR", true },
                { "mayday", true },
                { "rescued", true },
                { "stalls", true },
        };
        _cleanup_(table_freep) Table *t = NULL;
        int r;

        r = table_new(columns, sizeof(columns) / sizeof(columns[0]), &t);
        if (r < 0)
                return r;

        for (size_t i = 0; i < stats->n_workqueues; i++) {
                const Cmwq__WorkqueueStats *s = stats->workqueues[i];
                const Cmwq__WorkqueueInfo *q = s->has_flags ? NULL : list_find(list, s->name);
                /* The queue's own flags, else the list's; without either,
                 * show every counter. */
                bool known = s->has_flags || q;
                uint32_t flags = s->has_flags ? s->flags : q ? q->flags : 0;
                bool unbound = known && (flags & (CMWQ__WORKQUEUE_FLAG__FLAG_UNBOUND | CMWQ__WORKQUEUE_FLAG__FLAG_ORDERED));
                bool rescuer = !known || (flags & CMWQ__WORKQUEUE_FLAG__FLAG_MEM_RECLAIM);

                if (table_add(t, s->name) < 0 ||
                    table_addf(t, "%" PRIu64, s->total) < 0 ||
                    table_addf(t, "%" PRIu64, s->in_flight) < 0 ||
                    table_addf(t, "%.3f", (double) s->cpu_usec / 1000000.0) < 0 ||
                    (unbound ? table_add(t, "-") : table_addf(t, "%" PRIu64, s->cpu_intensive)) < 0 ||
                    table_addf(t, "%" PRIu64, s->cm_wakeups) < 0 ||
                    table_addf(t, "%" PRIu64, s->mayday) < 0 ||
                    (rescuer ? table_addf(t, "%" PRIu64, s->rescued) : table_add(t, "-")) < 0 ||
                    (s->has_watchdog ? table_addf(t, "%" PRIu64, s->watchdog) : table_add(t, "-")) < 0)
                        return -ENOMEM;
        }
        table_print(t, f);
        return 0;
}

void stats_json(const Cmwq__StatsReply *stats, JsonWriter *w) {
        json_array_begin(w);
        for (size_t i = 0; i < stats->n_workqueues; i++) {
                const Cmwq__WorkqueueStats *s = stats->workqueues[i];

                json_object_begin(w);
                json_kv_string(w, "name", s->name);
                json_kv_uint(w, "total", s->total);
                json_kv_uint(w, "in_flight", s->in_flight);
                json_kv_uint(w, "cpu_usec", s->cpu_usec);
                json_kv_uint(w, "cpu_intensive", s->cpu_intensive);
                json_kv_uint(w, "cm_wakeups", s->cm_wakeups);
                json_kv_uint(w, "mayday", s->mayday);
                json_kv_uint(w, "rescued", s->rescued);
                if (s->has_requeued)
                        json_kv_uint(w, "requeued", s->requeued);
                if (s->has_failed)
                        json_kv_uint(w, "failed", s->failed);
                if (s->has_timed_out)
                        json_kv_uint(w, "timed_out", s->timed_out);
                if (s->has_watchdog)
                        json_kv_uint(w, "watchdog", s->watchdog);
                if (s->has_completed)
                        json_kv_uint(w, "completed", s->completed);
                if (s->has_owner_uid)
                        json_kv_uint(w, "owner_uid", s->owner_uid);
                json_object_end(w);
        }
        json_array_end(w);
}
