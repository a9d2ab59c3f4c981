/* SPDX-License-Identifier: Apache-2.0 */
/* proto_chat.c - the chat fields of a client request between msgpack and JSON (see
 * proto_chat.h for the shape they are checked against and what that costs).
 *
 * Errors name the value by its path in the request ("messages[2].tool_calls[0].function",
 * "chat_template_kwargs.enable_thinking"), clipped to fit the message, so a client can find
 * it. The walk is recursive, bounded by the frame scan's depth limit (protocol.c).
 */
#include "proto_chat.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "proto_schema.h"
#include "common/base/status.h"

/* Where the walk is, for messages. Private to this file. */
typedef struct walk {
    char path[160];
    size_t len;
    proto_error *err;
} walk;

/* Extend the path by what snprintf wrote (k bytes asked, clipped to the room). */
static size_t advance(walk *w, size_t at, int k)
{
    size_t room = sizeof w->path - at;
    if (k > 0)
        w->len = at + ((size_t)k < room ? (size_t)k : room - 1);
    return at;
}
static size_t push_name(walk *w, const char *name)
{
    return advance(w, w->len, snprintf(w->path + w->len, sizeof w->path - w->len, ".%s", name));
}
static size_t push_index(walk *w, uint32_t i)
{
    return advance(w, w->len, snprintf(w->path + w->len, sizeof w->path - w->len, "[%u]", i));
}
static size_t push_key(walk *w, const msgpack_object *key)
{
    char text[48];
    ps_key_text(key, text, sizeof text);
    return push_name(w, text);
}
static void pop(walk *w, size_t at)
{
    w->len = at;
    w->path[at] = '\0';
}

static int no_memory(walk *w)
{
    ps_fail(w->err, PE_INTERNAL, "out of memory decoding %s", w->path);
    return DERAS_ENOMEM;
}

/* A map key: a valid UTF-8 str without NUL (templates see keys as C strings). */
static int key_of(walk *w, const msgpack_object *key, const char **p, size_t *n)
{
    if (key->type != MSGPACK_OBJECT_STR)
        return ps_fail(w->err, PE_INVALID_FIELD, "keys must be strings, got %s in %s",
                       ps_type_name(key), w->path);
    int rc = ps_str(key, 0, key->via.str.size, p, n, w->err, "a key in %s", w->path);
    if (rc == DERAS_OK && memchr(*p, '\0', *n))
        rc = ps_fail(w->err, PE_INVALID_FIELD, "a key in %s holds a NUL byte", w->path);
    return rc;
}

/* Any value: nil, bool, integer, finite float, UTF-8 string, array, map with string keys. */
static int value(walk *w, const msgpack_object *o, json_t **out)
{
    *out = NULL;
    json_t *j = NULL;
    const char *p;
    size_t n;
    int rc;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: j = json_null(); break;
    case MSGPACK_OBJECT_BOOLEAN: j = json_boolean(o->via.boolean); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > INT64_MAX)
            return ps_fail(w->err, PE_VALUE_OUT_OF_RANGE,
                           "%s must be at most 9223372036854775807, got %" PRIu64, w->path,
                           o->via.u64);
        j = json_integer((json_int_t)o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: j = json_integer((json_int_t)o->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (!isfinite(o->via.f64))
            return ps_fail(w->err, PE_VALUE_OUT_OF_RANGE, "%s must be finite, got %g", w->path,
                           o->via.f64);
        j = json_real(o->via.f64);
        break;
    case MSGPACK_OBJECT_STR:
        if ((rc = ps_str(o, 0, o->via.str.size, &p, &n, w->err, "%s", w->path)) != DERAS_OK)
            return rc;
        j = json_stringn_nocheck(p, n);
        break;
    case MSGPACK_OBJECT_ARRAY:
        if (!(j = json_array()))
            return no_memory(w);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            size_t at = push_index(w, i);
            json_t *v;
            if ((rc = value(w, &o->via.array.ptr[i], &v)) != DERAS_OK ||
                (json_array_append_new(j, v) && (rc = no_memory(w)))) {
                json_decref(j);
                return rc;
            }
            pop(w, at);
        }
        break;
    case MSGPACK_OBJECT_MAP:
        if (!(j = json_object()))
            return no_memory(w);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if ((rc = key_of(w, &kv->key, &p, &n)) != DERAS_OK) {
                json_decref(j);
                return rc;
            }
            size_t at = push_key(w, &kv->key);
            json_t *v;
            if (json_object_getn(j, p, n))
                rc = ps_fail(w->err, PE_INVALID_FIELD, "duplicate key in %s", w->path);
            else if ((rc = value(w, &kv->val, &v)) == DERAS_OK &&
                     json_object_setn_new_nocheck(j, p, n, v))
                rc = no_memory(w);
            if (rc != DERAS_OK) {
                json_decref(j);
                return rc;
            }
            pop(w, at);
        }
        break;
    default:
        return ps_fail(w->err, PE_INVALID_FIELD, "%s must not be a %s", w->path,
                       ps_type_name(o));
    }
    if (!j)
        return no_memory(w);
    *out = j;
    return DERAS_OK;
}

/* A free-form value that must be a map (a tool call, a tool definition). */
static int map_value(walk *w, const msgpack_object *o, json_t **out)
{
    *out = NULL;
    if (o->type != MSGPACK_OBJECT_MAP)
        return ps_fail(w->err, PE_INVALID_FIELD, "%s must be a map, got %s", w->path,
                       ps_type_name(o));
    return value(w, o, out);
}

/* A string of min..max bytes as a JSON string. */
static int string(walk *w, const msgpack_object *o, size_t min, size_t max, json_t **out)
{
    const char *p;
    size_t n;
    *out = NULL;
    int rc = ps_str(o, min, max, &p, &n, w->err, "%s", w->path);
    if (rc != DERAS_OK)
        return rc;
    if (!(*out = json_stringn_nocheck(p, n)))
        return no_memory(w);
    return DERAS_OK;
}

/* content as a list of text parts: [{"type": "text", "text": str}, ...]. */
static int content_parts(walk *w, const msgpack_object *o, json_t **out)
{
    const msgpack_object *items;
    uint32_t k;
    *out = NULL;
    int rc = ps_array(o, PROTO_MAX_CONTENT_PARTS, &items, &k, w->err, "%s", w->path);
    if (rc != DERAS_OK)
        return rc;
    json_t *parts = json_array();
    if (!parts)
        return no_memory(w);
    for (uint32_t i = 0; i < k && rc == DERAS_OK; i++) {
        size_t at = push_index(w, i);
        const msgpack_object_kv *kv;
        uint32_t n;
        const msgpack_object *type, *text;
        json_t *part = NULL;
        if ((rc = ps_map(&items[i], &kv, &n, w->err, "%s", w->path)) != DERAS_OK)
            break;
        for (uint32_t f = 0; f < n && rc == DERAS_OK; f++)
            if (!ps_str_is(&kv[f].key, "type") && !ps_str_is(&kv[f].key, "text"))
                rc = ps_unknown_key(&kv[f].key, w->path, w->err);
        if (rc != DERAS_OK)
            break;
        if (!(type = ps_find(kv, n, "type")) || !(text = ps_find(kv, n, "text"))) {
            rc = ps_fail(w->err, PE_MISSING_FIELD, "%s needs type and text", w->path);
            break;
        }
        if (!ps_str_is(type, "text")) {
            char got[48];
            ps_key_text(type, got, sizeof got);
            rc = ps_fail(w->err, PE_INVALID_FIELD,
                         "%s.type must be \"text\" (the only part type served), got '%s'",
                         w->path, got);
            break;
        }
        push_name(w, "text");
        json_t *t;
        if ((rc = string(w, text, 0, text->via.str.size, &t)) != DERAS_OK)
            break;
        pop(w, at);
        if (!(part = json_pack("{s:s, s:o}", "type", "text", "text", t)) ||
            json_array_append_new(parts, part))
            rc = no_memory(w);
        pop(w, at);
    }
    if (rc != DERAS_OK) {
        json_decref(parts);
        return rc;
    }
    *out = parts;
    return DERAS_OK;
}

enum { MK_ROLE, MK_CONTENT, MK_NAME, MK_TOOL_CALLS, MK_TOOL_CALL_ID, MK_N };
static const char *const message_keys[MK_N] = {"role", "content", "name", "tool_calls",
                                               "tool_call_id"};
static const char *const roles[] = {"system", "user", "assistant", "tool"};

static int message_field(walk *w, int f, const msgpack_object *v, json_t **out)
{
    const msgpack_object *items;
    uint32_t k;
    int rc;
    switch (f) {
    case MK_ROLE:
        if ((rc = string(w, v, 1, 16, out)) != DERAS_OK ||
            ps_lookup(v, roles, sizeof roles / sizeof roles[0]) >= 0)
            return rc;
        json_decref(*out);
        *out = NULL;
        return ps_fail(w->err, PE_INVALID_FIELD,
                       "%s must be system, user, assistant or tool, got '%.*s'", w->path,
                       (int)v->via.str.size, v->via.str.ptr);
    case MK_CONTENT:
        if (v->type == MSGPACK_OBJECT_ARRAY)
            return content_parts(w, v, out);
        if (v->type != MSGPACK_OBJECT_STR)
            return ps_fail(w->err, PE_INVALID_FIELD,
                           "%s must be a string or a list of text parts, got %s", w->path,
                           ps_type_name(v));
        return string(w, v, 0, v->via.str.size, out);
    case MK_NAME:
    case MK_TOOL_CALL_ID:
        return string(w, v, 1, PROTO_MAX_CHAT_NAME, out);
    default: /* MK_TOOL_CALLS */
        if ((rc = ps_array(v, PROTO_MAX_TOOL_CALLS, &items, &k, w->err, "%s", w->path)) !=
            DERAS_OK)
            return rc;
        if (!(*out = json_array()))
            return no_memory(w);
        for (uint32_t i = 0; i < k; i++) {
            size_t at = push_index(w, i);
            json_t *call;
            if ((rc = map_value(w, &items[i], &call)) != DERAS_OK ||
                (json_array_append_new(*out, call) && (rc = no_memory(w)))) {
                json_decref(*out);
                *out = NULL;
                return rc;
            }
            pop(w, at);
        }
        return DERAS_OK;
    }
}

static int message(walk *w, const msgpack_object *o, json_t **out)
{
    const msgpack_object_kv *kv;
    uint32_t n;
    uint64_t seen = 0;
    *out = NULL;
    int rc = ps_map(o, &kv, &n, w->err, "%s", w->path);
    if (rc != DERAS_OK)
        return rc;
    json_t *m = json_object();
    if (!m)
        return no_memory(w);
    for (uint32_t i = 0; i < n && rc == DERAS_OK; i++) {
        int f = ps_lookup(&kv[i].key, message_keys, MK_N);
        if (f < 0) {
            rc = ps_unknown_key(&kv[i].key, w->path, w->err);
            break;
        }
        if ((rc = ps_seen(&seen, f, message_keys[f], w->err)) != DERAS_OK)
            break;
        size_t at = push_name(w, message_keys[f]);
        json_t *v;
        if ((rc = message_field(w, f, &kv[i].val, &v)) == DERAS_OK &&
            json_object_set_new_nocheck(m, message_keys[f], v))
            rc = no_memory(w);
        pop(w, at);
    }
    if (rc == DERAS_OK)
        rc = ps_required(1u << MK_ROLE, seen, message_keys, MK_N, w->path, w->err);
    if (rc == DERAS_OK && !(seen & (1u << MK_CONTENT)) &&
        !(ps_str_is(ps_find(kv, n, "role"), "assistant") && (seen & (1u << MK_TOOL_CALLS))))
        rc = ps_fail(w->err, PE_MISSING_FIELD,
                     "content is required in %s (only an assistant's tool calls may go without)",
                     w->path);
    if (rc != DERAS_OK) {
        json_decref(m);
        return rc;
    }
    *out = m;
    return DERAS_OK;
}

int proto_chat_messages(const msgpack_object *o, json_t **out, proto_error *err)
{
    walk w = {.path = "messages", .len = 8, .err = err};
    const msgpack_object *items;
    uint32_t k;
    *out = NULL;
    int rc = ps_array(o, PROTO_MAX_MESSAGES, &items, &k, err, "messages");
    if (rc != DERAS_OK)
        return rc;
    if (k == 0)
        return ps_fail(err, PE_INVALID_FIELD, "messages must have 1..%d messages, got 0",
                       PROTO_MAX_MESSAGES);
    json_t *msgs = json_array();
    if (!msgs)
        return no_memory(&w);
    for (uint32_t i = 0; i < k && rc == DERAS_OK; i++) {
        size_t at = push_index(&w, i);
        json_t *m;
        if ((rc = message(&w, &items[i], &m)) == DERAS_OK && json_array_append_new(msgs, m))
            rc = no_memory(&w);
        pop(&w, at);
    }
    if (rc != DERAS_OK) {
        json_decref(msgs);
        return rc;
    }
    *out = msgs;
    return DERAS_OK;
}

int proto_chat_tools(const msgpack_object *o, json_t **out, proto_error *err)
{
    walk w = {.path = "tools", .len = 5, .err = err};
    const msgpack_object *items;
    uint32_t k;
    *out = NULL;
    int rc = ps_array(o, PROTO_MAX_TOOLS, &items, &k, err, "tools");
    if (rc != DERAS_OK)
        return rc;
    json_t *tools = json_array();
    if (!tools)
        return no_memory(&w);
    for (uint32_t i = 0; i < k && rc == DERAS_OK; i++) {
        size_t at = push_index(&w, i);
        json_t *t;
        if ((rc = map_value(&w, &items[i], &t)) == DERAS_OK && json_array_append_new(tools, t))
            rc = no_memory(&w);
        pop(&w, at);
    }
    if (rc != DERAS_OK) {
        json_decref(tools);
        return rc;
    }
    *out = tools;
    return DERAS_OK;
}

int proto_chat_map(const msgpack_object *o, const char *field, json_t **out, proto_error *err)
{
    walk w = {.err = err};
    snprintf(w.path, sizeof w.path, "%s", field);
    w.len = strlen(w.path);
    return map_value(&w, o, out);
}

/* Names a template's caller binds itself (transformers passes these as named arguments, so
 * a keyword argument of the same name is an error there too). */
static const char *const reserved_kwargs[] = {"messages", "tools", "documents",
                                              "add_generation_prompt"};

int proto_chat_kwargs(const msgpack_object *o, json_t **out, proto_error *err)
{
    walk w = {.path = "chat_template_kwargs", .len = 20, .err = err};
    const msgpack_object_kv *kv;
    uint32_t n;
    *out = NULL;
    int rc = ps_map(o, &kv, &n, err, "chat_template_kwargs");
    if (rc != DERAS_OK)
        return rc;
    if (n > PROTO_MAX_TEMPLATE_KWARGS)
        return ps_fail(err, PE_LIMIT_EXCEEDED, "chat_template_kwargs may have at most %d keys, got %u",
                       PROTO_MAX_TEMPLATE_KWARGS, n);
    for (uint32_t i = 0; i < n; i++) {
        const char *p;
        size_t len;
        if ((rc = ps_str(&kv[i].key, 1, PROTO_MAX_CHAT_NAME, &p, &len, err,
                         "a key of chat_template_kwargs")) != DERAS_OK)
            return rc;
        int r = ps_lookup(&kv[i].key, reserved_kwargs,
                          sizeof reserved_kwargs / sizeof reserved_kwargs[0]);
        if (r >= 0)
            return ps_fail(err, PE_INVALID_FIELD,
                           "chat_template_kwargs may not set '%s' (the request's own field)",
                           reserved_kwargs[r]);
    }
    return value(&w, o, out);
}

int proto_chat_pack(msgpack_packer *pk, const json_t *j)
{
    int rc = 0;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *v;
        rc = msgpack_pack_map(pk, json_object_size(j));
        json_object_foreach((json_t *)j, k, v) {
            size_t n = strlen(k);
            rc |= msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, k, n);
            rc |= proto_chat_pack(pk, v);
        }
        return rc;
    }
    case JSON_ARRAY:
        rc = msgpack_pack_array(pk, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++)
            rc |= proto_chat_pack(pk, json_array_get(j, i));
        return rc;
    case JSON_STRING: {
        size_t n = json_string_length(j);
        return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, json_string_value(j), n);
    }
    case JSON_INTEGER: return msgpack_pack_int64(pk, (int64_t)json_integer_value(j));
    case JSON_REAL: return msgpack_pack_double(pk, json_real_value(j));
    case JSON_TRUE: return msgpack_pack_true(pk);
    case JSON_FALSE: return msgpack_pack_false(pk);
    default: return msgpack_pack_nil(pk);
    }
}
