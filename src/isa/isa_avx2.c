/* isa_avx2.c — the AVX2 level's descriptor. Compiled with the level's flags
 * (the Makefile's AVX2_ISA list), like every *_avx2.c, so need.h records
 * exactly the extensions those files may use. Data only: nothing in this
 * file runs, so it is safe to read on any CPU. */
#include "isa/need.h"
#include "quant/quant_internal.h"
#include "attention/attn.h"

#ifndef MOE_ISA_LIST
#error "MOE_ISA_LIST (the level's extension list) comes from the Makefile's AVX2_ISA"
#endif

const moe_isa_table moe_isa_avx2_desc = {MOE_ISA_AVX2, "avx2", moe_isa_need_, MOE_ISA_LIST, &moe_kernels_avx2_tab,
                                       &moe_attn_avx2};
