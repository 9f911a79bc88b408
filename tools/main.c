/* main.c — `moefast <command> ...` dispatcher. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "moefast.h"

/* Commands are linked weakly while they are being built in parallel; a
 * missing one reports itself instead of breaking the build. */
#pragma weak cmd_run
#pragma weak cmd_info
#pragma weak cmd_gen
#pragma weak cmd_quantize
#pragma weak cmd_tokenize
#pragma weak cmd_chat
#pragma weak cmd_trace
#pragma weak cmd_gate
#pragma weak cmd_bisect
#pragma weak cmd_flags
#pragma weak cmd_bench
#pragma weak cmd_price
#pragma weak cmd_serve
#pragma weak cmd_toolcheck

typedef struct { const char *name; int (*fn)(int, char **); const char *help; } command;

static const command COMMANDS[] = {
    {"run", cmd_run, "generate text:   run -m FILE (-p TEXT | -f FILE | --tokens IDS | --batch FILE) -n N [-t THREADS] [sampling] [--json] [--check TRACE]"},
    {"chat", cmd_chat, "interactive chat: chat -m FILE [--system TEXT] [--chat-format NAME]"},
    {"info", cmd_info, "describe a GGUF:  info FILE"},
    {"tokenize", cmd_tokenize, "text to ids:      tokenize -m FILE (TEXT | -f FILE) [--json]"},
    {"gen", cmd_gen, "write a model:    gen --arch ARCH --preset tiny|default|bench -o FILE [key=value ...]"},
    {"quantize", cmd_quantize, "re-encode:        quantize IN OUT TYPE [--type-experts TYPE]"},
    {"trace", cmd_trace, "golden trace:     trace record -m FILE (-p TEXT | -f FILE | --tokens IDS) --steps N -o FILE"},
    {"gate", cmd_gate, "replay a trace:   gate -m FILE TRACE [--mode teacher|free] [--steps N]"},
    {"bisect", cmd_bisect, "find bad flags:   bisect -m FILE TRACE"},
    {"flags", cmd_flags, "list optimisation flags"},
    {"bench", cmd_bench, "time the windows: bench -m FILE [-t N] [--json]"},
    {"serve", cmd_serve, "OpenAI server:    serve -m FILE [--host ADDR] [--port N] [--slots N] [--ctx N] [--api-key KEY]"},
    {"toolcheck", cmd_toolcheck, "tool-call conformance: toolcheck URL [--model M] [--json FILE] [--csv FILE]"},
    {"price", cmd_price, "A/B pricing:      price -m FILE --a SPEC --b SPEC [--pairs N]"},
};

static void usage(FILE *f) {
    fprintf(f, "moefast — exact, fast mixture-of-experts inference\n\nusage: moefast <command> [options]\n\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-9s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\nEnvironment: MOEFAST_ISA=scalar|avx2|avx512, MOEFAST_FLAGS=spec, MOEFAST_DIFF=1\n");
    fprintf(f, "Several machines: mpirun -np N moefast run|bench|serve|gate|trace|chat ... (the experts sharded over\n"
               "the ranks, the same tokens as one process; docs/SCALE.md)%s\n", cli_mpi_built() ? "" : " — not in this build");
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        if (strcmp(argv[1], COMMANDS[i].name) != 0) continue;
        if (!COMMANDS[i].fn) {
            fprintf(stderr, "moefast: command '%s' is not built into this binary\n", argv[1]);
            return 2;
        }
        return COMMANDS[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "moefast: unknown command '%s' (see moefast --help)\n", argv[1]);
    return 2;
}

int main(int argc, char **argv) {
    int rc = 0;
    if (cli_mpi_begin(argc, argv, &rc)) return rc;   /* an MPI rank > 0: it served rank 0 */
    return cli_mpi_end(dispatch(argc, argv));
}
