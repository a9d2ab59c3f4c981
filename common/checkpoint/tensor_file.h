/* SPDX-License-Identifier: Apache-2.0 */
/* tensor_file.h - what the two checkpoint readers (gguf.c, safetensors.c) share: the
 * file's bytes (mapped by the reader or the caller's memory) and name, the tensor views
 * with their by-name index, the open/destroy shell around a reader's parser, and names
 * from a file made safe for error messages.
 *
 * A reader's object begins with a tensor_file_t, so the shell allocates and frees the whole
 * object and hands the parser the tensor_file_t to cast back. The parser fills `tensors`
 * and `n_tensors`; tensor_file_index() then sorts pointers to them by name (duplicates
 * refused) for O(log n) lookups. Internal to deras_checkpoint. Costs: open is the
 * parser's plus O(n log n) for the index; lookups allocate nothing.
 */
#ifndef DERAS_TENSOR_FILE_H
#define DERAS_TENSOR_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/dtype.h"

typedef struct tensor_file {
    char *name;                  /* path or the name given at open, for messages */
    const uint8_t *base;
    size_t size;
    void *map;                   /* non-NULL when the file was mapped here */
    int64_t n_tensors;
    tensor_view *tensors;        /* (n_tensors) the reader's order */
    const tensor_view **by_name; /* (n_tensors) into tensors, sorted by name */
} tensor_file_t;

typedef struct tensor_file_reader {
    const char *api;      /* "gguf", "st": names the calls in argument errors */
    const char *what;     /* "a GGUF file": for a file too short */
    size_t min_size;      /* bytes below which the file is refused before mapping */
    size_t obj_size;      /* the reader's object, a tensor_file_t first */
    int (*parse)(tensor_file_t *tf);    /* validate base/size, fill the views; a status */
    void (*release)(tensor_file_t *tf); /* free the reader's own contents; NULL-safe parts */
} tensor_file_reader;

/* Map `path` (DERAS_EIO if it cannot be opened or mapped) and parse it. On failure *out is
 * NULL and everything is freed. */
int tensor_file_open(const tensor_file_reader *rd, const char *path, tensor_file_t **out);
/* The same over caller memory that must outlive the object; `name` NULL: "(memory)". */
int tensor_file_open_memory(const tensor_file_reader *rd, const void *data, size_t size,
                            const char *name, tensor_file_t **out);
/* Free the object (the reader's contents, the views, the mapping); sets *tf to NULL. */
void tensor_file_destroy(const tensor_file_reader *rd, tensor_file_t **tf);

/* Build by_name over the parsed views. DERAS_ENOMEM, or DERAS_EFORMAT naming a tensor
 * that appears twice. O(n log n). */
int tensor_file_index(tensor_file_t *tf);
/* View i in the reader's order: DERAS_EINVAL for NULL arguments (naming `call`),
 * DERAS_ERANGE outside 0..n-1. O(1). */
int tensor_file_at(const tensor_file_t *tf, int64_t i, tensor_view *out, const char *call);
/* The view named `name` (out may be NULL): DERAS_EINVAL for NULL arguments (naming
 * `call`), DERAS_ENOTFOUND if absent. O(log n). */
int tensor_file_find(const tensor_file_t *tf, const char *name, tensor_view *out,
                     const char *call);

/* Room for a printable name in a message. */
#define NAME_BUF 96

/* `len` bytes of a name from a file, escaped (\xNN for controls, quotes, backslashes and,
 * unless utf8, bytes above 0x7e) and shortened with "..." to fit `cap`; returns buf. */
const char *printable_name(const char *s, size_t len, bool utf8, char *buf, size_t cap);

#endif
