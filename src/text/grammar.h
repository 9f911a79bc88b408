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

static inline bool gbset_has(const uint64_t s[4], unsigned b) { return (s[b >> 6] >> (b & 63)) & 1; }

/* A vocabulary from raw token bytes (tests; the public moe_grammar_vocab_new
 * reads a model). kind[i]: 0 normal (its bytes), 1 end of generation, 2
 * never allowed (control tokens, empty pieces). */
enum { GV_BYTES = 0, GV_EOG = 1, GV_NEVER = 2 };
int moe_grammar_vocab_from_pieces(int n, const char *const *bytes, const size_t *lens, const uint8_t *kind,
                                  moe_grammar_vocab **out, char *err, size_t errlen);

/* Does the constraint's current state accept bytes[0..len) as a continuation
 * (a valid prefix)? Nothing is committed. The brute-force reference of the
 * mask walks every token through this. */
int moe_constraint_try_bytes(moe_constraint *c, const char *bytes, size_t len, bool *ok);

#endif
