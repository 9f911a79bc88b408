/* quantize_file.c — `moefast quantize`: re-encodes a GGUF's weight matrices.
 *
 * Every tensor with two or more dimensions whose name ends in ".weight" is a
 * weight matrix, except the router (ffn_gate_inp), which stays as it is, like
 * norms, biases and second-level ".scale" tensors (all copied unchanged).
 * Routed and shared expert matrices (*_exps, *_shexp) get type_experts.
 * Rows are dequantized with moe_dequant_row and quantized with
 * moe_quantize_row, except Q8_0 blocks whose values are exactly an f16 scale
 * times int8 values: those keep that exact encoding (see q8_0_exact_block). All metadata is carried over in order; general.file_type
 * is updated and general.quantization_version kept consistent.
 * A mix name as TYPE (Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, IQ4_XS, with no expert
 * type: llama-quantize's meaning) picks each tensor's type as llama-quantize
 * does (quant_mix.c) and quantizes with ggml's reference quantizers only
 * (no exact-Q8_0 shortcut), so the result is llama.cpp's file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "lab/quant_mix.h"
#include "quant/quant.h"
#include "base/util.h"

int moe_gen_ftype(int type_experts); /* gen.c */

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !memcmp(s + n - m, suf, m);
}

static bool is_matrix(const gguf_tensor *t) {
    return t->n_dims >= 2 && ends_with(t->name, ".weight") && !strstr(t->name, "ffn_gate_inp");
}

static bool is_expert(const gguf_tensor *t) {
    return strstr(t->name, "_exps.") || strstr(t->name, "_shexp.");
}

/* If the 32 values are exactly d*q for an f16 d and int8 q (|q| <= 127),
 * writes that block and returns true. ggml's Q8_0 rule (d = amax/127) only
 * finds it when some |q| is 127; files drawn as "f16 scale x int8" (the
 * shared oracle models) have blocks with smaller maxima, and for those
 * re-quantizing with d = amax/127 would change the values. Keeping the exact
 * representation makes F32 -> Q8_0 lossless whenever it can be. */
static bool q8_0_exact_block(const float *x, uint8_t *y) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) {
        float a = x[i] < 0 ? -x[i] : x[i];
        if (!(a == a) || a > 65504.0f * 127.0f) return false; /* NaN / too large */
        if (a > amax) amax = a;
    }
    if (amax == 0.0f) return false; /* the quantizer's all-zero block is exact */
    /* amax = d*qmax with an 11-bit d and a 7-bit qmax has at most 18
     * significant bits: real-valued weights fail this at once */
    uint32_t u;
    memcpy(&u, &amax, 4);
    if (u & 0x3f) return false; /* low 6 of the 23 mantissa bits */
    for (int qmax = 127; qmax >= 1; qmax--) {
        const float d = amax / (float)qmax;
        const uint16_t h = moe_f32_to_f16(d);
        if (moe_f16_to_f32(h) != d) continue;
        int8_t q[32];
        int i = 0;
        for (; i < 32; i++) {
            const float r = x[i] / d;
            const int qi = (int)r;
            if ((float)qi != r || qi > 127 || qi < -127 || d * (float)qi != x[i]) break;
            q[i] = (int8_t)qi;
        }
        if (i < 32) continue;
        memcpy(y, &h, 2);
        memcpy(y + 2, q, 32);
        return true;
    }
    return false;
}

static void quantize_row_keep_exact(uint32_t type, const float *x, uint8_t *y, int64_t n) {
    if (type != MOE_T_Q8_0) { moe_quantize_row(type, x, y, n); return; }
    for (int64_t b = 0; b < n / 32; b++)
        if (!q8_0_exact_block(x + 32 * b, y + 34 * b)) moe_quantize_row(type, x + 32 * b, y + 34 * b, 32);
}

static bool is_float_type(int t) {
    const moe_type_info *ti = moe_type_get((uint32_t)t);
    return ti && ti->plain;
}

static int parse_type(const char *s, const char *what, int *out, char *err, size_t errlen) {
    int t = moe_type_by_name(s);
    const moe_type_info *ti = t >= 0 ? moe_type_get((uint32_t)t) : NULL;
    if (!ti || !ti->name)
        return moe_errf(err, errlen, MOE_EINVAL, "unknown %s '%s'", what, s);
    if (!ti->supported)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s %s is not supported", what, ti->name);
    *out = t;
    return MOE_OK;
}

int moe_quantize_file(const char *in, const char *out, const char *type,
                      const char *type_experts, char *err, size_t errlen) {
    if (!in || !out || !type)
        return moe_errf(err, errlen, MOE_EINVAL, "input, output and type are required");
    int T, TE, rc;
    const int mix = type_experts ? -1 : moe_mix_by_name(type);
    if (mix >= 0) {
        T = TE = (int)MOE_T_F32; /* per tensor below */
    } else {
        rc = parse_type(type, "type", &T, err, errlen);
        if (rc) return rc;
        rc = parse_type(type_experts ? type_experts : type, "expert type", &TE, err, errlen);
        if (rc) return rc;
    }

    gguf_file *f = NULL;
    rc = gguf_open(in, &f, err, errlen);
    if (rc) return rc;
    /* each tensor's target type, -1: copied */
    int *target = malloc(sizeof(int) * (f->n_tensors ? f->n_tensors : 1));
    if (!target) { rc = moe_errf(err, errlen, MOE_ENOMEM, "out of memory"); goto done; }
    if (mix >= 0) {
        rc = moe_mix_plan(mix, f, target, err, errlen);
        if (rc) goto done;
        for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
            const moe_type_info *ti = target[i] >= 0 ? moe_type_get((uint32_t)target[i]) : NULL;
            if (ti && !ti->supported)
                rc = moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: the %s mix puts tensor %s in %s, which is not supported",
                              in, moe_mix_name(mix), f->tensors[i].name, ti->name);
        }
        if (rc) goto done;
    } else {
        for (uint64_t i = 0; i < f->n_tensors; i++)
            target[i] = is_matrix(&f->tensors[i]) ? (is_expert(&f->tensors[i]) ? TE : T) : -1;
    }
    const int ftype = mix >= 0 ? moe_mix_ftype(mix) : moe_gen_ftype(TE);

    /* check every matrix before doing any work */
    int64_t max_row = 0;
    uint64_t max_bytes = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t nb = t->nbytes;
        if (target[i] >= 0) {
            int tt = target[i];
            const moe_type_info *src = moe_type_get(t->type), *dst = moe_type_get((uint32_t)tt);
            if (!src || !src->supported) {
                rc = moe_errf(err, errlen, MOE_EUNSUPPORTED,
                              "%s: tensor %s (tensor info at offset %llu) has type %s, which cannot be dequantized",
                              in, t->name, (unsigned long long)t->info_offset, src && src->name ? src->name : "?");
                goto done;
            }
            if (t->ne[0] % dst->block) {
                rc = moe_errf(err, errlen, MOE_EINVAL,
                              "%s: tensor %s has rows of %lld values, not a multiple of the %s block size %u",
                              in, t->name, (long long)t->ne[0], dst->name, dst->block);
                goto done;
            }
            uint64_t nrows = (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
            nb = moe_row_bytes((uint32_t)tt, (uint64_t)t->ne[0]) * nrows;
            if (t->ne[0] > max_row) max_row = t->ne[0];
        }
        if (nb > max_bytes) max_bytes = nb;
    }

    gguf_writer *w = gguf_writer_new((uint32_t)f->alignment);
    uint8_t *buf = malloc(max_bytes ? max_bytes : 1);
    float *row = malloc((size_t)(max_row ? max_row : 1) * sizeof(float));
    if (!w || !buf || !row) { rc = moe_errf(err, errlen, MOE_ENOMEM, "out of memory"); goto out; }

    const bool quantized = mix >= 0 || !is_float_type(T) || !is_float_type(TE);
    for (uint64_t i = 0; i < f->n_kv && !rc; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (!strcmp(kv->key, "general.quantization_version")) continue; /* re-emitted below */
        if (!strcmp(kv->key, "general.file_type")) {
            rc = gguf_w_u32(w, kv->key, (uint32_t)ftype);
            if (!rc && quantized) rc = gguf_w_u32(w, "general.quantization_version", 2);
            continue;
        }
        rc = gguf_w_kv(w, kv);
    }
    if (!rc && !gguf_find_kv(f, "general.file_type")) {
        rc = gguf_w_u32(w, "general.file_type", (uint32_t)ftype);
        if (!rc && quantized) rc = gguf_w_u32(w, "general.quantization_version", 2);
    }
    if (rc) { rc = moe_errf(err, errlen, rc < 0 ? rc : MOE_ENOMEM, "cannot copy metadata of %s", in); goto out; }

    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const void *data = t->data;
        uint64_t nb = t->nbytes;
        uint32_t ttype = t->type;
        if (target[i] >= 0 && t->type != (uint32_t)target[i]) {
            /* (a matrix already in its target type is copied: lossless) */
            ttype = (uint32_t)target[i];
            const int64_t n = t->ne[0];
            const uint64_t nrows = (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
            const uint64_t rb_in = moe_row_bytes(t->type, (uint64_t)n), rb_out = moe_row_bytes(ttype, (uint64_t)n);
            for (uint64_t r = 0; r < nrows; r++) {
                moe_dequant_row(t->type, t->data + r * rb_in, row, n);
                if (mix >= 0) moe_quantize_row(ttype, row, buf + r * rb_out, n);
                else quantize_row_keep_exact(ttype, row, buf + r * rb_out, n);
            }
            data = buf;
            nb = rb_out * nrows;
        }
        int wr = gguf_w_tensor(w, t->name, ttype, t->n_dims, t->ne, data, nb);
        if (wr) {
            rc = moe_errf(err, errlen, wr < 0 ? wr : MOE_ENOMEM, "cannot add tensor %s", t->name);
            goto out;
        }
    }
    rc = gguf_writer_write(w, out, err, errlen);
out:
    gguf_writer_free(w);
    free(buf);
    free(row);
done:
    free(target);
    gguf_close(f);
    return rc;
}
