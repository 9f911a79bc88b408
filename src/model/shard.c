/* shard.c — expert parallelism (include/moefast/shard.h): the expert ranges
 * of the shards and a shard's worker, which checks a request and runs it
 * with the MoE block's own expert jobs (blocks.h: moe_shard_experts). Shard
 * 0's side is in blocks/ffn.c (post_remote, wait_remote). */
#include <stdlib.h>
#include <string.h>

#include "model/blocks.h"
#include "base/util.h"

void moe_shard_range(int n_expert, int shard, int n_shards, int *first, int *end) {
    if (n_shards < 1 || shard < 0 || shard >= n_shards || n_expert < 0) {
        *first = *end = 0;
        return;
    }
    const int q = n_expert / n_shards, r = n_expert % n_shards;
    *first = shard * q + (shard < r ? shard : r);
    *end = *first + q + (shard < r);
}

struct moe_shard_worker {
    moe_model *m;
    int n_threads;
    int capacity;            /* rows the context's buffers hold (n_batch x n_expert_used) */
    moe_context *c;          /* scratch and the pool; no step is ever run on it */
    moe_shard_group *groups; /* [n_expert]: a request's groups, copied out of its head */
};

/* Buffers for requests of up to `capacity` rows: a context of n_batch =
 * capacity / n_expert_used tokens (its expert rows), one sequence. */
static int worker_reserve(moe_shard_worker *w, int capacity, char *err, size_t errlen) {
    if (capacity <= w->capacity) return MOE_OK;
    const int K = w->m->hp.n_expert_used;
    const int nb = (capacity + K - 1) / K;
    moe_context *c = NULL;
    moe_context_params p = {nb, w->n_threads, nb, 1};
    const int rc = moe_context_create(w->m, &p, w->m->flags, NULL, &c, err, errlen);
    if (rc) return rc;
    moe_context_free(w->c);
    w->c = c;
    w->capacity = nb * K;
    return MOE_OK;
}

int moe_shard_worker_new(moe_model *m, int n_threads, moe_shard_worker **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "moe_shard_worker_new: out is NULL");
    *out = NULL;
    if (!m || m->vocab_only || m->n_shards < 2 || m->shard < 1)
        return moe_errf(err, errlen, MOE_EINVAL, "moe_shard_worker_new: the model is not loaded as a shard > 0 "
                        "(moe_load_params.shard, n_shards)");
    moe_shard_worker *w = calloc(1, sizeof *w);
    if (!w) return moe_errf(err, errlen, MOE_ENOMEM, "out of memory");
    w->m = m;
    w->n_threads = n_threads;
    w->groups = malloc((size_t)m->hp.n_expert * sizeof *w->groups);
    if (!w->groups) { free(w); return moe_errf(err, errlen, MOE_ENOMEM, "out of memory"); }
    const int rc = worker_reserve(w, m->hp.n_expert_used, err, errlen);   /* one token's worth now */
    if (rc) { free(w->groups); free(w); return rc; }
    *out = w;
    return MOE_OK;
}

void moe_shard_worker_free(moe_shard_worker *w) {
    if (!w) return;
    moe_context_free(w->c);
    free(w->groups);
    free(w);
}

#define BAD(...) moe_errf(err, errlen, MOE_EFORMAT, __VA_ARGS__)

int moe_shard_request_sizes(const moe_shard_worker *w, const void *head, size_t head_bytes, size_t *rows_bytes,
                            size_t *reply_bytes, char *err, size_t errlen) {
    if (!w || !head || !rows_bytes || !reply_bytes) return moe_errf(err, errlen, MOE_EINVAL, "shard request: NULL");
    const moe_model *m = w->m;
    const moe_hparams *hp = &m->hp;
    moe_shard_head h;
    if (head_bytes < sizeof h) return BAD("shard request: %zu bytes, shorter than its head (%zu)", head_bytes, sizeof h);
    memcpy(&h, head, sizeof h);
    if (h.magic != MOE_SHARD_MAGIC) return BAD("shard request: field 'magic' is 0x%08x, not 0x%08x", h.magic, MOE_SHARD_MAGIC);
    if (h.version != MOE_SHARD_VERSION)
        return BAD("shard request: field 'version' is %u, this build speaks %d", h.version, MOE_SHARD_VERSION);
    if (h.layer < 0 || h.layer >= hp->n_layer || m->layers[h.layer].dense)
        return BAD("shard request: field 'layer' = %d is not an MoE layer of %s (%d layers)", h.layer, m->path,
                   hp->n_layer);
    if (h.n_embd != hp->n_embd)
        return BAD("shard request: field 'n_embd' = %d, the model's is %d (different model files?)", h.n_embd, hp->n_embd);
    if (h.n_groups < 1 || h.n_groups > m->ex_end - m->ex_first)
        return BAD("shard request: field 'n_groups' = %d, this shard has %d experts", h.n_groups, m->ex_end - m->ex_first);
    if (head_bytes != sizeof h + (size_t)h.n_groups * sizeof(moe_shard_group))
        return BAD("shard request: %zu head bytes for %d groups (expected %zu)", head_bytes, h.n_groups,
                   sizeof h + (size_t)h.n_groups * sizeof(moe_shard_group));
    if (h.capacity < 1 || h.capacity > 65536 * hp->n_expert_used || h.n_rows < 1 || h.n_rows > h.capacity)
        return BAD("shard request: fields 'n_rows' = %d, 'capacity' = %d out of range", h.n_rows, h.capacity);
    const uint8_t *gp = (const uint8_t *)head + sizeof h;
    int64_t sum = 0, prev = m->ex_first - 1;
    for (int i = 0; i < h.n_groups; i++) {
        moe_shard_group g;
        memcpy(&g, gp + (size_t)i * sizeof g, sizeof g);
        if (g.expert <= prev || g.expert >= m->ex_end)
            return BAD("shard request: group %d: expert %d is not this shard's next expert (experts %d..%d, ascending)",
                       i, g.expert, m->ex_first, m->ex_end - 1);
        if (g.rows < 1) return BAD("shard request: group %d: %d rows", i, g.rows);
        prev = g.expert;
        sum += g.rows;
    }
    if (sum != h.n_rows) return BAD("shard request: the groups hold %lld rows, field 'n_rows' says %d", (long long)sum, h.n_rows);
    *rows_bytes = *reply_bytes = (size_t)h.n_rows * (size_t)hp->n_embd * sizeof(float);
    return MOE_OK;
}

int moe_shard_worker_run(moe_shard_worker *w, const void *head, const float *rows, float *reply, char *err,
                         size_t errlen) {
    if (!w || !head || !rows || !reply) return moe_errf(err, errlen, MOE_EINVAL, "moe_shard_worker_run: NULL");
    moe_shard_head h;
    memcpy(&h, head, sizeof h);
    const int rc = worker_reserve(w, h.capacity, err, errlen);
    if (rc) return rc;
    memcpy(w->groups, (const uint8_t *)head + sizeof h, (size_t)h.n_groups * sizeof *w->groups);
    return moe_shard_experts(w->c, h.layer, w->groups, h.n_groups, rows, reply);
}
