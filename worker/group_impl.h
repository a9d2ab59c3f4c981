/* SPDX-License-Identifier: Apache-2.0 */
/* group_impl.h - the tensor-parallel group's shared segment layout, and the checks that
 * decide whether a segment found in /dev/shm may be trusted. Private to group.c and
 * group_trust.c (the door is group.h).
 *
 * Segment: group_hdr, then the plan ring's region, then the communicator's region, each
 * 64-byte aligned. Everything in it is read by root-run ranks, so nothing read from it is
 * used before group_hdr_check has bounded it; and a segment is joined only if its file is
 * this user's (mode 0600) and it carries the secret of the group's key file, which the
 * leader writes into its own runtime directory (group_trust.c).
 */
#ifndef DERAS_GROUP_IMPL_H
#define DERAS_GROUP_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/checkpoint/model_config.h"
#include "worker/comm_nccl.h"
#include "worker/shm_sync.h"

#define GROUP_MAGIC 0x50524744u /* "DGRP" */
#define GROUP_VERSION 4         /* 2: the secret; 3: the weight format; 4: the KV cache dtype */
#define GROUP_MAX 64
#define GROUP_SECRET_BYTES 32
#define GROUP_ALIGN64(x) (((x) + 63u) & ~(size_t)63u)

typedef struct group_hdr {
    _Atomic uint32_t magic;
    uint32_t version;
    int32_t size;
    int32_t leader_pid;
    uint64_t bytes, ring_off, ring_bytes, comm_off, comm_bytes;
    double timeout_s;
    model_config cfg;
    int32_t max_batch_tokens, max_seqs, max_logits, block_size, n_kv_blocks,
        max_blocks_per_seq, max_copies;
    int32_t convert_weights, weight_dtype; /* model_opts': every rank keeps the leader's
                                              format, so their shards split alike */
    int32_t kv_dtype;  /* enum deras_dtype of every rank's KV cache: F32, F16 or BF16 */
    int32_t comm_nccl; /* 0: shared memory; 1: NCCL with nccl_id */
    unsigned char nccl_id[COMM_NCCL_ID_BYTES];
    unsigned char secret[GROUP_SECRET_BYTES]; /* equal to the key file's */
    shm_flag abort;    /* nonzero: failed, abort_msg says why */
    char abort_msg[256];
    shm_flag loaded[GROUP_MAX];
    _Atomic int32_t pid[GROUP_MAX];
    shm_life life[GROUP_MAX];
} group_hdr;

/* The segment's file: a regular file of this user, readable and writable by nobody else.
 * DERAS_EINVAL naming the owner or mode; name is for the message. */
int group_fd_check(int fd, const char *name);

/* The header and the layout it claims, against the mapped size: magic, version, rank
 * count, region offsets and sizes inside the segment, the model options in range, the
 * timeout finite. DERAS_EFORMAT with the first thing wrong. O(1). */
int group_hdr_check(const group_hdr *h, size_t bytes);

/* <runtime dir>/tp-<name>.key: 32 random bytes, mode 0600, in a runtime directory that
 * endpoints_runtime_dir_checked trusts. The leader makes a fresh secret and writes it;
 * a follower reads it back and compares (constant time) with the segment's. */
int group_secret_create(const char *group_name, unsigned char secret[GROUP_SECRET_BYTES]);
int group_secret_verify(const char *group_name, const unsigned char secret[GROUP_SECRET_BYTES]);
void group_secret_remove(const char *group_name);

#endif
