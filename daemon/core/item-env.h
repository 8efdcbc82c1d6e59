/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Environments shared by the items that carry the same one.
 *
 * `cmwqctl submit` sends the submitter's whole environment with every item
 * (1.5-4 KiB from a login shell), and a script that queues a million items
 * sends the same one a million times.  Kept once per item it was most of an
 * item's memory; kept once per distinct environment it costs a pointer.
 *
 * An environment is immutable once made and counted by reference; the
 * table finds it by content.  A chain is never walked further than
 * ITEM_ENV_CHAIN_MAX entries, whatever the hash does with a client's
 * strings: a new environment that finds its chain that long is made
 * private (not in the table, one reference).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ITEM_ENV_CHAIN_MAX 8

struct item_env;

struct item_env_table {
        struct item_env **buckets;
        size_t n_buckets;               /* a power of two, or 0 before the first */
        size_t n;                       /* environments in the table */
        uint64_t seed;
        uint64_t last_id;               /* the last id given (item_env_id()) */
        uint32_t log_epoch;             /* item_env_logged(); never 0 */
};

void item_env_table_init(struct item_env_table *t);
/* Every environment must have been put back. */
void item_env_table_done(struct item_env_table *t);

/* A reference to an environment equal to @envp[0..@envc), in the table or
 * made (and then entered); NULL in *@ret for an empty one.  -ENOMEM. */
int item_env_get(struct item_env_table *t, char *const *envp, size_t envc, struct item_env **ret);
/* Another reference to @e (may be NULL); returns it. */
struct item_env *item_env_ref(struct item_env *e);
/* Drops a reference from item_env_get(); the last one frees it.  NULL is
 * allowed. */
void item_env_put(struct item_env_table *t, struct item_env *e);

/* Its id in the durable log (an Environment record): given when it is
 * made, from 1 up, never given twice by one table. */
uint64_t item_env_id(const struct item_env *e);
/* Whether its Environment record was appended to the log (since the last
 * item_env_table_forget_logged()); set by the core's store code once it is. */
bool item_env_logged(const struct item_env_table *t, const struct item_env *e);
void item_env_set_logged(const struct item_env_table *t, struct item_env *e);
/* No environment counts as logged any more: a compaction keeps only the
 * Environment records that its items name. */
void item_env_table_forget_logged(struct item_env_table *t);
/* In the table, so that a snapshot writes it (item_env_table_foreach());
 * a private one is not. */
bool item_env_in_table(const struct item_env *e);
/* Ids up to @id are taken (by the log being read back). */
void item_env_table_reserve_ids(struct item_env_table *t, uint64_t id);
/* Calls @fn for every environment in the table (not the private ones);
 * stops at and returns the first negative return. */
int item_env_table_foreach(struct item_env_table *t, int (*fn)(struct item_env *e, void *userdata),
                           void *userdata);

/* Its NULL-terminated strings; an empty list for NULL. */
char **item_env_strv(struct item_env *e);
/* The bytes of its strings with their NULs, as a copy per item would hold. */
size_t item_env_bytes(const struct item_env *e);
