/* act8_kquant.h — the a8 layouts of Q5_K, Q3_K, Q2_K and IQ4_XS
 * (act8_kquant_ref.c spells them out), as offsets inside one group, shared
 * by the scalar and the SIMD kernel files. A group is gn = 16 blocks of 32
 * (two super-blocks) or, the last of a row with an odd super-block count,
 * gn = 8 (one); nsb = gn / 8. It starts at row + (g0 / 8) * block bytes. */
#ifndef MOE_ACT8_KQUANT_H
#define MOE_ACT8_KQUANT_H

#include "quant/kquant.h"

/* Q5_K: hdr[nsb][16] | lo[16 gn] (nibble pairs) | hi[4 gn] (bit 4 by slab) */
#define A8K_Q5_LO(gn) (2 * (gn))
#define A8K_Q5_HI(gn) (18 * (gn))
/* Q3_K: sl[gn] | sh u32[nsb] | d f16[nsb] | c2[2][4 gn] | hb[4 gn] */
#define A8K_Q3_SH(gn) (gn)
#define A8K_Q3_D(gn) ((gn) + (gn) / 2)
#define A8K_Q3_C2(gn) ((gn) + 3 * (gn) / 4)
#define A8K_Q3_HB(gn) (9 * (gn) + 3 * (gn) / 4)
/* Q2_K: sc[2][gn] | dm[nsb] (f16 d, f16 dmin) | c2[2][4 gn] */
#define A8K_Q2_DM(gn) (2 * (gn))
#define A8K_Q2_C2(gn) (2 * (gn) + (gn) / 2)
/* IQ4_XS: hdr[nsb][8] (f16 d, u16 scales_h, u8 scales_l[4]) | lo[16 gn] */
#define A8K_IQ4_LO(gn) (gn)

#endif
