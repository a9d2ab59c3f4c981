/* SPDX-License-Identifier: Apache-2.0 */
/* builtins.h - the names a template can call: Jinja2's filters and tests, the Python str,
 * dict and list methods, and the globals of transformers' environment.
 *
 * Every filter and test Jinja2 defines has an id here, implemented or not, because the
 * two cases differ: a name Jinja2 does not know fails as Jinja2 fails (at compile time,
 * or when reached inside an `if`), while a name Jinja2 knows and this interpreter does not
 * implement refuses the template at compile time. Lookups are O(number of names).
 */
#ifndef DERAS_TEMPLATE_BUILTINS_H
#define DERAS_TEMPLATE_BUILTINS_H

#include <stdbool.h>

enum filter_id {
    F_ABS, F_ATTR, F_BATCH, F_CAPITALIZE, F_CENTER, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E,
    F_ESCAPE, F_FILESIZEFORMAT, F_FIRST, F_FLOAT, F_FORCEESCAPE, F_FORMAT, F_GROUPBY,
    F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX,
    F_MIN, F_PPRINT, F_RANDOM, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND,
    F_SAFE, F_SELECT, F_SELECTATTR, F_SLICE, F_SORT, F_STRING, F_STRIPTAGS, F_SUM, F_TITLE,
    F_TOJSON, F_TRIM, F_TRUNCATE, F_UNIQUE, F_UPPER, F_URLENCODE, F_URLIZE, F_WORDCOUNT,
    F_WORDWRAP, F_XMLATTR, N_FILTER_IDS
};

enum test_id {
    IS_BOOLEAN, IS_CALLABLE, IS_DEFINED, IS_DIVISIBLEBY, IS_EQ, IS_ESCAPED, IS_EVEN,
    IS_FALSE, IS_FILTER, IS_FLOAT, IS_GE, IS_GT, IS_IN, IS_INTEGER, IS_ITERABLE, IS_LE,
    IS_LOWER, IS_LT, IS_MAPPING, IS_NE, IS_NONE, IS_NUMBER, IS_ODD, IS_SAMEAS, IS_SEQUENCE,
    IS_STRING, IS_TEST, IS_TRUE, IS_UNDEFINED, IS_UPPER, N_TEST_IDS
};

enum method_id {
    /* str */
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_STARTSWITH, M_ENDSWITH, M_REPLACE,
    M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_FIND, M_RFIND, M_COUNT, M_FORMAT, M_JOIN,
    M_SPLITLINES, M_ISDIGIT, M_ISALPHA, M_ISSPACE, M_ISUPPER, M_ISLOWER, M_REMOVEPREFIX,
    M_REMOVESUFFIX,
    /* dict (and copy for lists) */
    M_GET, M_ITEMS, M_KEYS, M_VALUES, M_COPY,
    /* list, tuple */
    M_INDEX,
    /* methods that mutate: the immutable sandbox refuses them (SecurityError) */
    M_APPEND, M_EXTEND, M_INSERT, M_POP, M_REMOVE, M_REVERSE, M_SORT, M_CLEAR, M_UPDATE,
    M_SETDEFAULT, M_POPITEM,
    /* loop */
    M_CYCLE,
    N_METHOD_IDS
};

enum global_id { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE_EXCEPTION, G_STRFTIME_NOW, G_LIPSUM,
                 G_CYCLER, G_JOINER, N_GLOBAL_IDS };

/* Id of a filter / test Jinja2 knows, or -1. */
int filter_find(const char *name);
int test_find(const char *name);
bool filter_supported(int id);
bool test_supported(int id);
const char *filter_name(int id);
/* Id of a method any type here has, or -1 (refused at compile time). */
int method_find(const char *name);
/* Whether `id` is a method of values of type tv_type (value.h); *unsafe when calling it
 * is what the immutable sandbox forbids. */
bool method_of(int id, int tv_type, bool *unsafe);
const char *method_name(int id);
/* Id of a global function, or -1; *supported false for lipsum, cycler and joiner. */
int global_find(const char *name, bool *supported);
const char *global_name(int id);

#endif
