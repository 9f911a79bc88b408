/* tokenizer.h — tokenizers built from GGUF metadata (tokenizer.ggml.*):
 * `gpt2` byte-level BPE (pre-tokenizer by tokenizer.ggml.pre, PCRE2 regexes)
 * and `llama` SentencePiece-style BPE with <0xNN> byte fallback. */
#ifndef MOE_TOKENIZER_H
#define MOE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "gguf/gguf.h"

typedef struct moe_tokenizer moe_tokenizer;

/* MOE_OK, or an error naming the key (missing token array, wrong types,
 * merges naming unknown tokens, ...). The tokenizer copies what it needs and
 * does not keep f. */
int  moe_tokenizer_load(const gguf_file *f, moe_tokenizer **out, char *err, size_t errlen);
void moe_tokenizer_free(moe_tokenizer *t);

int  moe_tokenizer_n_vocab(const moe_tokenizer *t);
int32_t moe_tokenizer_bos(const moe_tokenizer *t); /* -1 if none */
int32_t moe_tokenizer_eos(const moe_tokenizer *t); /* -1 if none */
bool moe_tokenizer_add_bos(const moe_tokenizer *t); /* tokenizer.ggml.add_bos_token */
/* true for tokens that end a turn (eos, eot, <|im_end|>, ...) */
bool moe_tokenizer_is_eog(const moe_tokenizer *t, int32_t id);

/* The pre-tokenizer's pieces of text (gpt2 vocabularies; no special-token
 * cutting): the end byte offset of each piece in the text as normalized
 * (the same offsets for valid UTF-8). *n_out is the count even past cap.
 * The split encoding uses, exposed for tests and diagnostics. */
int  moe_tokenizer_pretokenize(const moe_tokenizer *t, const char *text, size_t len, uint32_t *ends, size_t cap,
                               size_t *n_out, char *err, size_t errlen);
/* Same contract as the public moe_tokenize(). */
int  moe_tokenizer_encode(const moe_tokenizer *t, const char *text, size_t len, bool add_bos,
                          bool parse_special, int32_t *ids, size_t cap, size_t *n_out,
                          char *err, size_t errlen);
/* How the merges are searched (all give the same ids): AUTO, the default,
 * uses the heap for short words and the bucket queue for long ones; the
 * others force one path, the naive O(n^2) scan being the reference the tests
 * compare with. n_fallback: words the queue handed back to the heap (a
 * vocabulary whose merges are not in build order). */
enum { MOE_TOK_MERGE_AUTO, MOE_TOK_MERGE_HEAP, MOE_TOK_MERGE_QUEUE, MOE_TOK_MERGE_NAIVE };
typedef struct moe_tok_merge { int merge; size_t n_fallback; } moe_tok_merge;
int  moe_tokenizer_encode_merge(const moe_tokenizer *t, moe_tok_merge *how, const char *text, size_t len,
                                bool add_bos, bool parse_special, int32_t *ids, size_t cap, size_t *n_out,
                                char *err, size_t errlen);
/* Bytes of a token: byte tokens give their byte, normal tokens their decoded
 * bytes, control tokens "" unless show_special. MOE_ERANGE for a bad id. */
int  moe_tokenizer_piece(const moe_tokenizer *t, int32_t id, bool show_special,
                         const char **bytes, size_t *len);

#endif
