/* SPDX-License-Identifier: Apache-2.0 */
/* proto_schema.h - matching unpacked msgpack objects against a message schema, and the
 * encoders' output buffer (internal to the wire room's codecs: protocol.c, protocol_enc.c,
 * worker_proto.c, worker_proto_enc.c and admin_proto.c; not a public header).
 *
 * Each check takes the object, the bounds, an out-parameter, and last the field's name as
 * a printf format ("temperature", "stop[%u]", "tokens[%u][2]"), formatted only when the
 * check fails so that checking the elements of a large array costs no formatting; it returns
 * DERAS_OK, or fills the proto_error with the stable code and a message that names the
 * field and the bound ("temperature must be in [0, 100], got 250") and returns
 * DERAS_EFORMAT (the same message also goes to deras_fail). The codes follow one rule:
 *   wrong msgpack type, empty where non-empty is due, NUL inside a C string -> invalid_field
 *   a number below its minimum or a sampling parameter outside its range -> value_out_of_range
 *   a count, length or size above its cap (limit argument) -> limit_exceeded
 *   malformed UTF-8 -> invalid_utf8
 * Nothing here allocates but ps_grow and the encoders' buffer; strings are checked in place.
 */
#ifndef DERAS_PROTO_SCHEMA_H
#define DERAS_PROTO_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "msgpack_scan.h"
#include "protocol.h"

/* Record a violation: err->code = code, err->message = the formatted text. Returns
 * DERAS_EFORMAT. */
int ps_fail(proto_error *err, enum proto_error_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "nil", "bool", "int", "float", "str", "bin", "array", "map", "ext". */
const char *ps_type_name(const msgpack_object *o);

/* Whether o is a str equal to s (NUL-terminated). */
bool ps_str_is(const msgpack_object *o, const char *s);

/* Index of key o in names[0..n) (o must be a str), or -1. O(n). */
int ps_lookup(const msgpack_object *o, const char *const *names, int n);

/* A key as printable text for messages: at most ~40 bytes, bytes outside printable ASCII
 * as \xNN, so an error message is valid UTF-8 whatever the client sent. */
void ps_key_text(const msgpack_object *o, char *out, size_t cap);

/* The common map checks of a message or sub-map: o is a map whose keys are all str.
 * On success *kv / *n are its pairs. */
int ps_map(const msgpack_object *o, const msgpack_object_kv **kv, uint32_t *n,
           proto_error *err, const char *field, ...) __attribute__((format(printf, 5, 6)));

/* An array of at most max elements (more: limit_exceeded). */
int ps_array(const msgpack_object *o, uint32_t max, const msgpack_object **items, uint32_t *n,
             proto_error *err, const char *field, ...) __attribute__((format(printf, 6, 7)));

/* An integer in [lo, hi]; below lo: value_out_of_range; above hi: `over` (value_out_of_range
 * for plain ranges, limit_exceeded for caps). Floats are refused. */
int ps_int(const msgpack_object *o, int64_t lo, int64_t hi, enum proto_error_code over,
           int64_t *out, proto_error *err, const char *field, ...)
    __attribute__((format(printf, 7, 8)));

/* Any integer in [0, 2^64 - 1]. */
int ps_u64(const msgpack_object *o, uint64_t *out, proto_error *err, const char *field, ...)
    __attribute__((format(printf, 4, 5)));

/* A finite number (float, or an integer) in the range; lo_open / hi_open make that end
 * exclusive. The range is checked on the value as a float (so 1e-50 is 0 for top_p). */
int ps_float(const msgpack_object *o, double lo, bool lo_open, double hi, bool hi_open,
             float *out, proto_error *err, const char *field, ...)
    __attribute__((format(printf, 8, 9)));

/* The same for a double (durations, rates). */
int ps_double(const msgpack_object *o, double lo, double hi, double *out, proto_error *err,
              const char *field, ...) __attribute__((format(printf, 6, 7)));

int ps_bool(const msgpack_object *o, bool *out, proto_error *err, const char *field, ...)
    __attribute__((format(printf, 4, 5)));

/* A valid UTF-8 str of min..max bytes (shorter: invalid_field, longer: limit_exceeded).
 * *p points into the unpacked frame. */
int ps_str(const msgpack_object *o, size_t min, size_t max, const char **p, size_t *n,
           proto_error *err, const char *field, ...) __attribute__((format(printf, 7, 8)));

/* ps_str, no NUL inside, copied NUL-terminated into dst (max + 1 bytes). */
int ps_cstr(const msgpack_object *o, size_t min, size_t max, char *dst, proto_error *err,
            const char *field, ...) __attribute__((format(printf, 6, 7)));

/* A token id: an integer in [0, 2^31 - 1] (anything else: token_out_of_range; not an
 * integer: invalid_field). */
int ps_token(const msgpack_object *o, int32_t *out, proto_error *err, const char *field, ...)
    __attribute__((format(printf, 4, 5)));

/* A log-probability: a number that is not NaN and not +inf (-inf is log 0). */
int ps_logprob(const msgpack_object *o, float *out, proto_error *err, const char *field, ...)
    __attribute__((format(printf, 4, 5)));

/* The code named by a wire string (proto_error_name); unknown names and "none" are
 * PE_INTERNAL. o must be a str. */
enum proto_error_code ps_error_code(const msgpack_object *o);

/* Open a frame: larger than max_bytes is message_too_large; a scan failure or a root
 * that is not a map is malformed. On success *kv / *n are the root map's pairs (keys not
 * yet checked), valid until the next parse of f. */
int ps_open(mp_frame_t *f, const void *buf, size_t len, size_t max_bytes,
            const mp_scan_limits *lim, const msgpack_object_kv **kv, uint32_t *n,
            proto_error *err);

/* The value of the first pair whose key is the str `key`, or NULL. O(n). */
const msgpack_object *ps_find(const msgpack_object_kv *kv, uint32_t n, const char *key);

/* The header of a message: "v", when present, must be an integer equal to version
 * (unsupported_version otherwise); "type" must be present (missing_field), a str
 * (invalid_field) and one of types[0..n_types) (unknown_type). *type is its index. */
int ps_header(const msgpack_object_kv *kv, uint32_t n, int version, const char *const *types,
              int n_types, int *type, proto_error *err);

/* Duplicate-key guard for a map walk: bit i of *seen marks field i (i < 64). */
int ps_seen(uint64_t *seen, int i, const char *name, proto_error *err);

/* A key the schema of `where` (a message type or sub-map name) does not have:
 * invalid_field, "unknown key 'K' in WHERE" ("keys must be strings, got T in WHERE" for a
 * key that is not a str). */
int ps_unknown_key(const msgpack_object *key, const char *where, proto_error *err);

/* After a map walk: the first field of `required` (bits over names[0..n)) not in `seen`
 * is missing_field, "NAME is required in WHERE"; DERAS_OK when none is. */
int ps_required(uint64_t required, uint64_t seen, const char *const *names, int n,
                const char *where, proto_error *err);

/* The end of every decode: trim the frame's zone back to its retained size and map rc to
 * the decoders' contract (DERAS_ENOMEM stays, any other failure is DERAS_EFORMAT). */
int ps_close(mp_frame_t *f, int rc);

/* Decoder storage: make *p (capacity *cap elements of elem bytes) hold need elements,
 * growing geometrically (so a warm decoder stops allocating) and shrinking back to retain
 * after an outsized message. Contents are not kept: they belong to the previous message.
 * DERAS_OK or DERAS_ENOMEM (then *p is NULL and *cap 0). Allocates only when the capacity
 * changes. */
int ps_grow(void **p, size_t *cap, size_t need, size_t elem, size_t retain);

/* Largest prefix of s[0..n) (n <= cap) that is valid UTF-8 and at most cap bytes, for
 * encoders that must truncate free text: invalid bytes are cut there. */
size_t ps_utf8_clip(const char *s, size_t n, size_t cap);

/* ---- the encoders' output ---- */

/* The buffer an encoder packs each message into, a member named `out` of the encoder,
 * kept and reused: a warm encoder allocates nothing. */
typedef struct ps_out {
    msgpack_sbuffer sb;
    msgpack_packer pk;
} ps_out;

/* An empty buffer and its packer; allocates nothing until the first pack. */
void ps_out_init(ps_out *o);
/* Free what the buffer holds (o itself is the caller's). */
void ps_out_free(ps_out *o);

/* The start of every encode call of a function with `buf` and `len` out-parameters: it
 * returns DERAS_EINVAL ("<function>: bad arguments") unless the encoder e, buf and len are
 * non-NULL and the call's own condition ok holds, then empties e->out (memory kept). */
#define PS_ENCODE_BEGIN(e, ok)                                                               \
    do {                                                                                     \
        if (!(e) || !buf || !len || !(ok))                                                   \
            return deras_fail(DERAS_EINVAL, "%s: bad arguments", __func__);                  \
        msgpack_sbuffer_clear(&(e)->out.sb);                                                 \
    } while (0)

/* The end of every encode call: rc is the packer calls' results or-ed together (msgpack-c's
 * 0 / -1; the buffer's realloc is the only way a pack fails). DERAS_OK with *buf / *len the
 * message, valid until the next one; else DERAS_ENOMEM, "encoding WHAT: out of memory". */
int ps_out_done(ps_out *o, int rc, const char *what, const void **buf, size_t *len);

#endif
