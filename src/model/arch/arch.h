/* arch.h — the architecture seam.
 *
 * An architecture is one file in src/model/arch/ with one moe_arch value and
 * one line in the registry (registry.c). Its bind reads the hyperparameters
 * and binds every layer's tensors into the block descriptors (model.h) with
 * the helpers of model/bind.h; its layer function is the paper's layer,
 * written with the shared blocks (model/blocks.h). Generic code (the loader,
 * the forward step, the measurements) knows no architecture's features. */
#ifndef MOE_ARCH_H
#define MOE_ARCH_H

#include "model/model.h"

typedef struct moe_arch {
    const char *name;        /* general.architecture */
    /* hyperparameters + tensors into m->hp, m->ropes, m->layers (allocated
     * here), m->tok_embd / output / output_norm; one-line errors */
    int (*bind)(moe_model *m, char *err, size_t errlen);
    /* one layer of the forward step over c's tokens (c->x += ...) */
    void (*layer)(moe_context *c, const moe_layer *L, int il);
} moe_arch;

/* registry.c: the architecture named name[0 .. len), or NULL. */
const moe_arch *moe_arch_find(const char *name, size_t len);
/* "laguna, qwen3moe, ...": for the error that lists what is supported. */
void moe_arch_list(char *buf, size_t len);

extern const moe_arch moe_arch_laguna;
extern const moe_arch moe_arch_qwen3moe;
extern const moe_arch moe_arch_llama;
extern const moe_arch moe_arch_olmoe;
extern const moe_arch moe_arch_qwen2moe;
extern const moe_arch moe_arch_deepseek2;
extern const moe_arch moe_arch_glm4moe;
extern const moe_arch moe_arch_gpt_oss;

#endif
