/* SPDX-License-Identifier: Apache-2.0 */
/* test_group_trust.c - a tensor-parallel rank refuses segments and directories it must not
 * trust (worker/group_trust.c): a segment others may read, a segment whose live "leader"
 * wrote offsets outside it, a segment without the group's secret, a runtime directory that
 * others may write or that is a link; as root (`test_group_trust foreign`, skipped
 * otherwise) a segment and a runtime directory of another user. Each refusal is a status
 * with a message naming the reason, never a crash or a wait.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/status.h"
#include "common/wire/endpoints.h"
#include "test_util.h"
#include "worker/group.h"
#include "worker/group_impl.h"

static char runtime[64];

/* Each test gets a private runtime directory (the key files live there). */
static int setup(void **state)
{
    (void)state;
    strcpy(runtime, "/tmp/deras-trust-XXXXXX");
    assert_non_null(mkdtemp(runtime));
    setenv("DERAS_RUNTIME_DIR", runtime, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", runtime);
    return system(cmd);
}

static void name_of(char *buf, size_t cap, const char *what)
{
    snprintf(buf, cap, "trust-%ld-%s", (long)getpid(), what);
}

/* A segment file made by hand, mode `mode`, holding a header; returns it mapped. */
static group_hdr *forge(const char *name, mode_t mode, size_t bytes, int *fd_out)
{
    char seg[160];
    assert_int_equal(group_segment_name(name, seg, sizeof seg), DERAS_OK);
    shm_unlink(seg);
    int fd = shm_open(seg, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, mode), 0);
    assert_int_equal(ftruncate(fd, (off_t)bytes), 0);
    group_hdr *h = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(h != MAP_FAILED);
    h->version = GROUP_VERSION;
    h->size = 2;
    h->bytes = bytes;
    h->ring_off = GROUP_ALIGN64(sizeof *h);
    h->ring_bytes = 64;
    h->comm_off = h->ring_off + 64;
    h->comm_bytes = 64;
    h->timeout_s = 5;
    h->max_batch_tokens = h->max_seqs = h->max_logits = h->block_size = 4;
    h->n_kv_blocks = h->max_blocks_per_seq = 4;
    assert_int_equal(shm_life_init(&h->life[0]), DERAS_OK);
    assert_int_equal(shm_life_hold(&h->life[0]), DERAS_OK); /* a live "leader": this process */
    atomic_store(&h->magic, GROUP_MAGIC);
    *fd_out = fd;
    return h;
}

static void unforge(const char *name, group_hdr *h, size_t bytes, int fd)
{
    char seg[160];
    group_segment_name(name, seg, sizeof seg);
    shm_life_release(&h->life[0]);
    munmap(h, bytes);
    close(fd);
    shm_unlink(seg);
}

static int join(const char *name, group_t **g)
{
    group_opts o = {.name = name, .rank = 1, .size = 2, .timeout_s = 2};
    return group_join(&o, g);
}

static void a_segment_others_may_read_is_refused(void **state)
{
    (void)state;
    char name[64];
    name_of(name, sizeof name, "mode");
    int fd;
    const size_t bytes = GROUP_ALIGN64(sizeof(group_hdr)) + 4096;
    group_hdr *h = forge(name, 0644, bytes, &fd);
    group_t *g = NULL;
    assert_int_equal(join(name, &g), DERAS_EINVAL);
    assert_null(g);
    assert_non_null(strstr(deras_errmsg(), "mode 0644"));
    printf("refused: %s\n", deras_errmsg());
    unforge(name, h, bytes, fd);
}

static void offsets_outside_the_segment_are_refused(void **state)
{
    (void)state;
    char name[64];
    name_of(name, sizeof name, "offsets");
    int fd;
    const size_t bytes = GROUP_ALIGN64(sizeof(group_hdr)) + 4096;
    group_hdr *h = forge(name, 0600, bytes, &fd);
    h->ring_bytes = (uint64_t)1 << 40; /* a region the attacker wants written far away */
    h->comm_off = (uint64_t)1 << 40;
    group_t *g = NULL;
    assert_int_equal(join(name, &g), DERAS_EFORMAT);
    assert_null(g);
    assert_non_null(strstr(deras_errmsg(), "do not fit"));
    printf("refused: %s\n", deras_errmsg());
    /* every header field that sizes something, one at a time */
    h->ring_bytes = 64;
    h->comm_off = h->ring_off + 64;
    assert_int_equal(group_hdr_check(h, bytes), DERAS_OK);
    h->bytes = bytes + 64;
    assert_int_equal(group_hdr_check(h, bytes), DERAS_EFORMAT);
    h->bytes = bytes;
    h->size = 65;
    assert_int_equal(group_hdr_check(h, bytes), DERAS_EFORMAT);
    h->size = 2;
    h->n_kv_blocks = -1;
    assert_int_equal(group_hdr_check(h, bytes), DERAS_EFORMAT);
    h->n_kv_blocks = 4;
    h->comm_bytes = UINT64_MAX; /* wraps if added carelessly */
    assert_int_equal(group_hdr_check(h, bytes), DERAS_EFORMAT);
    h->comm_bytes = 64;
    h->timeout_s = 0.0 / 0.0;
    assert_int_equal(group_hdr_check(h, bytes), DERAS_EFORMAT);
    h->timeout_s = 5;
    h->convert_weights = 1, h->weight_dtype = 12; /* Q4_K: never a conversion target */
    assert_int_equal(group_hdr_check(h, bytes), DERAS_EFORMAT);
    h->convert_weights = 2, h->weight_dtype = 8;
    assert_int_equal(group_hdr_check(h, bytes), DERAS_EFORMAT);
    h->convert_weights = 1;
    assert_int_equal(group_hdr_check(h, bytes), DERAS_OK);
    h->convert_weights = 0;
    assert_int_equal(group_hdr_check(h, sizeof *h - 1), DERAS_EFORMAT);
    unforge(name, h, bytes, fd);
}

static void a_segment_without_the_groups_secret_is_refused(void **state)
{
    (void)state;
    char name[64];
    name_of(name, sizeof name, "secret");
    model_config c = {.n_layers = 2, .d_model = 64, .n_heads = 4, .n_kv_heads = 2,
                      .head_dim = 16, .d_ff = 96, .vocab_size = 128, .max_seq_len = 64};
    model_opts mo = {.max_batch_tokens = 32, .max_seqs = 4, .max_logits = 4, .block_size = 4,
                     .n_kv_blocks = 17, .max_blocks_per_seq = 8, .max_copies = 4};
    group_opts o = {.name = name, .rank = 0, .size = 2, .timeout_s = 5};
    group_t *lead = NULL, *g = NULL;
    assert_int_equal(group_lead(&o, &c, &mo, 1024, &lead), DERAS_OK);
    char key[256];
    snprintf(key, sizeof key, "%s/tp-%s.key", runtime, name);
    struct stat st;
    assert_int_equal(stat(key, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* another key: the segment is no longer this group's */
    FILE *f = fopen(key, "w");
    assert_non_null(f);
    fputs("0123456789abcdef0123456789abcdef", f);
    fclose(f);
    assert_int_equal(join(name, &g), DERAS_EINVAL);
    assert_null(g);
    assert_non_null(strstr(deras_errmsg(), "secret"));
    printf("refused: %s\n", deras_errmsg());
    /* no key at all */
    unlink(key);
    assert_int_equal(join(name, &g), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "key file"));
    group_destroy(&lead);
}

static void runtime_directories_others_may_write_or_that_are_links_are_refused(void **state)
{
    (void)state;
    char buf[256], dir[128], link[160];
    snprintf(dir, sizeof dir, "%s/shared", runtime);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    setenv("DERAS_RUNTIME_DIR", dir, 1);
    assert_int_equal(endpoints_runtime_dir_checked(buf, sizeof buf), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "mode 0777"));
    printf("refused: %s\n", deras_errmsg());
    /* the leader cannot start its group there: its key file would be in reach of others */
    model_config c = {.n_layers = 2, .d_model = 64, .n_heads = 4, .n_kv_heads = 2,
                      .head_dim = 16, .d_ff = 96, .vocab_size = 128, .max_seq_len = 64};
    model_opts mo = {.max_batch_tokens = 32, .max_seqs = 4, .max_logits = 4, .block_size = 4,
                     .n_kv_blocks = 17, .max_blocks_per_seq = 8, .max_copies = 4};
    char name[64];
    name_of(name, sizeof name, "dir");
    group_opts o = {.name = name, .rank = 0, .size = 2, .timeout_s = 5};
    group_t *lead = NULL;
    assert_int_equal(group_lead(&o, &c, &mo, 1024, &lead), DERAS_EINVAL);
    assert_null(lead);
    snprintf(link, sizeof link, "%s/link", runtime);
    assert_int_equal(chmod(dir, 0700), 0);
    assert_int_equal(symlink(dir, link), 0);
    setenv("DERAS_RUNTIME_DIR", link, 1);
    assert_int_equal(endpoints_runtime_dir_checked(buf, sizeof buf), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "symbolic link"));
    char ep[300];
    snprintf(ep, sizeof ep, "ipc://%s/admin.sock", link);
    assert_int_equal(endpoints_prepare_bind(ep), DERAS_EINVAL);
    setenv("DERAS_RUNTIME_DIR", runtime, 1);
}

/* As root: another user's segment and runtime directory (chown to nobody). */
static void another_users_segment_and_directory_are_refused(void **state)
{
    (void)state;
    char name[64];
    name_of(name, sizeof name, "owner");
    int fd;
    const size_t bytes = GROUP_ALIGN64(sizeof(group_hdr)) + 4096;
    group_hdr *h = forge(name, 0600, bytes, &fd);
    assert_int_equal(fchown(fd, 65534, 65534), 0);
    group_t *g = NULL;
    assert_int_equal(join(name, &g), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "belongs to uid 65534"));
    printf("refused: %s\n", deras_errmsg());
    unforge(name, h, bytes, fd);
    char dir[128], buf[256];
    snprintf(dir, sizeof dir, "%s/theirs", runtime);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(chown(dir, 65534, 65534), 0);
    setenv("DERAS_RUNTIME_DIR", dir, 1);
    assert_int_equal(endpoints_runtime_dir_checked(buf, sizeof buf), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "belongs to uid 65534"));
    printf("refused: %s\n", deras_errmsg());
    setenv("DERAS_RUNTIME_DIR", runtime, 1);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "foreign")) {
        if (getuid() != 0)
            test_skip("another user's files can only be made as root");
        const struct CMUnitTest foreign[] = {
            cmocka_unit_test_setup_teardown(another_users_segment_and_directory_are_refused,
                                            setup, teardown),
        };
        return cmocka_run_group_tests(foreign, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_segment_others_may_read_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(offsets_outside_the_segment_are_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_segment_without_the_groups_secret_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            runtime_directories_others_may_write_or_that_are_links_are_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
