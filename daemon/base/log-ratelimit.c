/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <event2/event.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/log-ratelimit.h"
#include "base/log.h"
#include "util.h"

struct log_ratelimit_slot {
        bool used;
        bool logged;                    /* a line went out at since_usec */
        uint64_t key;
        uint64_t since_usec;            /* CLOCK_MONOTONIC: the interval began */
        uint64_t suppressed;            /* messages counted, not logged, since then */
        int level;                      /* of the last one counted */
        char last[256];                 /* the last one counted */
};

struct log_ratelimit {
        uint64_t interval_usec;
        struct event *timer;            /* armed while some slot has a count */
        struct log_ratelimit_slot slots[LOG_RATELIMIT_KEYS];
};

static void log_ratelimit_report(struct log_ratelimit *l, struct log_ratelimit_slot *s) {
        if (s->suppressed == 0)
                return;
        log_full_errno(s->level, 0, "Suppressed %" PRIu64 " more like this in the last %" PRIu64 " s: %s",
                       s->suppressed, (l->interval_usec + USEC_PER_SEC - 1) / USEC_PER_SEC, s->last);
        s->suppressed = 0;
}

static void log_ratelimit_arm(struct log_ratelimit *l, uint64_t now) {
        uint64_t first = UINT64_MAX;

        for (size_t k = 0; k < LOG_RATELIMIT_KEYS; k++)
                if (l->slots[k].used && l->slots[k].suppressed > 0 && l->slots[k].since_usec < first)
                        first = l->slots[k].since_usec;
        if (first == UINT64_MAX) {
                evtimer_del(l->timer);
                return;
        }
        first += l->interval_usec;
        struct timeval tv = timeval_from_usec(first > now ? first - now : 0);
        evtimer_add(l->timer, &tv);
}

static void log_ratelimit_timer(evutil_socket_t fd, short what, void *userdata) {
        struct log_ratelimit *l = userdata;
        uint64_t now = now_usec(CLOCK_MONOTONIC);

        for (size_t k = 0; k < LOG_RATELIMIT_KEYS; k++) {
                struct log_ratelimit_slot *s = &l->slots[k];

                if (!s->used || now < s->since_usec + l->interval_usec)
                        continue;
                if (s->suppressed == 0) {
                        s->used = false;        /* quiet for a whole interval */
                        continue;
                }
                /* The count goes out, and a new interval begins: a flood
                 * that goes on costs one line per interval. */
                log_ratelimit_report(l, s);
                s->since_usec = now;
        }
        log_ratelimit_arm(l, now);
}

int log_ratelimit_new(struct event_base *base, uint64_t interval_usec, struct log_ratelimit **ret) {
        struct log_ratelimit *l = calloc(1, sizeof(*l));

        if (!l)
                return -ENOMEM;
        l->interval_usec = interval_usec;
        l->timer = evtimer_new(base, log_ratelimit_timer, l);
        if (!l->timer) {
                free(l);
                return -ENOMEM;
        }
        *ret = l;
        return 0;
}

struct log_ratelimit *log_ratelimit_free(struct log_ratelimit *l) {
        if (!l)
                return NULL;
        for (size_t k = 0; k < LOG_RATELIMIT_KEYS; k++)
                if (l->slots[k].used)
                        log_ratelimit_report(l, &l->slots[k]);
        event_free(l->timer);
        free(l);
        return NULL;
}

static struct log_ratelimit_slot *log_ratelimit_slot(struct log_ratelimit *l, uint64_t key, uint64_t now) {
        struct log_ratelimit_slot *s, *oldest = NULL;

        for (size_t k = 0; k < LOG_RATELIMIT_KEYS; k++) {
                s = &l->slots[k];
                if (s->used && s->key == key)
                        return s;
        }
        for (size_t k = 0; k < LOG_RATELIMIT_KEYS; k++) {
                s = &l->slots[k];
                if (!s->used || now >= s->since_usec + l->interval_usec) {
                        oldest = s;
                        break;
                }
                if (!oldest || s->since_usec < oldest->since_usec)
                        oldest = s;
        }
        if (oldest->used)
                log_ratelimit_report(l, oldest);
        *oldest = (struct log_ratelimit_slot) { .used = true, .key = key, .since_usec = now };
        return oldest;
}

bool log_ratelimit_log(struct log_ratelimit *l, uint64_t key, int level, const char *fmt, ...) {
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        struct log_ratelimit_slot *s = log_ratelimit_slot(l, key, now);
        va_list ap;

        if (!s->logged || now >= s->since_usec + l->interval_usec) {
                char line[256];

                log_ratelimit_report(l, s);
                s->logged = true;
                s->since_usec = now;
                va_start(ap, fmt);
                vsnprintf(line, sizeof(line), fmt, ap);
                va_end(ap);
                log_full_errno(level, 0, "%s", line);
                log_ratelimit_arm(l, now);
                return true;
        }
        s->suppressed++;
        s->level = level;
        va_start(ap, fmt);
        vsnprintf(s->last, sizeof(s->last), fmt, ap);
        va_end(ap);
        if (s->suppressed == 1)
                log_ratelimit_arm(l, now);
        return false;
}
