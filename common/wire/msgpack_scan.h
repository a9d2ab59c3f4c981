/* SPDX-License-Identifier: Apache-2.0 */
/* msgpack_scan.h - a strict, bounded front end to msgpack-c's unpacker.
 *
 * msgpack-c's C unpacker allocates the storage of an array or map from its declared count
 * before it has seen a single element, so a 5-byte frame that claims 2^32 elements asks
 * for 96 GiB. Nothing from the network reaches it unchecked: mp_scan() first walks the
 * frame without trusting any declared length. Every str/bin/ext length must fit in the
 * bytes that remain, every array of N elements (map of N pairs) needs at least N (2N)
 * bytes after its header since each element takes at least one, nesting depth and the
 * total number of items are capped, and the frame must be exactly one object with no
 * trailing bytes. A frame that passes holds at most len items, so msgpack-c then needs at
 * most sizeof(msgpack_object) bytes per item: mp_frame_t sizes its zone from the scan's
 * count before unpacking, which also means a warm mp_frame_t unpacks without allocating.
 *
 * Strings, bins and exts in the unpacked objects point into the caller's buffer (msgpack-c
 * references, it does not copy), so the buffer must outlive the objects.
 */
#ifndef DERAS_MSGPACK_SCAN_H
#define DERAS_MSGPACK_SCAN_H

#include <stddef.h>

#include <msgpack.h>

#define MP_SCAN_MAX_DEPTH 16  /* the deepest nesting any limits may allow */

typedef struct mp_scan_limits {
    int max_depth;            /* containers nested inside each other, 1..MP_SCAN_MAX_DEPTH */
    size_t max_items;         /* every object counts: containers, keys, values, elements */
} mp_scan_limits;

typedef struct mp_scan_info {
    size_t n_items;           /* objects in the frame, the root included */
    size_t n_containers;      /* arrays and maps among them */
} mp_scan_info;

/* Check that buf[0..len) is exactly one well-formed msgpack object within the limits.
 * DERAS_OK with *info filled (info may be NULL), or DERAS_EFORMAT with a message naming
 * the byte offset and the rule ("byte 5: array of 4294967295 elements, only 0 bytes
 * remain"). Reads only inside buf, allocates nothing. Cost: O(len). */
int mp_scan(const void *buf, size_t len, const mp_scan_limits *lim, mp_scan_info *info);

/* Upper bound of the zone bytes msgpack-c needs to unpack a scanned frame. O(1). */
size_t mp_zone_bound(const mp_scan_info *info);

/* A reusable unpack context: one msgpack_zone, sized from each frame's scan. */
typedef struct mp_frame mp_frame_t;

/* A frame whose zone keeps up to retain_bytes between parses (larger zones are given
 * back after the parse that needed them). DERAS_ENOMEM. */
int mp_frame_new(size_t retain_bytes, mp_frame_t **out);
void mp_frame_destroy(mp_frame_t **f);

/* Scan buf against lim, then unpack it into f's zone. DERAS_OK with *root filled, valid
 * until the next parse or mp_frame_trim on f and while buf lives; DERAS_EFORMAT (scan
 * failed, message as mp_scan's) or DERAS_ENOMEM. Allocates only when the zone must grow
 * past its current size. Cost: O(len). */
int mp_frame_parse(mp_frame_t *f, const void *buf, size_t len, const mp_scan_limits *lim,
                   msgpack_object *root);

/* Give back zone memory above the retain size (call when done with the objects). Makes
 * the objects of the last parse invalid. Cost: O(1); frees at most one block. */
void mp_frame_trim(mp_frame_t *f);

#endif
