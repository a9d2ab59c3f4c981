/* SPDX-License-Identifier: Apache-2.0 */
/* conn_guard.c - the connection cap (see conn_guard.h): an fd-indexed table and a doubly
 * linked list of the unproven connections, oldest first. */
#include "router/conn_guard.h"

#include <stdlib.h>

#include "common/base/status.h"

enum { FREE = 0, UNPROVEN, PROVEN, NAMED };

typedef struct slot {
    double t;          /* opened at */
    int prev, next;    /* the unproven list, by fd; -1 ends */
    uint8_t state;
} slot;

struct conn_guard {
    int max, fd_cap;
    slot *s;
    int head, tail;    /* oldest and newest unproven */
    int open, unproven, named;
    uint64_t evicted, expired;
};

int conn_guard_new(int max, int fd_cap, conn_guard_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "conn_guard_new: NULL out");
    *out = NULL;
    if (max < 1 || fd_cap < 1)
        return deras_fail(DERAS_EINVAL, "conn_guard_new: max %d and fd_cap %d must be positive",
                          max, fd_cap);
    conn_guard_t *g = calloc(1, sizeof *g);
    if (!g || !(g->s = calloc((size_t)fd_cap, sizeof *g->s))) {
        free(g);
        return deras_fail(DERAS_ENOMEM, "conn_guard_new: out of memory for %d descriptors",
                          fd_cap);
    }
    g->max = max;
    g->fd_cap = fd_cap;
    g->head = g->tail = -1;
    *out = g;
    return DERAS_OK;
}

void conn_guard_destroy(conn_guard_t **gp)
{
    if (!gp || !*gp)
        return;
    free((*gp)->s);
    free(*gp);
    *gp = NULL;
}

static void unlink_unproven(conn_guard_t *g, int fd)
{
    slot *x = &g->s[fd];
    if (x->prev >= 0)
        g->s[x->prev].next = x->next;
    else
        g->head = x->next;
    if (x->next >= 0)
        g->s[x->next].prev = x->prev;
    else
        g->tail = x->prev;
    g->unproven--;
}

/* Name fd for shutdown: out of the list, counted apart until it closes. */
static int name(conn_guard_t *g, int fd)
{
    if (g->s[fd].state == UNPROVEN)
        unlink_unproven(g, fd);
    g->s[fd].state = NAMED;
    g->named++;
    return fd;
}

static bool valid(const conn_guard_t *g, int fd)
{
    return fd >= 0 && fd < g->fd_cap;
}

int conn_guard_open(conn_guard_t *g, int fd, double now)
{
    if (!valid(g, fd))
        return fd;
    slot *x = &g->s[fd];
    if (x->state != FREE) /* a close we never heard of: forget the old connection */
        conn_guard_closed(g, fd);
    *x = (slot){.t = now, .prev = g->tail, .next = -1, .state = UNPROVEN};
    if (g->tail >= 0)
        g->s[g->tail].next = fd;
    else
        g->head = fd;
    g->tail = fd;
    g->open++;
    g->unproven++;
    if (g->open - g->named <= g->max)
        return -1;
    g->evicted++;
    return name(g, g->head); /* never empty: fd itself is in the list */
}

void conn_guard_proven(conn_guard_t *g, int fd)
{
    if (!valid(g, fd) || g->s[fd].state != UNPROVEN)
        return;
    unlink_unproven(g, fd);
    g->s[fd].state = PROVEN;
}

void conn_guard_closed(conn_guard_t *g, int fd)
{
    if (!valid(g, fd) || g->s[fd].state == FREE)
        return;
    if (g->s[fd].state == UNPROVEN)
        unlink_unproven(g, fd);
    else if (g->s[fd].state == NAMED)
        g->named--;
    g->s[fd].state = FREE;
    g->open--;
}

int conn_guard_expired(conn_guard_t *g, double now, double timeout)
{
    if (g->head < 0 || now - g->s[g->head].t < timeout)
        return -1;
    g->expired++;
    return name(g, g->head);
}

bool conn_guard_named(const conn_guard_t *g, int fd)
{
    return valid(g, fd) && g->s[fd].state == NAMED;
}

void conn_guard_get_stats(const conn_guard_t *g, conn_guard_stats *s)
{
    *s = (conn_guard_stats){.open = g->open, .unproven = g->unproven, .evicted = g->evicted,
                            .expired = g->expired};
}
