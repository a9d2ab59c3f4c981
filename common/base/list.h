/* SPDX-License-Identifier: Apache-2.0 */
/* list.h - the one intrusive doubly linked list: a node embedded in each record, a
 * circular list closed by a sentinel node that the owner keeps as the list's head.
 *
 * A record joins a list by its own `list_node` (no allocation, O(1) insert and remove
 * anywhere); list_entry() goes back from the node to the record. The sentinel makes
 * insertion and removal branch-free: they never test for an empty list or an end. A node
 * whose links are NULL is in no list, so a zeroed record starts out unlinked and
 * list_remove() leaves its node that way.
 *
 * The walk functions return NULL past either end, so a loop reads
 *     for (list_node *n = list_first(&head); n; n = list_next(&head, n))
 * and removing the current node is safe when the next one was taken first.
 *
 * Header only; every call is O(1) and allocates nothing. Counts are the owner's to keep.
 */
#ifndef DERAS_BASE_LIST_H
#define DERAS_BASE_LIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct list_node {
    struct list_node *prev, *next;
} list_node;

/* The record that holds node `n` as its `member`; NULL for a NULL node. */
#define list_entry(n, type, member) ((type *)list_entry_at_((n), offsetof(type, member)))

static inline void *list_entry_at_(const list_node *n, size_t off)
{
    return n ? (void *)((char *)(uintptr_t)n - off) : NULL;
}

/* An empty list: the sentinel points at itself. */
static inline void list_init(list_node *head)
{
    head->prev = head->next = head;
}

static inline bool list_empty(const list_node *head)
{
    return head->next == head;
}

/* Is n in some list? (False for a zeroed or removed node.) */
static inline bool list_linked(const list_node *n)
{
    return n->next != NULL;
}

/* Link n (in no list) right after `pos`, a node of a list or its sentinel. */
static inline void list_insert_after(list_node *pos, list_node *n)
{
    n->prev = pos;
    n->next = pos->next;
    pos->next->prev = n;
    pos->next = n;
}

static inline void list_push_front(list_node *head, list_node *n)
{
    list_insert_after(head, n);
}

static inline void list_push_back(list_node *head, list_node *n)
{
    list_insert_after(head->prev, n);
}

/* Unlink n from its list; its links become NULL. */
static inline void list_remove(list_node *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = NULL;
}

/* The first (last) node, NULL if the list is empty. */
static inline list_node *list_first(const list_node *head)
{
    return head->next == head ? NULL : head->next;
}

static inline list_node *list_last(const list_node *head)
{
    return head->prev == head ? NULL : head->prev;
}

/* The node after n in the list `head`, NULL at the end. */
static inline list_node *list_next(const list_node *head, const list_node *n)
{
    return n->next == head ? NULL : n->next;
}

#endif
