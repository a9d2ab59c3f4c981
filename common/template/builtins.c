/* SPDX-License-Identifier: Apache-2.0 */
/* builtins.c - the name tables of builtins.h: which filters and tests Jinja2 defines
 * (jinja2/filters.py FILTERS, jinja2/tests.py TESTS), which of them are implemented here,
 * and which Python methods each value type has. */
#include "builtins.h"

#include "value.h"

#include <string.h>

static const struct {
    const char *name;
    bool ok;
} filters[N_FILTER_IDS] = {
    [F_ABS] = {"abs", true},         [F_ATTR] = {"attr", false},
    [F_BATCH] = {"batch", false},    [F_CAPITALIZE] = {"capitalize", true},
    [F_CENTER] = {"center", false},  [F_COUNT] = {"count", true},
    [F_D] = {"d", true},             [F_DEFAULT] = {"default", true},
    [F_DICTSORT] = {"dictsort", true}, [F_E] = {"e", true},
    [F_ESCAPE] = {"escape", true},   [F_FILESIZEFORMAT] = {"filesizeformat", false},
    [F_FIRST] = {"first", true},     [F_FLOAT] = {"float", true},
    [F_FORCEESCAPE] = {"forceescape", false}, [F_FORMAT] = {"format", false},
    [F_GROUPBY] = {"groupby", false}, [F_INDENT] = {"indent", true},
    [F_INT] = {"int", true},         [F_ITEMS] = {"items", true},
    [F_JOIN] = {"join", true},       [F_LAST] = {"last", true},
    [F_LENGTH] = {"length", true},   [F_LIST] = {"list", true},
    [F_LOWER] = {"lower", true},     [F_MAP] = {"map", true},
    [F_MAX] = {"max", true},         [F_MIN] = {"min", true},
    [F_PPRINT] = {"pprint", false},  [F_RANDOM] = {"random", false},
    [F_REJECT] = {"reject", true},   [F_REJECTATTR] = {"rejectattr", true},
    [F_REPLACE] = {"replace", true}, [F_REVERSE] = {"reverse", true},
    [F_ROUND] = {"round", false},    [F_SAFE] = {"safe", true},
    [F_SELECT] = {"select", true},   [F_SELECTATTR] = {"selectattr", true},
    [F_SLICE] = {"slice", false},    [F_SORT] = {"sort", true},
    [F_STRING] = {"string", true},   [F_STRIPTAGS] = {"striptags", false},
    [F_SUM] = {"sum", true},         [F_TITLE] = {"title", true},
    [F_TOJSON] = {"tojson", true},   [F_TRIM] = {"trim", true},
    [F_TRUNCATE] = {"truncate", false}, [F_UNIQUE] = {"unique", true},
    [F_UPPER] = {"upper", true},     [F_URLENCODE] = {"urlencode", false},
    [F_URLIZE] = {"urlize", false},  [F_WORDCOUNT] = {"wordcount", false},
    [F_WORDWRAP] = {"wordwrap", false}, [F_XMLATTR] = {"xmlattr", false},
};

static const struct {
    const char *name;
    int id;
} tests[] = {
    {"boolean", IS_BOOLEAN}, {"callable", IS_CALLABLE}, {"defined", IS_DEFINED},
    {"divisibleby", IS_DIVISIBLEBY}, {"eq", IS_EQ}, {"equalto", IS_EQ}, {"==", IS_EQ},
    {"escaped", IS_ESCAPED}, {"even", IS_EVEN}, {"false", IS_FALSE}, {"filter", IS_FILTER},
    {"float", IS_FLOAT}, {"ge", IS_GE}, {">=", IS_GE}, {"gt", IS_GT}, {"greaterthan", IS_GT},
    {">", IS_GT}, {"in", IS_IN}, {"integer", IS_INTEGER}, {"iterable", IS_ITERABLE},
    {"le", IS_LE}, {"<=", IS_LE}, {"lower", IS_LOWER}, {"lt", IS_LT}, {"lessthan", IS_LT},
    {"<", IS_LT}, {"mapping", IS_MAPPING}, {"ne", IS_NE}, {"!=", IS_NE}, {"none", IS_NONE},
    {"number", IS_NUMBER}, {"odd", IS_ODD}, {"sameas", IS_SAMEAS}, {"sequence", IS_SEQUENCE},
    {"string", IS_STRING}, {"test", IS_TEST}, {"true", IS_TRUE}, {"undefined", IS_UNDEFINED},
    {"upper", IS_UPPER},
};

int filter_find(const char *name)
{
    for (int i = 0; i < N_FILTER_IDS; i++)
        if (strcmp(filters[i].name, name) == 0)
            return i;
    return -1;
}

bool filter_supported(int id) { return id >= 0 && id < N_FILTER_IDS && filters[id].ok; }
const char *filter_name(int id) { return id >= 0 && id < N_FILTER_IDS ? filters[id].name : "?"; }

int test_find(const char *name)
{
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (strcmp(tests[i].name, name) == 0)
            return tests[i].id;
    return -1;
}

bool test_supported(int id) { return id >= 0 && id < N_TEST_IDS; }

/* Which types have each method: S str, D dict, L list, T tuple, P loop; lower case marks
 * a method that mutates (the sandbox's SecurityError). */
static const struct {
    const char *name;
    const char *types;
} methods[N_METHOD_IDS] = {
    [M_STRIP] = {"strip", "S"},         [M_LSTRIP] = {"lstrip", "S"},
    [M_RSTRIP] = {"rstrip", "S"},       [M_SPLIT] = {"split", "S"},
    [M_RSPLIT] = {"rsplit", "S"},       [M_STARTSWITH] = {"startswith", "S"},
    [M_ENDSWITH] = {"endswith", "S"},   [M_REPLACE] = {"replace", "S"},
    [M_UPPER] = {"upper", "S"},         [M_LOWER] = {"lower", "S"},
    [M_TITLE] = {"title", "S"},         [M_CAPITALIZE] = {"capitalize", "S"},
    [M_FIND] = {"find", "S"},           [M_RFIND] = {"rfind", "S"},
    [M_COUNT] = {"count", "SLT"},       [M_FORMAT] = {"format", "S"},
    [M_JOIN] = {"join", "S"},           [M_SPLITLINES] = {"splitlines", "S"},
    [M_ISDIGIT] = {"isdigit", "S"},     [M_ISALPHA] = {"isalpha", "S"},
    [M_ISSPACE] = {"isspace", "S"},     [M_ISUPPER] = {"isupper", "S"},
    [M_ISLOWER] = {"islower", "S"},     [M_REMOVEPREFIX] = {"removeprefix", "S"},
    [M_REMOVESUFFIX] = {"removesuffix", "S"},
    [M_GET] = {"get", "D"},             [M_ITEMS] = {"items", "D"},
    [M_KEYS] = {"keys", "D"},           [M_VALUES] = {"values", "D"},
    [M_COPY] = {"copy", "DL"},          [M_INDEX] = {"index", "SLT"},
    [M_APPEND] = {"append", "l"},       [M_EXTEND] = {"extend", "l"},
    [M_INSERT] = {"insert", "l"},       [M_POP] = {"pop", "ld"},
    [M_REMOVE] = {"remove", "l"},       [M_REVERSE] = {"reverse", "l"},
    [M_SORT] = {"sort", "l"},           [M_CLEAR] = {"clear", "ld"},
    [M_UPDATE] = {"update", "d"},       [M_SETDEFAULT] = {"setdefault", "d"},
    [M_POPITEM] = {"popitem", "d"},     [M_CYCLE] = {"cycle", "P"},
};

int method_find(const char *name)
{
    for (int i = 0; i < N_METHOD_IDS; i++)
        if (strcmp(methods[i].name, name) == 0)
            return i;
    return -1;
}

const char *method_name(int id) { return id >= 0 && id < N_METHOD_IDS ? methods[id].name : "?"; }

bool method_of(int id, int type, bool *unsafe)
{
    char want;
    switch (type) {
    case TV_STR: want = 'S'; break;
    case TV_DICT: want = 'D'; break;
    case TV_LIST: want = 'L'; break;
    case TV_TUPLE: want = 'T'; break;
    case TV_LOOP: want = 'P'; break;
    default: return false;
    }
    for (const char *t = methods[id].types; *t; t++) {
        if (*t == want) {
            *unsafe = false;
            return true;
        }
        if (*t == want + 32) {
            *unsafe = true;
            return true;
        }
    }
    return false;
}

static const struct {
    const char *name;
    bool ok;
} globals[N_GLOBAL_IDS] = {
    [G_RANGE] = {"range", true},
    [G_NAMESPACE] = {"namespace", true},
    [G_DICT] = {"dict", true},
    [G_RAISE_EXCEPTION] = {"raise_exception", true},
    [G_STRFTIME_NOW] = {"strftime_now", true},
    [G_LIPSUM] = {"lipsum", false},
    [G_CYCLER] = {"cycler", false},
    [G_JOINER] = {"joiner", false},
};

int global_find(const char *name, bool *supported)
{
    for (int i = 0; i < N_GLOBAL_IDS; i++)
        if (strcmp(globals[i].name, name) == 0) {
            *supported = globals[i].ok;
            return i;
        }
    return -1;
}

const char *global_name(int id) { return id >= 0 && id < N_GLOBAL_IDS ? globals[id].name : "?"; }
