/* types.c — the type table of types.h, indexed by ggml id, and its lookups. */
#include "quant/quant.h"
#include "base/util.h"

#include <stdio.h>
#include <strings.h>

#define MOE_TYPE_ROW_(N, id, blk, bytes, k, x4, a8, ft) \
    [id] = {#N, blk, bytes, k, x4, a8, (blk) == 1 && (k), ft},
static const moe_type_info TYPES[MOE_T_COUNT] = {MOE_TYPES(MOE_TYPE_ROW_)};
#undef MOE_TYPE_ROW_

/* MOE_T_COUNT is the last id + 1 (the union is as large as its largest
 * member); an id past it would not compile in the table above. */
#define MOE_TYPE_ID_(N, id, blk, bytes, k, x4, a8, ft) char N[(id) + 1];
_Static_assert(sizeof(union { MOE_TYPES(MOE_TYPE_ID_) }) == MOE_T_COUNT, "MOE_T_COUNT must be the last ggml id + 1");
#undef MOE_TYPE_ID_

const moe_type_info *moe_type_get(uint32_t type) {
    if (type >= MOE_T_COUNT || !TYPES[type].name) return NULL;
    return &TYPES[type];
}

int moe_type_by_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < MOE_T_COUNT; i++)
        if (TYPES[i].name && strcasecmp(TYPES[i].name, name) == 0) return i;
    return -1;
}

uint64_t moe_row_bytes(uint32_t type, uint64_t n) {
    const moe_type_info *ti = moe_type_get(type);
    if (!ti || n % ti->block) return 0;
    uint64_t r;
    if (!moe_mul_ok(n / ti->block, ti->block_bytes, &r)) return 0;
    return r;
}

bool moe_type_has_x4(uint32_t type) {
    const moe_type_info *ti = moe_type_get(type);
    return ti && ti->has_x4;
}

bool moe_type_has_a8(uint32_t type) {
    const moe_type_info *ti = moe_type_get(type);
    return ti && ti->has_a8;
}

void moe_type_list_supported(char *buf, size_t len) {
    size_t n = 0;
    if (!buf || !len) return;
    buf[0] = 0;
    for (int i = 0; i < MOE_T_COUNT; i++) {
        if (!TYPES[i].name || !TYPES[i].supported) continue;
        const int w = snprintf(buf + n, len - n, "%s%s", n ? ", " : "", TYPES[i].name);
        if (w < 0 || (size_t)w >= len - n) return;   /* truncated: what fits */
        n += (size_t)w;
    }
}
