/* SPDX-License-Identifier: Apache-2.0 */
/* test_list.c - common/base/list.h against a model: random inserts (front, back, after a
 * node) and removals on a few lists at once, checked after every operation against plain
 * arrays of record ids, both ways round, with list_entry back to the records. A few
 * thousand operations per seed; milliseconds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "common/base/list.h"
#include "test_util.h"

#define N_REC 64
#define N_LISTS 3

typedef struct rec {
    int id;
    list_node link;
    int list; /* which list holds it, -1 none */
} rec;

typedef struct model {
    rec recs[N_REC];
    list_node heads[N_LISTS];
    int order[N_LISTS][N_REC]; /* the ids each list should hold, head first */
    int n[N_LISTS];
} model;

static void model_insert(model *m, int l, int at, int id)
{
    memmove(&m->order[l][at + 1], &m->order[l][at], (size_t)(m->n[l] - at) * sizeof(int));
    m->order[l][at] = id;
    m->n[l]++;
    m->recs[id].list = l;
}

static int model_index(const model *m, int l, int id)
{
    for (int i = 0; i < m->n[l]; i++)
        if (m->order[l][i] == id)
            return i;
    fail_msg("record %d is not in model list %d", id, l);
    return -1;
}

static void check(const model *m)
{
    for (int l = 0; l < N_LISTS; l++) {
        const list_node *h = &m->heads[l];
        assert_int_equal(list_empty(h), m->n[l] == 0);
        int i = 0;
        for (list_node *n = list_first(h); n; n = list_next(h, n), i++) {
            assert_true(i < m->n[l]);
            rec *r = list_entry(n, rec, link);
            assert_int_equal(r->id, m->order[l][i]);
            assert_int_equal(r->list, l);
            assert_true(list_linked(n));
        }
        assert_int_equal(i, m->n[l]);
        /* backward through the raw links, ending at the sentinel */
        i = m->n[l] - 1;
        for (list_node *n = list_last(h); n; n = n->prev == h ? NULL : n->prev, i--) {
            assert_true(i >= 0);
            assert_int_equal(list_entry(n, rec, link)->id, m->order[l][i]);
        }
        assert_int_equal(i, -1);
    }
    for (int id = 0; id < N_REC; id++)
        assert_int_equal(list_linked(&m->recs[id].link), m->recs[id].list >= 0);
}

static void random_operations_match_the_model(void **state)
{
    (void)state;
    static const uint64_t seeds[] = {1, 2, 42, 0xdeadbeef, 12345678901ull};
    for (size_t k = 0; k < sizeof seeds / sizeof *seeds; k++) {
        uint64_t rng = seeds[k];
        model *m = calloc(1, sizeof *m);
        assert_non_null(m);
        for (int l = 0; l < N_LISTS; l++)
            list_init(&m->heads[l]);
        for (int id = 0; id < N_REC; id++) {
            m->recs[id].id = id;
            m->recs[id].list = -1;
        }
        check(m); /* zeroed nodes are unlinked */
        for (int op = 0; op < 4000; op++) {
            int id = (int)(test_rng_next(&rng) % N_REC);
            rec *r = &m->recs[id];
            if (r->list >= 0) { /* remove it */
                int l = r->list, at = model_index(m, l, id);
                list_remove(&r->link);
                memmove(&m->order[l][at], &m->order[l][at + 1],
                        (size_t)(m->n[l] - at - 1) * sizeof(int));
                m->n[l]--;
                r->list = -1;
                assert_null(r->link.next);
                assert_null(r->link.prev);
            } else {
                int l = (int)(test_rng_next(&rng) % N_LISTS);
                int how = (int)(test_rng_next(&rng) % 3);
                if (how == 0) {
                    list_push_front(&m->heads[l], &r->link);
                    model_insert(m, l, 0, id);
                } else if (how == 1 || m->n[l] == 0) {
                    list_push_back(&m->heads[l], &r->link);
                    model_insert(m, l, m->n[l], id);
                } else { /* after a random member */
                    int at = (int)(test_rng_next(&rng) % (uint64_t)m->n[l]);
                    list_insert_after(&m->recs[m->order[l][at]].link, &r->link);
                    model_insert(m, l, at + 1, id);
                }
            }
            check(m);
        }
        free(m);
    }
}

static void removing_while_walking_with_next_taken_first(void **state)
{
    (void)state;
    rec recs[10] = {0};
    list_node head;
    list_init(&head);
    for (int i = 0; i < 10; i++) {
        recs[i].id = i;
        list_push_back(&head, &recs[i].link);
    }
    list_node *next;
    for (list_node *n = list_first(&head); n; n = next) {
        next = list_next(&head, n);
        if (list_entry(n, rec, link)->id % 2)
            list_remove(n);
    }
    int i = 0;
    for (list_node *n = list_first(&head); n; n = list_next(&head, n), i += 2)
        assert_int_equal(list_entry(n, rec, link)->id, i);
    assert_int_equal(i, 10);
    assert_null(list_entry((list_node *)NULL, rec, link));
    assert_null(list_next(&head, list_last(&head)));
    list_node empty;
    list_init(&empty);
    assert_null(list_first(&empty));
    assert_null(list_last(&empty));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_operations_match_the_model),
        cmocka_unit_test(removing_while_walking_with_next_taken_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
