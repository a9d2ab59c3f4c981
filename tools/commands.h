/* SPDX-License-Identifier: Apache-2.0 */
/* commands.h - entry points of the `deras` subcommands (tools/cmd_*.c).
 *
 * Each takes the subcommand's own argv (argv[0] is the subcommand name) and returns the
 * process exit status: 0 success, 1 failure (message already printed), 2 usage error.
 */
#ifndef DERAS_COMMANDS_H
#define DERAS_COMMANDS_H

int cmd_generate(int argc, char **argv);
int cmd_kvcalc(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_complete(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_chat(int argc, char **argv);

#endif
