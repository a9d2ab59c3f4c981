/* SPDX-License-Identifier: Apache-2.0 */
/* group_trust.c - when a tensor-parallel segment may be trusted (see group_impl.h).
 *
 * A rank running as root must not act on a segment someone else made: /dev/shm is shared,
 * and a segment's header names offsets the rank then reads and writes through. Three
 * gates, all before any offset is used: the file is ours and private (group_fd_check), the
 * layout fits the file (group_hdr_check), and the segment carries the group's secret, which
 * only processes that can read our runtime directory know (group_secret_*). Cost: a few
 * system calls at start-up; nothing per step.
 */
#include "worker/group_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/dtype.h"
#include "common/base/quantize.h"
#include "common/base/status.h"
#include "common/wire/endpoints.h"

int group_fd_check(int fd, const char *name)
{
    struct stat st;
    if (fstat(fd, &st))
        return deras_fail(DERAS_EIO, "segment %s: %s", name, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return deras_fail(DERAS_EINVAL, "segment %s is not a regular file", name);
    if (st.st_uid != getuid())
        return deras_fail(DERAS_EINVAL, "segment %s belongs to uid %u, not to this user (uid %u): "
                          "refusing to use it (another user made it; remove it as root)",
                          name, (unsigned)st.st_uid, (unsigned)getuid());
    if (st.st_mode & 077)
        return deras_fail(DERAS_EINVAL, "segment %s has mode %04o: others may read or write it; "
                          "refusing to use it", name, (unsigned)(st.st_mode & 07777));
    return DERAS_OK;
}

/* a + b <= limit, without overflow */
static int fits(uint64_t a, uint64_t b, uint64_t limit)
{
    return a <= limit && b <= limit - a;
}

int group_hdr_check(const group_hdr *h, size_t bytes)
{
    if (bytes < sizeof *h)
        return deras_fail(DERAS_EFORMAT, "segment of %zu bytes: smaller than its header", bytes);
    if (atomic_load_explicit(&h->magic, memory_order_acquire) != GROUP_MAGIC ||
        h->version != GROUP_VERSION)
        return deras_fail(DERAS_EFORMAT, "segment: not a deras group of version %d", GROUP_VERSION);
    if (h->size < 2 || h->size > GROUP_MAX)
        return deras_fail(DERAS_EFORMAT, "segment: %d ranks (2..%d)", (int)h->size, GROUP_MAX);
    if (h->bytes != bytes)
        return deras_fail(DERAS_EFORMAT, "segment: header says %llu bytes, the file has %zu",
                          (unsigned long long)h->bytes, bytes);
    if (h->ring_off != GROUP_ALIGN64(sizeof *h) || h->comm_off % 64 ||
        !fits(h->ring_off, h->ring_bytes, h->comm_off) || !fits(h->comm_off, h->comm_bytes, bytes))
        return deras_fail(DERAS_EFORMAT, "segment: regions at %llu (+%llu) and %llu (+%llu) do not "
                          "fit its %zu bytes", (unsigned long long)h->ring_off,
                          (unsigned long long)h->ring_bytes, (unsigned long long)h->comm_off,
                          (unsigned long long)h->comm_bytes, bytes);
    if (!(h->timeout_s > 0 && h->timeout_s <= 1e6))
        return deras_fail(DERAS_EFORMAT, "segment: timeout %g s", h->timeout_s);
    if (h->max_batch_tokens < 1 || h->max_batch_tokens > (1 << 24) || h->max_seqs < 1 ||
        h->max_seqs > (1 << 20) || h->max_logits < 1 || h->max_logits > (1 << 24) ||
        h->block_size < 1 || h->block_size > 4096 || h->n_kv_blocks < 2 ||
        h->n_kv_blocks > (1 << 30) || h->max_blocks_per_seq < 1 ||
        h->max_blocks_per_seq > (1 << 24) || h->max_copies < 0 || h->max_copies > (1 << 20) ||
        (h->comm_nccl != 0 && h->comm_nccl != 1) ||
        (h->kv_dtype != DT_F32 && h->kv_dtype != DT_F16 && h->kv_dtype != DT_BF16))
        return deras_fail(DERAS_EFORMAT, "segment: step limits out of range (tokens %d, "
                          "sequences %d, logits %d, block %d, blocks %d, blocks per sequence %d, "
                          "copies %d) or KV dtype %d", (int)h->max_batch_tokens, (int)h->max_seqs,
                          (int)h->max_logits, (int)h->block_size, (int)h->n_kv_blocks,
                          (int)h->max_blocks_per_seq, (int)h->max_copies, (int)h->kv_dtype);
    if ((h->convert_weights != 0 && h->convert_weights != 1) ||
        (h->convert_weights && !dtype_can_quantize(h->weight_dtype)))
        return deras_fail(DERAS_EFORMAT, "segment: weight format %d/%d", (int)h->convert_weights,
                          (int)h->weight_dtype);
    return DERAS_OK;
}

static int secret_path(const char *group_name, char *path, size_t cap)
{
    char dir[PATH_MAX - 80];
    int rc = endpoints_runtime_dir_checked(dir, sizeof dir);
    if (rc)
        return deras_fail_ctx(rc, "the group's key file: ");
    if (snprintf(path, cap, "%s/tp-%s.key", dir, group_name) >= (int)cap)
        return deras_fail(DERAS_ERANGE, "the group's key file: path too long");
    return DERAS_OK;
}

int group_secret_create(const char *group_name, unsigned char secret[GROUP_SECRET_BYTES])
{
    char path[PATH_MAX];
    int rc = secret_path(group_name, path, sizeof path);
    if (rc)
        return rc;
    if (getrandom(secret, GROUP_SECRET_BYTES, 0) != GROUP_SECRET_BYTES)
        return deras_fail(DERAS_EIO, "getrandom: %s", strerror(errno));
    unlink(path); /* a previous group's: the directory is ours */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return deras_fail(DERAS_EIO, "creating %s: %s", path, strerror(errno));
    ssize_t n = write(fd, secret, GROUP_SECRET_BYTES);
    int closed = close(fd);
    if (n != GROUP_SECRET_BYTES || closed) {
        unlink(path);
        return deras_fail(DERAS_EIO, "writing %s: %s", path, strerror(errno));
    }
    return DERAS_OK;
}

int group_secret_verify(const char *group_name, const unsigned char secret[GROUP_SECRET_BYTES])
{
    char path[PATH_MAX];
    int rc = secret_path(group_name, path, sizeof path);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return deras_fail(DERAS_EINVAL, "the group's key file %s: %s (the leader writes it; "
                          "every rank must run as the same user with the same runtime "
                          "directory)", path, strerror(errno));
    unsigned char key[GROUP_SECRET_BYTES + 1];
    struct stat st;
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid() &&
        !(st.st_mode & 077))
        n = read(fd, key, sizeof key);
    close(fd);
    if (n != GROUP_SECRET_BYTES)
        return deras_fail(DERAS_EINVAL, "the group's key file %s is not a private %d-byte key of "
                          "this user", path, GROUP_SECRET_BYTES);
    unsigned char diff = 0;
    for (int i = 0; i < GROUP_SECRET_BYTES; i++)
        diff |= (unsigned char)(key[i] ^ secret[i]);
    if (diff)
        return deras_fail(DERAS_EINVAL, "the segment does not carry the secret of %s: it is not "
                          "this group's (refusing it)", path);
    return DERAS_OK;
}

void group_secret_remove(const char *group_name)
{
    char path[PATH_MAX];
    if (secret_path(group_name, path, sizeof path) == DERAS_OK)
        unlink(path);
}
