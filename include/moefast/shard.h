/* moefast/shard.h — expert parallelism: one model over several processes.
 *
 * The routed experts of every MoE layer are split into n_shards contiguous
 * ranges of expert ids (moe_shard_range). The process holding shard 0 runs
 * the model as usual — embedding, attention, routers, shared experts, dense
 * layers, the lm head, sampling — and computes its own experts; at each MoE
 * layer it sends the inputs of the tokens that chose another shard's experts
 * to that shard over a link, computes its own experts meanwhile, and waits
 * for the output rows. A process holding shard s > 0 loads the same file with
 * that shard and answers requests with a moe_shard_worker: it touches only
 * its experts' bytes. Every expert output row is the same dot products
 * wherever it is computed (the kernels' contract), and shard 0 combines them
 * in the router's rank order, so the logits are bit-identical to one process
 * for any shard count, thread count and batch (docs/SCALE.md).
 *
 * The library knows no transport: the link is the caller's (the CLI's is
 * MPI, tools/mpi.c). A request is a head (struct moe_shard_head, then
 * n_groups (expert, rows) pairs) and the rows (n_rows x n_embd floats); its
 * reply is n_rows x n_embd floats, in request order. */
#ifndef MOEFAST_SHARD_H
#define MOEFAST_SHARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct moe_model moe_model;

#define MOE_SHARD_MAGIC 0x584f454du   /* "MEOX" */
#define MOE_SHARD_VERSION 1

typedef struct moe_shard_head {
    uint32_t magic, version;
    int32_t layer;           /* an MoE layer */
    int32_t n_groups;        /* (expert, rows) pairs that follow the head, experts ascending */
    int32_t n_rows;          /* the sum of their rows */
    int32_t n_embd;          /* row length (floats), checked against the worker's model */
    int32_t capacity;        /* rows the sender may ever send in one request (sizes the worker once) */
    int32_t reserved;
} moe_shard_head;

typedef struct moe_shard_group { int32_t expert, rows; } moe_shard_group;

/* How shard 0 reaches the others. post starts one exchange with shard s
 * (1 <= s < n_shards): send head (head_bytes) and rows (rows_bytes; both stay
 * valid until wait returns) and receive the reply, exactly reply_bytes, into
 * reply. wait completes every posted exchange; it must be bounded (a shard
 * that does not answer is an error naming it, never a hang). Both return 0 or
 * a negative MOE_E* code with a one-line message in err. */
typedef struct moe_shard_link {
    void *user;
    int n_shards;
    int (*post)(void *user, int shard, const void *head, size_t head_bytes, const void *rows, size_t rows_bytes,
                void *reply, size_t reply_bytes, char *err, size_t errlen);
    int (*wait)(void *user, char *err, size_t errlen);
} moe_shard_link;

/* Experts [*first, *end) of n_expert belong to shard s of n: contiguous
 * ranges, sizes differing by at most one (the first n_expert % n one larger). */
void moe_shard_range(int n_expert, int shard, int n_shards, int *first, int *end);

/* A shard's server: computes requests for the experts of the shard its model
 * was loaded with (moe_load_params.shard). n_threads 0: available cores. */
typedef struct moe_shard_worker moe_shard_worker;
int  moe_shard_worker_new(moe_model *m, int n_threads, moe_shard_worker **out, char *err, size_t errlen);
void moe_shard_worker_free(moe_shard_worker *w);
/* Checks a request's head part (head_bytes as received: the head and its
 * groups) and gives the sizes of its rows and of the reply. MOE_EFORMAT
 * naming the field on a malformed head. */
int  moe_shard_request_sizes(const moe_shard_worker *w, const void *head, size_t head_bytes, size_t *rows_bytes,
                             size_t *reply_bytes, char *err, size_t errlen);
/* Runs one checked request: reply = the experts' output rows. Allocates only
 * when a request's capacity exceeds every earlier one. */
int  moe_shard_worker_run(moe_shard_worker *w, const void *head, const float *rows, float *reply, char *err,
                          size_t errlen);

#endif
