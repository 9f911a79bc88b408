/* isa_avx512.c — the AVX512 level's descriptor. Compiled with the level's flags
 * (the Makefile's AVX512_ISA list), like every *_avx512.c, so need.h records
 * exactly the extensions those files may use. Data only: nothing in this
 * file runs, so it is safe to read on any CPU. */
#include "isa/need.h"
#include "quant/quant_internal.h"
#include "attention/attn.h"

#ifndef MOE_ISA_LIST
#error "MOE_ISA_LIST (the level's extension list) comes from the Makefile's AVX512_ISA"
#endif

const moe_isa_table moe_isa_avx512_desc = {MOE_ISA_AVX512, "avx512", moe_isa_need_, MOE_ISA_LIST, &moe_kernels_avx512_tab,
                                       &moe_attn_avx512};
