/* cli.h — the moefast command-line tool: one cmd_<name>() per sub-command,
 * each in tools/cmd_<name>.c, using only the public API (include/moefast.h).
 * Each returns the process exit status: 0 success, 1 a negative result
 * (a gate divergence, a rejected price), 2 an error (message already printed
 * to stderr as one line "moefast <cmd>: ..."). argv[0] is the sub-command name. */
#ifndef MOE_CLI_H
#define MOE_CLI_H

#include "moefast.h"

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_gate(int argc, char **argv);
int cmd_bisect(int argc, char **argv);
int cmd_flags(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_price(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_toolcheck(int argc, char **argv);

/* Shared argument helpers (tools/cli_util.c). */
/* Parses a decimal int in [lo, hi]; prints "moefast <cmd>: bad value for <opt>: ..." and returns -1 on error. */
int cli_parse_int(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out);
/* "1,2,3" -> ids (malloc'd into *ids); -1 with a message on error. */
int cli_parse_ids(const char *cmd, const char *s, int **ids, int *n);
/* The sampling options shared by run and chat (--temp, --top-k, --top-p,
 * --min-p, --seed, --presence-penalty, --frequency-penalty, --repeat-penalty,
 * --repeat-last-n): 1 when a was one of them (its value v parsed into *cs),
 * 0 when it was not, -1 after printing an error. cli_sampler_new makes the
 * sampler they describe (-1 after printing an error); n_ctx is what
 * --repeat-last-n -1 means. The caller passes the prompt's tokens to
 * moe_sampler_accept_context (the repeat penalty's window counts them). */
typedef struct cli_sampling {
    moe_sampler_params p;
    float presence, frequency;
    float repeat;                   /* 0 (unset) or 1: off */
    int repeat_last_n;              /* with repeat_last_n_set; else 64 (llama.cpp's default) */
    bool repeat_last_n_set;
} cli_sampling;
int cli_sampling_arg(const char *cmd, const char *a, const char *v, cli_sampling *cs);
/* The RoPE scaling options of the commands that load a model for use (run,
 * chat, serve, bench), llama.cpp's names: --rope-scaling none|yarn,
 * --rope-scale F (the YaRN factor), --yarn-orig-ctx N, into lp (1 when a
 * was one of them, 0 when not, -1 after printing an error). */
int cli_rope_arg(const char *cmd, const char *a, const char *v, moe_load_params *lp);
#define CLI_ROPE_USAGE \
    "  --rope-scaling none|yarn  RoPE scaling past the trained context (default: the file's)\n" \
    "  --rope-scale F            YaRN factor (e.g. 4 for Qwen3 at 131072 over 32768)\n" \
    "  --yarn-orig-ctx N         YaRN's original context (default: the file's, else trained)\n"

int cli_sampler_new(const char *cmd, const cli_sampling *cs, int n_vocab, int n_ctx, moe_sampler **out);
/* `moefast run --batch FILE` (tools/run_batch.c): the prompts of FILE (one
 * per line, "-" for stdin) generated together in one context. */
typedef struct run_batch_opts {
    long n_gen, threads, n_ctx, n_batch;
    cli_sampling sampling;
    bool json, stop_eos;
    const struct moe_grammar *grammar;   /* --grammar / --json-schema: every prompt constrained (NULL: none) */
} run_batch_opts;
int run_batch(const char *cmd, struct moe_model *m, const char *file, const run_batch_opts *o);
/* `run --check TRACE` (tools/run_check.c). cli_check_open loads the trace
 * and checks that it belongs to m (before the run, so a wrong file fails
 * fast); cli_check_gate replays it with n_threads threads and prints one line
 * to stderr, "check: this machine reproduced all N golden tokens ..." or
 * "check: FAIL: ...". Both return 0, 1 (a divergence) or 2 (an error,
 * printed as "moefast <cmd>: --check: ..."). */
struct moe_model;
struct moe_trace;
int cli_check_open(const char *cmd, const char *trace_path, struct moe_model *m, struct moe_trace **out);
int cli_check_gate(const char *cmd, struct moe_model *m, const struct moe_trace *t, const char *trace_path,
                   int n_threads);
/* The largest prompt file cli_read_prompt accepts. */
#define CLI_PROMPT_MAX ((size_t)64 << 20)
/* Reads a whole prompt file ("-" is standard input) into *buf (malloc'd,
 * NUL-terminated; *len bytes). A missing or unreadable file, one over
 * CLI_PROMPT_MAX or an empty one: prints one line "moefast <cmd>: ..." and
 * returns -1. Every command's -f goes through here. */
int cli_read_prompt(const char *cmd, const char *path, char **buf, size_t *len);
/* Warns (one line on stderr) when n_ctx is past the model's trained
 * context, or says that YaRN rope scaling covers it. */
struct moe_model;
void cli_check_ctx(const char *cmd, const struct moe_model *m, long n_ctx);
/* Prints "moefast <cmd>: <msg>" to stderr and returns 2. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The model's numerics, for the lines run and serve print: "fp32" (the exact
 * default) or its numerics flags ("+act_q8,+kv_f16"; docs/EXACTNESS.md). */
const char *cli_numerics(const struct moe_model *m, char *buf, size_t len);

/* Expert parallelism over MPI (tools/mpi.c, docs/SCALE.md). main calls
 * cli_mpi_begin first: under `mpirun -np N` (N > 1) it returns 1 on ranks
 * > 0 after they served rank 0 (exit status in *rc), 0 on rank 0 and
 * outside MPI; then cli_mpi_end(status) on the way out. Commands load their
 * model with cli_model_load: moe_model_load, or under MPI shard 0 of N with
 * the MPI link, after every rank reported that it loaded the same file. */
int cli_mpi_begin(int argc, char **argv, int *rc);
int cli_mpi_end(int rc);
bool cli_mpi_built(void);   /* this binary was built with MPI */
int cli_model_load(const char *path, const moe_load_params *lp, moe_model **m, char *err, size_t errlen);

#endif
