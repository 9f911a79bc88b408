/* registry.c — every architecture moefast runs: one line each (arch.h). */
#include <stdio.h>
#include <string.h>

#include "model/arch/arch.h"

static const moe_arch *const ARCHS[] = {
    &moe_arch_laguna,
    &moe_arch_qwen3moe,
    &moe_arch_llama,
    &moe_arch_olmoe,
    &moe_arch_qwen2moe,
    &moe_arch_deepseek2,
    &moe_arch_glm4moe,
    &moe_arch_gpt_oss,
};

#define N_ARCHS (sizeof ARCHS / sizeof ARCHS[0])

const moe_arch *moe_arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strlen(ARCHS[i]->name) == len && !memcmp(ARCHS[i]->name, name, len)) return ARCHS[i];
    return NULL;
}

void moe_arch_list(char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < N_ARCHS && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", ARCHS[i]->name);
}
