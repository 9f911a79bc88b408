/* quant_mix.h — llama-quantize's named mixes (quant_mix.c; table in
 * docs/QUANT_MIXES.md). */
#ifndef MOE_QUANT_MIX_H
#define MOE_QUANT_MIX_H

#include <stdbool.h>
#include "gguf/gguf.h"

enum { MOE_MIX_Q2_K, MOE_MIX_Q3_K_M, MOE_MIX_Q4_K_M, MOE_MIX_Q5_K_M, MOE_MIX_IQ4_XS, MOE_MIX_COUNT };

/* The mix named s ("Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "IQ4_XS", any
 * case), or -1. */
int moe_mix_by_name(const char *s);
const char *moe_mix_name(int mix);
/* llama.cpp's general.file_type (llama_ftype) of the mix. */
int moe_mix_ftype(int mix);
/* Whether llama-quantize re-encodes this tensor at all. */
bool moe_mix_quantizable(const gguf_tensor *t);
/* target[i] = the type llama-quantize gives tensor i of f (-1: copied as
 * it is). MOE_OK, or an error naming the file and key / tensor. */
int moe_mix_plan(int mix, const gguf_file *f, int *target, char *err, size_t errlen);

#endif
