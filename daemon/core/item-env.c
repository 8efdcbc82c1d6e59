/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Shared environments, see core/item-env.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/item-env.h"
#include "util.h"

struct item_env {
        struct item_env *hash_next;
        uint64_t hash;
        uint64_t id;                    /* in the durable log */
        unsigned refs;
        uint32_t hashed : 1;            /* in the table; false: private */
        /* Its Environment record was appended in this epoch of the table's
         * (item_env_table_forget_logged()). */
        uint32_t logged_epoch : 31;
        size_t envc;
        size_t bytes;                   /* its strings with their NULs, packed after envp */
        char *envp[];                   /* envc pointers and NULL, then the strings */
};

static char *item_env_empty[] = { NULL };

void item_env_table_init(struct item_env_table *t) {
        *t = (struct item_env_table) { .log_epoch = 1 };
        /* Keyed so that a client cannot aim strings at one chain; the
         * chain cap holds if this fails. */
        if (getrandom(&t->seed, sizeof(t->seed), GRND_NONBLOCK) != sizeof(t->seed))
                t->seed = (uint64_t) time(NULL) * 0x9e3779b97f4a7c15ull;
}

void item_env_table_done(struct item_env_table *t) {
        free(t->buckets);
        *t = (struct item_env_table) {};
}

/* FNV-1a over the strings and their NULs, from the seed, then mixed so
 * that the low bits (the bucket) depend on every byte. */
static uint64_t item_env_hash(const struct item_env_table *t, char *const *envp, size_t envc, size_t *bytes) {
        uint64_t h = 0xcbf29ce484222325ull ^ t->seed;
        size_t n = 0;

        for (size_t k = 0; k < envc; k++) {
                const unsigned char *s = (const unsigned char *) envp[k];

                do {
                        h = (h ^ *s) * 0x100000001b3ull;
                        n++;
                } while (*s++);
        }
        *bytes = n;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        return h;
}

static bool item_env_equal(const struct item_env *e, uint64_t hash, char *const *envp, size_t envc,
                           size_t bytes) {
        if (e->hash != hash || e->envc != envc || e->bytes != bytes)
                return false;
        for (size_t k = 0; k < envc; k++)
                if (strcmp(e->envp[k], envp[k]) != 0)
                        return false;
        return true;
}

static void item_env_table_grow(struct item_env_table *t) {
        size_t n = t->n_buckets ? t->n_buckets * 2 : 64;
        struct item_env **b = calloc(n, sizeof(*b));

        if (!b)
                return;         /* longer chains; the cap still holds */
        for (size_t k = 0; k < t->n_buckets; k++)
                while (t->buckets[k]) {
                        struct item_env *e = t->buckets[k];

                        t->buckets[k] = e->hash_next;
                        e->hash_next = b[e->hash & (n - 1)];
                        b[e->hash & (n - 1)] = e;
                }
        free(t->buckets);
        t->buckets = b;
        t->n_buckets = n;
}

static struct item_env *item_env_make(uint64_t hash, char *const *envp, size_t envc, size_t bytes) {
        struct item_env *e = malloc(sizeof(*e) + (envc + 1) * sizeof(char *) + bytes);
        char *p;

        if (!e)
                return NULL;
        *e = (struct item_env) { .hash = hash, .refs = 1, .envc = envc, .bytes = bytes };
        p = (char *) (e->envp + envc + 1);
        for (size_t k = 0; k < envc; k++)
                p = stpcpy(e->envp[k] = p, envp[k]) + 1;
        e->envp[envc] = NULL;
        return e;
}

int item_env_get(struct item_env_table *t, char *const *envp, size_t envc, struct item_env **ret) {
        struct item_env *e, **chain = NULL;
        size_t bytes, len = 0;
        uint64_t hash;

        if (envc == 0) {
                *ret = NULL;
                return 0;
        }
        hash = item_env_hash(t, envp, envc, &bytes);
        if (t->n >= t->n_buckets)
                item_env_table_grow(t);
        if (t->n_buckets > 0) {
                chain = &t->buckets[hash & (t->n_buckets - 1)];
                for (e = *chain; e; e = e->hash_next, len++)
                        if (item_env_equal(e, hash, envp, envc, bytes)) {
                                e->refs++;
                                *ret = e;
                                return 0;
                        }
        }
        e = item_env_make(hash, envp, envc, bytes);
        if (!e)
                return -ENOMEM;
        e->id = ++t->last_id;
        if (chain && len < ITEM_ENV_CHAIN_MAX) {
                e->hashed = true;
                e->hash_next = *chain;
                *chain = e;
                t->n++;
        }
        *ret = e;
        return 0;
}

struct item_env *item_env_ref(struct item_env *e) {
        if (e)
                e->refs++;
        return e;
}

void item_env_put(struct item_env_table *t, struct item_env *e) {
        if (!e || --e->refs > 0)
                return;
        if (e->hashed) {
                for (struct item_env **p = &t->buckets[e->hash & (t->n_buckets - 1)]; *p; p = &(*p)->hash_next)
                        if (*p == e) {
                                *p = e->hash_next;
                                break;
                        }
                t->n--;
        }
        free(e);
}

uint64_t item_env_id(const struct item_env *e) {
        return e->id;
}

bool item_env_logged(const struct item_env_table *t, const struct item_env *e) {
        return e->logged_epoch == t->log_epoch;
}

void item_env_set_logged(const struct item_env_table *t, struct item_env *e) {
        e->logged_epoch = t->log_epoch;
}

void item_env_table_forget_logged(struct item_env_table *t) {
        /* 2^31 compactions: never wraps. */
        t->log_epoch = (t->log_epoch + 1) & 0x7fffffffu;
        if (t->log_epoch == 0)
                t->log_epoch = 1;
}

bool item_env_in_table(const struct item_env *e) {
        return e->hashed;
}

void item_env_table_reserve_ids(struct item_env_table *t, uint64_t id) {
        if (t->last_id < id)
                t->last_id = id;
}

int item_env_table_foreach(struct item_env_table *t, int (*fn)(struct item_env *e, void *userdata),
                           void *userdata) {
        for (size_t k = 0; k < t->n_buckets; k++)
                for (struct item_env *e = t->buckets[k]; e; e = e->hash_next) {
                        int r = fn(e, userdata);

                        if (r < 0)
                                return r;
                }
        return 0;
}

char **item_env_strv(struct item_env *e) {
        return e ? e->envp : item_env_empty;
}

size_t item_env_bytes(const struct item_env *e) {
        return e ? e->bytes : 0;
}
