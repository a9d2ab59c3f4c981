/* SPDX-License-Identifier: Apache-2.0 */
/* test_template_corpus - every real chat template in $DERAS_CHAT_TEMPLATES (the outside
 * collection in ../shared/chat-templates, used in place), plus the test model's own
 * template (GGUF tokenizer.chat_template), rendered by deras' interpreter and by Jinja2
 * in transformers' environment (tests/ref/jinja_reference.py) for every conversation of
 * tests/data/template/conversations.json.
 *
 * A template passes when deras compiles it and every case matches: the same bytes, or an
 * error on both sides (raise_exception and the like); or when deras refuses it at compile
 * time (then it is listed with the reason). Anything else - a different byte, one side
 * failing alone, a template Jinja2 cannot compile that deras accepts - fails the test. The
 * summary says how many rendered identical and which were refused.
 *
 *     test_template_corpus [-v]     (-v: also list every template's result)
 *
 * Skips (77) when the templates, python3 or its jinja2 are missing.
 */
#include "common/base/status.h"
#include "common/checkpoint/gguf.h"
#include "common/template/template.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef DERAS_SOURCE_DIR
#define DERAS_SOURCE_DIR "."
#endif

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    *n = buf ? fread(buf, 1, (size_t)len, f) : 0;
    if (buf)
        buf[*n] = 0;
    fclose(f);
    return buf;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) < 0)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Where two outputs first differ, with some context, for the failure message. */
static void show_diff(const char *want, size_t wn, const char *got, size_t gn)
{
    size_t i = 0;
    while (i < wn && i < gn && want[i] == got[i])
        i++;
    size_t from = i > 60 ? i - 60 : 0;
    printf("      first difference at byte %zu (jinja2 %zu bytes, deras %zu bytes)\n", i, wn, gn);
    printf("      jinja2: \"%.*s\"\n", (int)((wn - from) < 160 ? wn - from : 160), want + from);
    printf("      deras:  \"%.*s\"\n", (int)((gn - from) < 160 ? gn - from : 160), got + from);
}

/* The test model's template, written where the reference script can read it. */
static char *model_template(const char *dir)
{
    const char *model = getenv("DERAS_TEST_MODEL");
    gguf_t *g = NULL;
    if (!model || gguf_open(model, &g))
        return NULL;
    const char *s;
    size_t n;
    char *path = NULL;
    if (!gguf_get_str(g, "tokenizer.chat_template", &s, &n)) {
        path = malloc(strlen(dir) + 64);
        sprintf(path, "%s/SmolLM2-135M-Instruct.gguf.jinja", dir);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(s, 1, n, f) != n) {
            free(path);
            path = NULL;
        }
        if (f)
            fclose(f);
    }
    gguf_destroy(&g);
    return path;
}

int main(int argc, char **argv)
{
    bool verbose = argc > 1 && !strcmp(argv[1], "-v");
    const char *dir = getenv("DERAS_CHAT_TEMPLATES"), *data = getenv("DERAS_TEST_DATA");
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) {
        printf("SKIP: no chat templates at DERAS_CHAT_TEMPLATES=%s\n", dir ? dir : "(unset)");
        return 77;
    }
    char *py_check[] = {"python3", "-c", "import jinja2", NULL};
    if (run(py_check) != 0) {
        closedir(d);
        printf("SKIP: python3 with jinja2 (python3-jinja2) is needed for the reference\n");
        return 77;
    }
    char **files = NULL;
    size_t n_files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l > 6 && !strcmp(e->d_name + l - 6, ".jinja")) {
            files = realloc(files, (n_files + 1) * sizeof *files);
            files[n_files] = malloc(strlen(dir) + l + 2);
            sprintf(files[n_files++], "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    qsort(files, n_files, sizeof *files, cmp_str);
    char tmpdir[] = "/tmp/deras-tmpl-XXXXXX";
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    char *smol = model_template(tmpdir);
    if (smol) {
        files = realloc(files, (n_files + 1) * sizeof *files);
        files[n_files++] = smol;
    }

    char cases_path[4096], ref_path[4200], script[4096];
    snprintf(cases_path, sizeof cases_path, "%s/template/conversations.json", data ? data : "tests/data");
    snprintf(ref_path, sizeof ref_path, "%s/reference.json", tmpdir);
    snprintf(script, sizeof script, "%s/tests/ref/jinja_reference.py", DERAS_SOURCE_DIR);
    char **pargv = calloc(n_files + 5, sizeof *pargv);
    pargv[0] = "python3";
    pargv[1] = script;
    pargv[2] = cases_path;
    pargv[3] = ref_path;
    for (size_t i = 0; i < n_files; i++)
        pargv[4 + i] = files[i];
    if (run(pargv) != 0) {
        printf("FAIL: the reference script failed\n");
        return 1;
    }
    free(pargv);
    json_error_t je;
    json_t *ref = json_load_file(ref_path, 0, &je), *cases_doc = json_load_file(cases_path, 0, &je);
    if (!ref || !cases_doc) {
        printf("FAIL: cannot read %s or %s: %s\n", ref_path, cases_path, je.text);
        return 1;
    }
    json_t *cases = json_object_get(cases_doc, "cases"), *refs = json_object_get(ref, "templates");
    printf("reference: jinja2 %s, %zu templates x %zu conversations\n",
           json_string_value(json_object_get(ref, "jinja2")), n_files, json_object_size(cases));

    int n_identical = 0, n_refused = 0, n_failed = 0, n_texts = 0, n_raised = 0;
    char refused[8192] = "";
    bool smol_ok = false;
    for (size_t fi = 0; fi < n_files; fi++) {
        const char *base = strrchr(files[fi], '/') + 1;
        json_t *r = json_object_get(refs, base);
        size_t len = 0;
        char *src = slurp(files[fi], &len);
        tmpl_t *t = NULL;
        int st = tmpl_compile(src, len, NULL, &t);
        free(src);
        if (st) {
            if (json_object_get(r, "compile_error")) {
                n_identical++; /* Jinja2 refuses it too */
                if (verbose)
                    printf("  %-58s both refuse: %s\n", base, deras_errmsg());
                continue;
            }
            n_refused++;
            size_t k = strlen(refused);
            snprintf(refused + k, sizeof refused - k, "    %s: %s %s\n", base,
                     deras_status_name(st), deras_errmsg());
            continue;
        }
        if (!json_object_get(r, "cases")) {
            printf("  FAIL %s: jinja2 refuses it (%s), deras compiled it\n", base,
                   json_string_value(json_object_get(r, "compile_error")));
            n_failed++;
            tmpl_destroy(&t);
            continue;
        }
        bool ok = true;
        int texts = 0, raised = 0;
        const char *cname;
        json_t *ctx;
        json_object_foreach(cases, cname, ctx) {
            json_t *want = json_object_get(json_object_get(r, "cases"), cname);
            json_t *wtext = json_object_get(want, "text");
            char *out = NULL;
            size_t out_len = 0;
            st = tmpl_render(t, ctx, &out, &out_len);
            if (wtext && !st && json_string_length(wtext) == out_len &&
                !memcmp(json_string_value(wtext), out, out_len)) {
                texts++;
            } else if (!wtext && st) {
                raised++;
                if (verbose)
                    printf("    [%s] raised: jinja2 \"%s\" / deras %s \"%s\"\n", cname,
                           json_string_value(json_object_get(want, "error")),
                           deras_status_name(st), deras_errmsg());
            } else {
                ok = false;
                printf("  FAIL %s [%s]: ", base, cname);
                if (wtext && st)
                    printf("deras failed: %s %s\n", deras_status_name(st), deras_errmsg());
                else if (!wtext)
                    printf("jinja2 failed (%s), deras rendered %zu bytes\n",
                           json_string_value(json_object_get(want, "error")), out_len);
                else {
                    printf("output differs\n");
                    show_diff(json_string_value(wtext), json_string_length(wtext), out, out_len);
                }
            }
            free(out);
        }
        tmpl_destroy(&t);
        if (ok) {
            n_identical++;
            n_texts += texts;
            n_raised += raised;
            if (smol && files[fi] == smol)
                smol_ok = true;
            if (verbose)
                printf("  %-58s identical (%d rendered, %d raised in both)\n", base, texts, raised);
        } else {
            n_failed++;
        }
    }
    printf("template corpus: %zu templates: %d rendered identical to jinja2 (%d renders "
           "byte-identical, %d raised in both), %d refused at compile time, %d failed\n",
           n_files, n_identical, n_texts, n_raised, n_refused, n_failed);
    if (n_refused)
        printf("  refused:\n%s", refused);
    if (smol)
        printf("test model template (SmolLM2, from GGUF): %s\n", smol_ok ? "identical" : "NOT identical");
    else
        printf("test model template: test model absent, not checked\n");
    unlink(ref_path);
    if (smol)
        unlink(smol);
    rmdir(tmpdir);
    for (size_t i = 0; i < n_files; i++)
        free(files[i]);
    free(files);
    json_decref(ref);
    json_decref(cases_doc);
    return n_failed ? 1 : 0;
}
