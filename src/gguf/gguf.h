/* gguf.h — GGUF v2/v3 reader (mmap, bounds-checked) and writer.
 *
 * Reader: gguf_open() maps the file read-only and parses header, metadata and
 * tensor infos through one cursor that keeps the first error (message names
 * the file, the key or tensor, and the byte offset). After a successful open
 * every pointer in the structs below points into the mapping or into memory
 * owned by the gguf_file, valid until gguf_close().
 *
 * Split models (llama.cpp's gguf-split: PREFIX-00001-of-0000N.gguf ...,
 * each a GGUF file with split.no, split.count and, in the first,
 * split.tensors.count): gguf_open() of the first file opens the others
 * beside it and the gguf_file shows their tensors as one table; the
 * metadata is the first file's.
 *
 * Writer: gguf_writer collects metadata and tensors and writes a v3 file to a
 * temporary name in the same directory, then renames it: a failed write
 * leaves nothing half-written. */
#ifndef MOE_GGUF_H
#define MOE_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4,
    GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8,
    GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
    GGUF_VTYPE_COUNT = 13
};

typedef struct gguf_str { const char *ptr; uint64_t len; } gguf_str; /* not NUL-terminated */

typedef struct gguf_kv {
    char *key;              /* NUL-terminated copy */
    uint32_t type;          /* enum gguf_vtype */
    uint64_t offset;        /* byte offset of the key in the file (for messages) */
    union {
        uint64_t u;         /* U8..U64, BOOL (0/1) */
        int64_t  i;         /* I8..I64 */
        double   f;         /* F32, F64 */
        gguf_str s;         /* STRING */
        struct {
            uint32_t type;  /* element type (never ARRAY: nested arrays are rejected) */
            uint64_t n;
            const void *data;   /* raw little-endian elements in the mapping (numeric types) */
            gguf_str *strs;     /* STRING arrays: n entries, owned by the gguf_file */
        } arr;
    } v;
} gguf_kv;

#define GGUF_MAX_DIMS 4

typedef struct gguf_tensor {
    char *name;             /* NUL-terminated copy */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint32_t type;          /* ggml type id (see quant.h) */
    uint64_t offset;        /* relative to the data section */
    uint64_t nbytes;
    uint64_t info_offset;   /* byte offset of the tensor info in the file (for messages) */
    const uint8_t *data;    /* into the mapping; aligned for the type (see n_copied) */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    const uint8_t *map;
    uint64_t size;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;   /* start of the tensor data section */
    uint64_t n_copied, copied_bytes; /* tensors whose data was misaligned for their type
                                      * (general.alignment 1 or 2): copied to aligned memory */
    struct gguf_file **parts;        /* a split model's files after the first (n_parts of them) */
    uint32_t n_parts;
} gguf_file;

/* Returns MOE_OK or a negative moe_status; on error *out is NULL and err holds one line. */
int  gguf_open(const char *path, gguf_file **out, char *err, size_t errlen);
/* Same, over a caller-owned memory buffer (not copied; must outlive the file). */
int  gguf_open_memory(const void *data, size_t size, const char *name,
                      gguf_file **out, char *err, size_t errlen);
void gguf_close(gguf_file *f);

const gguf_kv     *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. Each returns MOE_OK, MOE_EFORMAT when the key is present with
 * an incompatible type (message names key, expected and actual type), or 1
 * when the key is absent (out untouched, so callers pre-set defaults). Integer
 * getters accept any integer type whose value fits; float getters accept F32/F64. */
int gguf_get_u32 (const gguf_file *f, const char *key, uint32_t *out, char *err, size_t errlen);
int gguf_get_i64 (const gguf_file *f, const char *key, int64_t *out, char *err, size_t errlen);
int gguf_get_f32 (const gguf_file *f, const char *key, float *out, char *err, size_t errlen);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, char *err, size_t errlen);
int gguf_get_str (const gguf_file *f, const char *key, gguf_str *out, char *err, size_t errlen);
/* An integer array (any integer element type) copied into out[0..cap); *n = its length. */
int gguf_get_i32_array(const gguf_file *f, const char *key, int32_t *out, size_t cap,
                       size_t *n, char *err, size_t errlen);
const char *gguf_vtype_name(uint32_t t);

/* ---- writer ---------------------------------------------------------- */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(uint32_t alignment /* 0: 32 */);
void gguf_writer_free(gguf_writer *w);
/* Metadata, in insertion order. Keys must be unique (checked at write). */
int gguf_w_u32 (gguf_writer *w, const char *key, uint32_t v);
int gguf_w_i32 (gguf_writer *w, const char *key, int32_t v);
int gguf_w_u64 (gguf_writer *w, const char *key, uint64_t v);
int gguf_w_f32 (gguf_writer *w, const char *key, float v);
int gguf_w_bool(gguf_writer *w, const char *key, bool v);
int gguf_w_str (gguf_writer *w, const char *key, const char *v);
int gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, size_t n);
int gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, size_t n);
int gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, size_t n);
/* Generic: copy a value of any type (used by `moefast quantize` to carry
 * metadata over from another file). */
int gguf_w_kv(gguf_writer *w, const gguf_kv *kv);
/* A tensor; data (nbytes, must equal the size its type and shape imply) is
 * copied. */
int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                  const int64_t *ne, const void *data, uint64_t nbytes);
/* Writes path atomically (temp file + rename). */
int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen);

#endif
