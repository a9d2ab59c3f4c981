/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_tokenizer.c - libFuzzer target for the tokenizer.
 *
 * The first input byte picks a tokenizer (two small fixtures of tests/data/tokenizer: the
 * SentencePiece-style one with byte fallback, and the NFC-normalizing byte-level one with
 * lstrip/rstrip added tokens) and a mode:
 *  - text: the rest is encoded with add_special / parse_special from the flag bits; invalid
 *    UTF-8 must give DERAS_EFORMAT (checked against our own validator), valid text must
 *    encode, and its ids must decode, and stream through detok_push, to the same text;
 *  - ids: the rest is read as little-endian 16-bit ids (some past the vocabulary), decoded
 *    (out-of-range ids must be DERAS_ERANGE) and pushed through the streaming
 *    detokenizer, whose chunks must each be valid UTF-8 and add up to decode's output.
 * Any violated invariant aborts, so libFuzzer reports it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/tokenizer/tokenizer.h"
#include "common/base/utf8.h"

#ifndef DERAS_DATA_DIR
#error "DERAS_DATA_DIR must name tests/data"
#endif

static tokenizer_t *toks[2];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    static const char *dirs[2] = {DERAS_DATA_DIR "/tokenizer/hf_spm_bytefallback",
                                  DERAS_DATA_DIR "/tokenizer/hf_qwen2_nfc"};
    for (int i = 0; i < 2; i++) {
        if (tokenizer_from_hf_dir(dirs[i], &toks[i]) != DERAS_OK) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", deras_errmsg());
            abort();
        }
    }
    return 0;
}

/* Decode ids, stream them, and check the two agree; aborts on any broken invariant. */
static void check_stream(const tokenizer_t *t, const int32_t *ids, size_t n, bool skip)
{
    size_t need = 0;
    char probe[1];
    int rc = tokenizer_decode(t, ids, n, skip, probe, sizeof probe, &need);
    if (rc != DERAS_OK && rc != DERAS_ERANGE)
        abort();
    char *dec = malloc(need + 1);
    size_t dl;
    if (tokenizer_decode(t, ids, n, skip, dec, need + 1, &dl) != DERAS_OK || dl != need)
        abort();
    if (utf8_valid_prefix(dec, dl) != dl)
        abort();
    detok_t *d = NULL;
    if (detok_new(t, skip, true, &d) != DERAS_OK)
        abort();
    size_t cap = detok_max_output(d), pos = 0;
    char *chunk = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        size_t got;
        rc = i < n ? detok_push(d, ids[i], chunk, cap, &got) : detok_flush(d, chunk, cap, &got);
        if (rc != DERAS_OK || utf8_valid_prefix(chunk, got) != got || pos + got > dl ||
            memcmp(dec + pos, chunk, got) != 0)
            abort();
        pos += got;
    }
    if (pos != dl)
        abort();
    detok_destroy(&d);
    free(chunk);
    free(dec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const tokenizer_t *t = toks[data[0] & 1];
    bool ids_mode = data[0] & 2, add = data[0] & 4, parse = data[0] & 8, skip = data[0] & 16;
    data++;
    size--;
    if (!ids_mode) {
        const char *text = (const char *)data;
        size_t cap = size * 4 + 8, n = 0;
        int32_t *ids = malloc(cap * sizeof *ids);
        int rc = tokenizer_encode(t, text, size, add, parse, ids, cap, &n);
        bool valid = utf8_valid_prefix(text, size) == size;
        if (valid ? rc != DERAS_OK : rc != DERAS_EFORMAT)
            abort();
        if (valid)
            check_stream(t, ids, n, skip);
        free(ids);
        return 0;
    }
    size_t n = size / 2, m = 0;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    int vocab = tokenizer_vocab_size(t);
    bool out_of_range = false;
    for (size_t i = 0; i < n; i++) {
        int32_t id = (int32_t)(data[2 * i] | (data[2 * i + 1] << 8));
        if (id >= vocab + 16)
            id %= vocab; /* mostly valid ids, a few just past the end */
        out_of_range = out_of_range || id >= vocab;
        ids[m++] = id;
    }
    if (out_of_range) {
        char out[16];
        size_t got;
        if (tokenizer_decode(t, ids, m, skip, out, sizeof out, &got) != DERAS_ERANGE)
            abort();
    } else {
        check_stream(t, ids, m, skip);
    }
    free(ids);
    return 0;
}
