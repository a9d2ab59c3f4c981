/* SPDX-License-Identifier: Apache-2.0 */
/* ast.c - the arena and the symbol table of a compiled template (see ast.h).
 *
 * The arena hands out 16-aligned zeroed blocks from 64 KiB chunks (bigger requests get a
 * chunk of their own); nothing is freed before the template is. The symbol table is an
 * array of names with an open-addressing index (FNV-1a), so interning is O(1) on average
 * whatever the number of distinct names.
 */
#include "ast.h"

#include <stdlib.h>
#include <string.h>

struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

#define CHUNK (64 * 1024)

void *arena_alloc(struct arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK ? n : CHUNK;
        c = calloc(1, sizeof *c + cap);
        if (!c)
            return NULL;
        c->cap = cap;
        if (a->head && n > CHUNK) { /* keep filling the current chunk afterwards */
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    a->used_total += n;
    return p;
}

char *arena_strdup(struct arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

void arena_free(struct arena *a)
{
    struct arena_chunk *c = a->head;
    while (c) {
        struct arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    *a = (struct arena){0};
}

static uint32_t fnv(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The index lives after the names: idx[cap * 2] of symbol + 1, 0 = empty. */
static int *sym_index(const symtab *st) { return (int *)(st->names + st->cap); }

static int sym_slot(const symtab *st, const char *name, size_t n)
{
    size_t mask = (size_t)st->cap * 2 - 1;
    const int *idx = sym_index(st);
    for (size_t i = fnv(name, n) & mask;; i = (i + 1) & mask) {
        int s = idx[i];
        if (s == 0)
            return -(int)i - 1;
        const char *have = st->names[s - 1];
        if (strncmp(have, name, n) == 0 && have[n] == 0)
            return s - 1;
    }
}

int sym_intern(struct arena *a, symtab *st, const char *name, size_t n)
{
    if (st->cap) {
        int s = sym_slot(st, name, n);
        if (s >= 0)
            return s;
    }
    if (st->n == st->cap) {
        int cap = st->cap ? st->cap * 2 : 64;
        const char **names = calloc((size_t)cap, sizeof *names + 2 * sizeof(int));
        if (!names)
            return -1;
        if (st->n)
            memcpy(names, st->names, (size_t)st->n * sizeof *names);
        free(st->names);
        st->names = names;
        st->cap = cap;
        int *idx = sym_index(st);
        size_t mask = (size_t)cap * 2 - 1;
        for (int i = 0; i < st->n; i++) {
            size_t j = fnv(names[i], strlen(names[i])) & mask;
            while (idx[j])
                j = (j + 1) & mask;
            idx[j] = i + 1;
        }
    }
    char *copy = arena_strdup(a, name, n);
    if (!copy)
        return -1;
    int slot = -sym_slot(st, name, n) - 1;
    st->names[st->n] = copy;
    sym_index(st)[slot] = st->n + 1;
    return st->n++;
}

int sym_find(const symtab *st, const char *name)
{
    if (!st->cap)
        return -1;
    int s = sym_slot(st, name, strlen(name));
    return s >= 0 ? s : -1;
}

void sym_free(symtab *st)
{
    free(st->names);
    *st = (symtab){0};
}
