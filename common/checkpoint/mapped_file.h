/* SPDX-License-Identifier: Apache-2.0 */
/* mapped_file.h - a regular file mapped read-only, for the checkpoint readers.
 *
 * Checkpoints are read through mmap so that opening touches only headers and tensor data
 * is paged in when (and if) it is read. One place owns the open/fstat/mmap dance and its
 * error messages, which name the path and the reason.
 */
#ifndef DERAS_MAPPED_FILE_H
#define DERAS_MAPPED_FILE_H

#include <stddef.h>

/* Map `path`. Files shorter than min_size are DERAS_EFORMAT ("%path: N bytes is too short
 * for WHAT"); missing/unreadable files and non-regular files are DERAS_EIO. On success
 * *data and *size describe the mapping; release it with mapped_file_close(). */
int mapped_file_open(const char *path, size_t min_size, const char *what, void **data,
                     size_t *size);

/* Unmap; NULL-safe. */
void mapped_file_close(void *data, size_t size);

#endif
