/* SPDX-License-Identifier: Apache-2.0 */
/* deras.c - the `deras` command: one binary, one subcommand per job.
 *
 *   deras generate   load a model and stream a completion to stdout (this machine, no server)
 *   deras kvcalc     KV-cache and weight memory of a model, and what fits on a device
 *   deras serve      a router and its workers in the foreground
 *   deras complete   stream a completion from a running deras-router (the C client)
 *   deras chat       an interactive chat with the model behind a deras-router
 *   deras bench      load generator for deras-router (ZeroMQ or HTTP): throughput, TTFT,
 *                    TPOT, latency
 *
 * Each subcommand lives in its own cmd_*.c with a `cmd_NAME(argc, argv)` entry returning
 * the process exit status; this file only dispatches.
 */
#include <stdio.h>
#include <string.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "common/cli/version.h"
#include "kernels/backend.h"
#include "tools/commands.h"

static void usage(FILE *f)
{
    fputs("usage: deras COMMAND [options]\n"
          "\n"
          "commands:\n"
          "  generate   stream a completion from a model on this machine\n"
          "  kvcalc     KV-cache and weight memory of a model, and what fits on a device\n"
          "  serve      run a router and its workers (one per GPU, or a CPU worker)\n"
          "  complete   stream a completion from a running deras-router\n"
          "  chat       chat with the model behind a running deras-router\n"
          "  bench      load deras-router with requests; report throughput and latency\n"
          "\n"
          "Run `deras COMMAND --help` for a command's options, `deras --version` for what this\n"
          "build is and what CUDA it finds here.\n",
          f);
}

int main(int argc, char **argv)
{
    if (log_init()) {
        fprintf(stderr, "deras: %s\n", deras_errmsg());
        return 2;
    }
    log_set_name("deras");
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        char cuda[600];
        version_print("deras", stdout);
        backend_describe_cuda(cuda, sizeof cuda);
        printf("cuda here: %s\n", cuda);
        return 0;
    }
    if (!strcmp(argv[1], "generate"))
        return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(argv[1], "kvcalc"))
        return cmd_kvcalc(argc - 1, argv + 1);
    if (!strcmp(argv[1], "serve"))
        return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(argv[1], "complete"))
        return cmd_complete(argc - 1, argv + 1);
    if (!strcmp(argv[1], "chat"))
        return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench"))
        return cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "deras: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
