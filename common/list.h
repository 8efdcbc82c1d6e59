/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A circular doubly linked list with an embedded head, in the style of the
 * kernel's <linux/list.h>.  Nodes are embedded in their owner and found again
 * with container_of(). */

#include <stdbool.h>
#include <stddef.h>

#ifndef container_of
#define container_of(ptr, type, member) \
        ((type *) ((char *) (ptr) - offsetof(type, member)))
#endif

struct list_head {
        struct list_head *next, *prev;
};

#define LIST_HEAD_INIT(name) { &(name), &(name) }

static inline void list_init(struct list_head *h) {
        h->next = h->prev = h;
}

static inline bool list_empty(const struct list_head *h) {
        return h->next == h;
}

/* A node that was list_init()ed or list_del_init()ed is on no list. */
static inline bool list_linked(const struct list_head *n) {
        return n->next != n;
}

static inline void list__insert(struct list_head *n, struct list_head *prev, struct list_head *next) {
        next->prev = n;
        n->next = next;
        n->prev = prev;
        prev->next = n;
}

static inline void list_add(struct list_head *n, struct list_head *h) {
        list__insert(n, h, h->next);
}

static inline void list_add_tail(struct list_head *n, struct list_head *h) {
        list__insert(n, h->prev, h);
}

static inline void list_del_init(struct list_head *n) {
        n->prev->next = n->next;
        n->next->prev = n->prev;
        list_init(n);
}

static inline void list_move_tail(struct list_head *n, struct list_head *h) {
        list_del_init(n);
        list_add_tail(n, h);
}

#define list_entry(ptr, type, member) container_of(ptr, type, member)
#define list_first_entry(h, type, member) list_entry((h)->next, type, member)

#define list_for_each_entry(pos, h, member)                                   \
        for (pos = list_entry((h)->next, __typeof__(*pos), member);           \
             &pos->member != (h);                                             \
             pos = list_entry(pos->member.next, __typeof__(*pos), member))

#define list_for_each_entry_safe(pos, n, h, member)                           \
        for (pos = list_entry((h)->next, __typeof__(*pos), member),           \
             n = list_entry(pos->member.next, __typeof__(*pos), member);      \
             &pos->member != (h);                                             \
             pos = n, n = list_entry(n->member.next, __typeof__(*n), member))

static inline size_t list_count(const struct list_head *h) {
        size_t n = 0;
        for (const struct list_head *p = h->next; p != h; p = p->next)
                n++;
        return n;
}
