/* grammar.h — the grammar engine's internals (docs/GRAMMAR.md).
 *
 * A grammar (GBNF, or JSON Schema compiled to GBNF) is lowered to a
 * byte-level form: rules, each a list of alternatives, each a sequence of
 * elements that are either a set of bytes (256 bits) or a reference to a
 * rule. Code point classes become rules over UTF-8 byte sequences, so the
 * automaton never sees a partial character. Repetitions become generated
 * right-recursive rules, which the runtime runs as tail calls. */
#ifndef MOE_GRAMMAR_H
#define MOE_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "moefast.h"

enum { GE_END = 0, GE_BSET = 1, GE_REF = 2 };
typedef struct gelem { uint32_t kind : 2, arg : 30; } gelem;

struct moe_grammar {
    int n_rules, root;
    char **names;          /* per rule (generated ones: parent_N) */
    int *alt_first;        /* rule r's alternatives: alt_pos[alt_first[r] .. alt_first[r+1]) */
    int *alt_pos;          /* index in elem of an alternative's first element */
    gelem *elem;           /* every alternative's elements, each ending in GE_END */
    int n_elem, n_alt;
    uint64_t (*bset)[4];   /* the byte sets GE_BSET names */
    int n_bset;
};

/* Limits: a pathological grammar gets an error, never unbounded memory/time. */
#define MOE_GRAMMAR_MAX_ELEMS  (1 << 20)   /* lowered elements of one grammar */
#define MOE_GRAMMAR_MAX_HEADS  4096        /* parse stacks alive after one byte */
#define MOE_GRAMMAR_MAX_DEPTH  8192        /* nesting of one parse stack */
#define MOE_GRAMMAR_MAX_EXPAND 200000      /* expansion steps for one byte */

/* Special (control) tokens: GBNF's <[ID]> matches token ID alone. The
 * automaton runs over bytes, so such a token is given a 5-byte code, 0xFF
 * then its id big-endian: 0xFF never occurs in UTF-8, so no text can spell
 * the code (the vocabulary never allows text tokens whose bytes hold 0xFF,
 * and literals and classes are UTF-8), and a control token is allowed only
 * where the grammar names it. */
#define MOE_GRAMMAR_TOKEN_LEN 5
#define MOE_GRAMMAR_MAX_TOKEN_ID ((1 << 24) - 1)
static inline void moe_grammar_token_code(int32_t id, uint8_t b[MOE_GRAMMAR_TOKEN_LEN]) {
    b[0] = 0xFF;
    for (int i = 0; i < 4; i++) b[1 + i] = (uint8_t)((uint32_t)id >> (24 - 8 * i));
}

static inline bool gbset_has(const uint64_t s[4], unsigned b) { return (s[b >> 6] >> (b & 63)) & 1; }

/* A vocabulary from raw token bytes (tests; the public moe_grammar_vocab_new
 * reads a model). kind[i]: 0 normal (its bytes; a control token's are its
 * moe_grammar_token_code), 1 end of generation, 2 never allowed (empty
 * pieces, text holding byte 0xFF). */
enum { GV_BYTES = 0, GV_EOG = 1, GV_NEVER = 2 };
int moe_grammar_vocab_from_pieces(int n, const char *const *bytes, const size_t *lens, const uint8_t *kind,
                                  moe_grammar_vocab **out, char *err, size_t errlen);

/* Does the constraint's current state accept bytes[0..len) as a continuation
 * (a valid prefix)? Nothing is committed. The brute-force reference of the
 * mask walks every token through this. */
int moe_constraint_try_bytes(moe_constraint *c, const char *bytes, size_t len, bool *ok);

#endif
