/* main.c — bin/deform, the offline tool: one binary, one subcommand per file.
 *
 * Subcommands live in tools/deform/cmd_<name>.c and export
 * `int cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand name).
 * They are referenced weakly so the tool builds while a subcommand is absent.
 * Exit status: 0 success, 1 failure (message on stderr), 2 usage error.
 */
#include "df.h"
#include <stdio.h>
#include <string.h>

int cmd_import(int argc, char **argv) __attribute__((weak));
int cmd_eval(int argc, char **argv) __attribute__((weak));
int cmd_compare(int argc, char **argv) __attribute__((weak));
int cmd_info(int argc, char **argv) __attribute__((weak));
int cmd_decompose(int argc, char **argv) __attribute__((weak));
int cmd_rigdata(int argc, char **argv) __attribute__((weak));
int cmd_train(int argc, char **argv) __attribute__((weak));
int cmd_retarget(int argc, char **argv) __attribute__((weak));

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} cmds[] = {
    {"import", cmd_import, "import ASSET --repository DIR --name NAME   import a rigged character through assimp"},
    {"eval", cmd_eval, "eval MODEL [--clip C] [--fps R] [--frames a:b] --out F.npy   evaluate a clip"},
    {"compare", cmd_compare, "compare A.npy B.npy   max/mean vertex error"},
    {"info", cmd_info, "info MODEL|FILE   describe a model or safetensors file"},
    {"decompose", cmd_decompose, "decompose INPUT --bones B --repository DIR --name NAME   skinning decomposition"},
    {"rigdata", cmd_rigdata, "rigdata ...   generate a rig-approximation dataset with the reference deformer"},
    {"train", cmd_train, "train ...   train a rigapprox model from a dataset"},
    {"retarget", cmd_retarget, "retarget build|apply|keyframes|transfer ...   facial performance retargeting models"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: deform COMMAND [ARGS]   (deformd %s)\n\ncommands:\n", DF_VERSION);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (cmds[i].fn) fprintf(f, "  %s\n", cmds[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) { printf("deform %s\n", DF_VERSION); return 0; }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name) && cmds[i].fn)
            return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "deform: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
