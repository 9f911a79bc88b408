/* grammar_run.c — the incremental pushdown automaton over bytes, the
 * vocabulary trie and the per-step token mask (docs/GRAMMAR.md).
 *
 * A parse stack is a chain of nodes (pos: the element to match next, parent:
 * where to continue when this rule's alternative ends). Nodes are
 * hash-consed, so equal stacks are one id, and a parser state (the set of
 * stacks alive after the bytes so far, plus "may end here") is a sorted
 * array of node ids, interned too. Transitions (state, byte) -> state are
 * cached, which makes the automaton a lazily built DFA: walking the
 * vocabulary trie for a mask is one table look-up per trie node once a
 * state's transitions are known. All tables are allocated with the
 * constraint; when they fill up, everything but the current state is
 * dropped (the current state is rebuilt in fresh tables) — never a malloc
 * after moe_constraint_new. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"
#include "base/util.h"

/* ---- the vocabulary trie ------------------------------------------------- */

/* Trie nodes in depth-first pre-order: node i's subtree is [i, end[i]), so a
 * walk is a scan that jumps over the subtrees of dead bytes. */
struct moe_grammar_vocab {
    int n_vocab, n_nodes;
    uint8_t *byte;        /* byte on the edge into node i */
    uint16_t *depth;      /* bytes from the root (root 0) */
    int32_t *end;         /* one past node i's subtree */
    int32_t *tok_first;   /* tokens ending at node i: tok[tok_first[i] .. tok_first[i+1]) */
    int32_t *tok;
    int32_t *eog;         /* end-of-generation token ids */
    int n_eog;
    uint8_t *kind;        /* per token: GV_BYTES, GV_EOG, GV_NEVER */
    char **piece;         /* per token (GV_BYTES): its bytes */
    size_t *piece_len;
    int max_depth;
};

void moe_grammar_vocab_free(moe_grammar_vocab *v) {
    if (!v) return;
    if (v->piece) for (int i = 0; i < v->n_vocab; i++) free(v->piece[i]);
    free(v->piece); free(v->piece_len); free(v->byte); free(v->depth); free(v->end);
    free(v->tok_first); free(v->tok); free(v->eog); free(v->kind);
    free(v);
}

int moe_grammar_vocab_n(const moe_grammar_vocab *v) { return v ? v->n_vocab : 0; }

/* qsort_r (glibc): no global state, so vocabularies may be built on
 * several threads at once. */
static int cmp_piece(const void *a, const void *b, void *ctx) {
    const moe_grammar_vocab *sort_v = ctx;
    int x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = sort_v->piece_len[x], ly = sort_v->piece_len[y];
    int c = memcmp(sort_v->piece[x], sort_v->piece[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Builds the trie from v->piece (the tokens of kind GV_BYTES). */
static int vocab_build(moe_grammar_vocab *v, char *err, size_t errlen) {
    int n = 0;
    size_t total = 1;
    for (int i = 0; i < v->n_vocab; i++)
        if (v->kind[i] == GV_BYTES) { n++; total += v->piece_len[i]; }
        else if (v->kind[i] == GV_EOG) v->n_eog++;
    int32_t *ord = malloc(((size_t)n + 1) * sizeof *ord);
    v->byte = malloc(total);
    v->depth = malloc(total * sizeof *v->depth);
    v->end = malloc(total * sizeof *v->end);
    v->tok_first = malloc((total + 1) * sizeof *v->tok_first);
    v->tok = malloc(((size_t)n + 1) * sizeof *v->tok);
    v->eog = malloc(((size_t)v->n_eog + 1) * sizeof *v->eog);
    int32_t *path = malloc((total + 1) * sizeof *path);
    if (!ord || !v->byte || !v->depth || !v->end || !v->tok_first || !v->tok || !v->eog || !path) {
        free(ord); free(path);
        return moe_errf(err, errlen, MOE_ENOMEM, "grammar vocab: out of memory");
    }
    n = 0;
    v->n_eog = 0;
    for (int i = 0; i < v->n_vocab; i++) {
        if (v->kind[i] == GV_BYTES) ord[n++] = i;
        else if (v->kind[i] == GV_EOG) v->eog[v->n_eog++] = i;
    }
    qsort_r(ord, (size_t)n, sizeof *ord, cmp_piece, v);
    /* path[d] = node at depth d on the current token's prefix */
    int nn = 1, pd = 0, prev = -1;
    v->byte[0] = 0; v->depth[0] = 0; path[0] = 0;
    for (int k = 0; k < n; k++) {
        int t = ord[k];
        const uint8_t *p = (const uint8_t *)v->piece[t];
        size_t len = v->piece_len[t], l = 0;
        if (prev >= 0) {
            const uint8_t *q = (const uint8_t *)v->piece[prev];
            size_t ql = v->piece_len[prev];
            while (l < len && l < ql && p[l] == q[l]) l++;
        }
        while (pd > (int)l) { v->end[path[pd]] = nn; pd--; }
        for (size_t d = l; d < len; d++) {
            v->byte[nn] = p[d];
            v->depth[nn] = (uint16_t)(d + 1 < 65535 ? d + 1 : 65535);
            path[++pd] = nn++;
        }
        v->tok[k] = path[len];  /* its end node */
        prev = t;
        if ((int)len > v->max_depth) v->max_depth = (int)len;
    }
    while (pd > 0) { v->end[path[pd]] = nn; pd--; }
    v->end[0] = nn;
    v->n_nodes = nn;
    /* tokens per node: sorted bytes are the trie's pre-order, so ord is
     * already grouped by end node (v->tok holds each token's end node
     * for now, then the tokens) */
    for (int i = 0; i <= nn; i++) v->tok_first[i] = 0;
    for (int k = 0; k < n; k++) v->tok_first[v->tok[k] + 1]++;
    for (int k = 0; k < n; k++) v->tok[k] = ord[k];
    for (int i = 0; i < nn; i++) v->tok_first[i + 1] += v->tok_first[i];
    free(ord); free(path);
    return MOE_OK;
}

int moe_grammar_vocab_from_pieces(int n, const char *const *bytes, const size_t *lens, const uint8_t *kind,
                                  moe_grammar_vocab **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "grammar vocab: out is NULL");
    *out = NULL;
    if (n <= 0) return moe_errf(err, errlen, MOE_EINVAL, "grammar vocab: no tokens");
    moe_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return moe_errf(err, errlen, MOE_ENOMEM, "grammar vocab: out of memory");
    v->n_vocab = n;
    v->kind = malloc((size_t)n);
    v->piece = calloc((size_t)n, sizeof *v->piece);
    v->piece_len = calloc((size_t)n, sizeof *v->piece_len);
    if (!v->kind || !v->piece || !v->piece_len) { moe_grammar_vocab_free(v); return moe_errf(err, errlen, MOE_ENOMEM, "grammar vocab: out of memory"); }
    for (int i = 0; i < n; i++) {
        v->kind[i] = kind ? kind[i] : GV_BYTES;
        if (v->kind[i] == GV_BYTES && (!lens[i] || lens[i] > 65000)) v->kind[i] = GV_NEVER;
        if (v->kind[i] != GV_BYTES) continue;
        v->piece[i] = malloc(lens[i]);
        if (!v->piece[i]) { moe_grammar_vocab_free(v); return moe_errf(err, errlen, MOE_ENOMEM, "grammar vocab: out of memory"); }
        memcpy(v->piece[i], bytes[i], lens[i]);
        v->piece_len[i] = lens[i];
    }
    int rc = vocab_build(v, err, errlen);
    if (rc) { moe_grammar_vocab_free(v); return rc; }
    *out = v;
    return MOE_OK;
}

/* From a model: end-of-generation tokens by moe_token_is_eog, control
 * tokens by their code (grammar.h: only <[ID]> allows them), other
 * empty-piece tokens and text holding byte 0xFF never, the rest
 * (byte-fallback included) by the bytes they print. */
int moe_grammar_vocab_new(const moe_model *m, moe_grammar_vocab **out, char *err, size_t errlen) {
    if (!out || !m) return moe_errf(err, errlen, MOE_EINVAL, "grammar vocab: model or out is NULL");
    *out = NULL;
    int n = moe_model_n_vocab(m);
    if (n <= 0) return moe_errf(err, errlen, MOE_EUNSUPPORTED, "grammar vocab: the model has no vocabulary");
    const char **b = malloc((size_t)n * sizeof *b);
    size_t *l = malloc((size_t)n * sizeof *l);
    uint8_t *k = malloc((size_t)n);
    if (!b || !l || !k) { free(b); free(l); free(k); return moe_errf(err, errlen, MOE_ENOMEM, "grammar vocab: out of memory"); }
    uint8_t (*code)[MOE_GRAMMAR_TOKEN_LEN] = malloc((size_t)n * sizeof *code);
    if (!code) { free(b); free(l); free(k); return moe_errf(err, errlen, MOE_ENOMEM, "grammar vocab: out of memory"); }
    for (int i = 0; i < n; i++) {
        const char *sp;
        size_t sl = 0;
        if (moe_token_piece(m, i, false, &b[i], &l[i]) != MOE_OK) { b[i] = ""; l[i] = 0; }
        k[i] = moe_token_is_eog(m, i) ? GV_EOG : l[i] && !memchr(b[i], 0xFF, l[i]) ? GV_BYTES : GV_NEVER;
        /* a control token (no text, a name): allowed only where <[ID]> is */
        if (k[i] == GV_NEVER && !l[i] && moe_token_piece(m, i, true, &sp, &sl) == MOE_OK && sl) {
            moe_grammar_token_code(i, code[i]);
            b[i] = (const char *)code[i];
            l[i] = MOE_GRAMMAR_TOKEN_LEN;
            k[i] = GV_BYTES;
        }
    }
    int rc = moe_grammar_vocab_from_pieces(n, b, l, k, out, err, errlen);
    free(b); free(l); free(k); free(code);
    return rc;
}

/* ---- the automaton ---------------------------------------------------------- */

#define NODE_CAP   (1 << 17)
#define NODE_HASH  (1 << 18)
#define STATE_CAP  (1 << 14)
#define STATE_HASH (1 << 15)
#define HEAD_POOL  (1 << 18)
#define TRANS_HASH (1 << 17)
#define SEEN_SLOTS 4096
#define MASK_SLOTS 32       /* masks of recent states (a long string repeats one) */
#define DENSE_STATES 2048   /* states with a 256-entry transition row (the mask walk's hot path) */
#define T_UNKNOWN (-3)

typedef struct { int32_t pos, parent; int32_t depth; } gnode;
typedef struct { int32_t key_state; int32_t key_byte; int32_t next; } gtrans;
typedef struct { uint32_t gen; int32_t pos, parent; } gseen;

struct moe_constraint {
    const moe_grammar *g;
    const moe_grammar_vocab *v;
    gnode *node; int n_node;
    int32_t *node_hash;                 /* -1 empty */
    int32_t *heads; int n_heads;        /* state heads pool */
    int32_t *st_off, *st_n; uint8_t *st_acc; uint64_t (*st_live)[4]; int n_state;
    int32_t *st_hash;
    gtrans *trans; int n_trans;         /* transitions of states >= DENSE_STATES */
    int32_t *dense;                     /* [DENSE_STATES][256]: next state, -2 dead, T_UNKNOWN */
    gseen *seen; uint32_t seen_gen;
    int32_t *tmp;                       /* heads being built (MOE_GRAMMAR_MAX_HEADS) */
    int32_t *work;                      /* expansion worklist: pairs */
    int32_t *chain;                     /* rebuild: one stack's positions */
    int32_t *at_depth;                  /* mask walk: state per trie depth */
    uint64_t *mask_bits;                /* MASK_SLOTS bitsets of n_vocab bits */
    int32_t mask_state[MASK_SLOTS];     /* the state of each slot, -1 none */
    int mask_words;
    int cur;                            /* the current state */
    bool ended;                         /* an end-of-generation token was accepted */
    int fail;                           /* a limit was hit in this transition */
    char err[MOE_ERR_LEN];
};

static inline uint32_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}

static int fail(moe_constraint *c, const char *fmt, ...) {
    if (!c->fail) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
    }
    c->fail = 1;
    return -1;
}

/* The node (pos, parent), shared by every equal stack. -1 when full. */
static int node_get(moe_constraint *c, int32_t pos, int32_t parent) {
    uint32_t h = mix((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent) & (NODE_HASH - 1);
    for (;; h = (h + 1) & (NODE_HASH - 1)) {
        int32_t id = c->node_hash[h];
        if (id < 0) break;
        if (c->node[id].pos == pos && c->node[id].parent == parent) return id;
    }
    if (c->n_node >= NODE_CAP - 1 || c->n_node >= NODE_HASH / 2) return fail(c, "full");
    int d = parent >= 0 ? c->node[parent].depth + 1 : 1;
    if (d > MOE_GRAMMAR_MAX_DEPTH)
        return fail(c, "grammar: parse stack deeper than %d (nesting limit)", MOE_GRAMMAR_MAX_DEPTH);
    int id = c->n_node++;
    c->node[id] = (gnode){pos, parent, d};
    c->node_hash[h] = id;
    return id;
}

static int head_cmp_sort(int32_t *a, int n) { /* shell sort + unique (no allocation) */
    static const int gaps[] = {701, 301, 132, 57, 23, 10, 4, 1};
    for (int gi = 0; gi < 8; gi++) {
        int gp = gaps[gi];
        for (int i = gp; i < n; i++) {
            int32_t t = a[i];
            int j = i;
            while (j >= gp && a[j - gp] > t) { a[j] = a[j - gp]; j -= gp; }
            a[j] = t;
        }
    }
    int k = 0;
    for (int i = 0; i < n; i++) if (!k || a[k - 1] != a[i]) a[k++] = a[i];
    return k;
}

/* The state of heads tmp[0..n) (sorted, unique) and acc. -1 when full. */
static int state_get(moe_constraint *c, const int32_t *h, int n, bool acc) {
    uint64_t x = acc ? 0x9e3779b97f4a7c15ull : 1;
    for (int i = 0; i < n; i++) x = (x ^ (uint32_t)h[i]) * 0x100000001b3ull;
    uint32_t s = mix(x ^ (uint64_t)n) & (STATE_HASH - 1);
    for (;; s = (s + 1) & (STATE_HASH - 1)) {
        int32_t id = c->st_hash[s];
        if (id < 0) break;
        if (c->st_n[id] == n && c->st_acc[id] == acc && !memcmp(c->heads + c->st_off[id], h, (size_t)n * sizeof *h))
            return id;
    }
    if (c->n_state >= STATE_CAP || c->n_state >= STATE_HASH / 2 || c->n_heads + n > HEAD_POOL) return fail(c, "full");
    int id = c->n_state++;
    c->st_off[id] = c->n_heads;
    c->st_n[id] = n;
    c->st_acc[id] = acc;
    memcpy(c->heads + c->n_heads, h, (size_t)n * sizeof *h);
    c->n_heads += n;
    const moe_grammar *g = c->g;
    uint64_t *lv = c->st_live[id];
    lv[0] = lv[1] = lv[2] = lv[3] = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t *b = g->bset[g->elem[c->node[h[i]].pos].arg];
        for (int k = 0; k < 4; k++) lv[k] |= b[k];
    }
    c->st_hash[s] = id;
    if (id < DENSE_STATES) { /* dead bytes known now; the rest on first use */
        int32_t *row = c->dense + (size_t)id * 256;
        for (int b = 0; b < 256; b++) row[b] = gbset_has(lv, (unsigned)b) ? T_UNKNOWN : -2;
    }
    return id;
}

/* Adds to tmp[*n] the stacks that continue (pos, parent) up to their next
 * byte element; *acc when the whole grammar can end. */
static void expand(moe_constraint *c, int32_t pos, int32_t parent, int *n, bool *acc, long *steps) {
    const moe_grammar *g = c->g;
    int w = 0;
    c->work[w++] = pos; c->work[w++] = parent;
    while (w > 0 && !c->fail) {
        parent = c->work[--w]; pos = c->work[--w];
        gseen *sn = &c->seen[mix((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent) & (SEEN_SLOTS - 1)];
        if (sn->gen == c->seen_gen && sn->pos == pos && sn->parent == parent) continue; /* done already */
        *sn = (gseen){c->seen_gen, pos, parent};
        if (++*steps > MOE_GRAMMAR_MAX_EXPAND) { fail(c, "grammar: more than %d expansions for one byte (ambiguous grammar)", MOE_GRAMMAR_MAX_EXPAND); return; }
        gelem e = g->elem[pos];
        if (e.kind == GE_END) {
            if (parent < 0) *acc = true;
            else { c->work[w++] = c->node[parent].pos; c->work[w++] = c->node[parent].parent; }
        } else if (e.kind == GE_BSET) {
            int id = node_get(c, pos, parent);
            if (id < 0) return;
            if (*n >= MOE_GRAMMAR_MAX_HEADS) { fail(c, "grammar: more than %d parse stacks alive (ambiguous grammar)", MOE_GRAMMAR_MAX_HEADS); return; }
            c->tmp[(*n)++] = id;
        } else {
            int32_t np = parent;
            if (g->elem[pos + 1].kind != GE_END) { /* else a tail call: nothing to return to here */
                np = node_get(c, pos + 1, parent);
                if (np < 0) return;
            }
            int r = (int)e.arg;
            for (int a = g->alt_first[r + 1] - 1; a >= g->alt_first[r]; a--) {
                if (w + 2 > 2 * MOE_GRAMMAR_MAX_EXPAND) { fail(c, "grammar: expansion too large"); return; }
                c->work[w++] = g->alt_pos[a]; c->work[w++] = np;
            }
        }
    }
}

/* The state after byte b from state s: -2 dead, -1 a limit (c->fail). */
static int step(moe_constraint *c, int s, unsigned b) {
    if (s < DENSE_STATES) {
        int32_t t = c->dense[(size_t)s * 256 + b];
        if (t != T_UNKNOWN) return t;
    }
    if (!gbset_has(c->st_live[s], b)) return -2;
    uint32_t h = mix((uint64_t)(uint32_t)s << 8 | b) & (TRANS_HASH - 1);
    if (s >= DENSE_STATES)
        for (;; h = (h + 1) & (TRANS_HASH - 1)) {
            gtrans *t = &c->trans[h];
            if (t->key_state < 0) break;
            if (t->key_state == s && t->key_byte == (int)b) return t->next;
        }
    const moe_grammar *g = c->g;
    int n = 0;
    bool acc = false;
    long steps = 0;
    c->seen_gen++;
    const int32_t *hd = c->heads + c->st_off[s];
    for (int i = 0; i < c->st_n[s] && !c->fail; i++) {
        const gnode *nd = &c->node[hd[i]];
        if (gbset_has(g->bset[g->elem[nd->pos].arg], b)) expand(c, nd->pos + 1, nd->parent, &n, &acc, &steps);
    }
    if (c->fail) return -1;
    n = head_cmp_sort(c->tmp, n);
    int ns = state_get(c, c->tmp, n, acc);
    if (ns < 0) return -1;
    if (s < DENSE_STATES) { c->dense[(size_t)s * 256 + b] = ns; return ns; }
    if (c->n_trans >= TRANS_HASH / 2) return fail(c, "full");
    c->trans[h] = (gtrans){s, (int)b, ns};
    c->n_trans++;
    return ns;
}

static void tables_clear(moe_constraint *c) {
    memset(c->node_hash, 0xff, NODE_HASH * sizeof *c->node_hash);
    memset(c->st_hash, 0xff, STATE_HASH * sizeof *c->st_hash);
    for (int i = 0; i < TRANS_HASH; i++) c->trans[i].key_state = -1;
    c->n_node = c->n_state = c->n_heads = c->n_trans = 0;
    for (int i = 0; i < MASK_SLOTS; i++) c->mask_state[i] = -1;  /* state ids are reused */
}

/* Drops every node and state but the current one, which is rebuilt in the
 * cleared tables (its stacks copied root first). */
static int rebuild(moe_constraint *c) {
    int s = c->cur, n = c->st_n[s];
    bool acc = c->st_acc[s];
    /* the stacks as position chains, packed into work: len, pos (leaf first)... */
    int w = 0;
    for (int i = 0; i < n; i++) {
        int len = 0;
        for (int id = c->heads[c->st_off[s] + i]; id >= 0; id = c->node[id].parent) c->chain[len++] = c->node[id].pos;
        if (w + len + 1 > 4 * MOE_GRAMMAR_MAX_EXPAND) return fail(c, "grammar: state too large to keep");
        c->work[w++] = len;
        for (int k = 0; k < len; k++) c->work[w++] = c->chain[k];
    }
    tables_clear(c);
    c->fail = 0;
    int r = 0;
    for (int i = 0; i < n; i++) {
        int len = c->work[r++];
        int32_t id = -1;
        for (int k = len - 1; k >= 0; k--) id = node_get(c, c->work[r + k], id);
        r += len;
        c->tmp[i] = id;
    }
    n = head_cmp_sort(c->tmp, n);
    c->cur = state_get(c, c->tmp, n, acc);
    return c->cur < 0 ? -1 : 0;
}

/* Before a walk: room for it (tables at most half full), else a rebuild. */
static int make_room(moe_constraint *c) {
    c->fail = 0;
    if (c->n_node < NODE_CAP / 4 && c->n_state < STATE_CAP / 4 && c->n_trans < TRANS_HASH / 4 && c->n_heads < HEAD_POOL / 4)
        return 0;
    return rebuild(c);
}

/* Back to the start. The cached nodes, states and transitions stay: a
 * constraint reused for the next generation under the same grammar starts
 * warm. */
void moe_constraint_reset(moe_constraint *c) {
    if (!c) return;
    c->ended = false;
    c->cur = -1;
    const moe_grammar *g = c->g;
    for (int attempt = 0; attempt < 2 && c->cur < 0; attempt++) {
        if (attempt) tables_clear(c);
        c->fail = 0;
        int n = 0;
        bool acc = false;
        long steps = 0;
        c->seen_gen++;
        for (int a = g->alt_first[g->root]; a < g->alt_first[g->root + 1]; a++)
            expand(c, g->alt_pos[a], -1, &n, &acc, &steps);
        if (c->fail) continue;
        n = head_cmp_sort(c->tmp, n);
        c->cur = state_get(c, c->tmp, n, acc);
    }
}

void moe_constraint_free(moe_constraint *c) {
    if (!c) return;
    free(c->node); free(c->node_hash); free(c->heads); free(c->st_off); free(c->st_n); free(c->st_acc);
    free(c->st_live); free(c->st_hash); free(c->trans); free(c->seen); free(c->tmp); free(c->work);
    free(c->chain); free(c->at_depth); free(c->mask_bits); free(c->dense);
    free(c);
}

int moe_constraint_new(const moe_grammar *g, const moe_grammar_vocab *v, moe_constraint **out, char *err, size_t errlen) {
    if (!out || !g || !v) return moe_errf(err, errlen, MOE_EINVAL, "constraint: grammar, vocab or out is NULL");
    *out = NULL;
    moe_constraint *c = calloc(1, sizeof *c);
    if (!c) return moe_errf(err, errlen, MOE_ENOMEM, "constraint: out of memory");
    c->g = g; c->v = v;
    c->node = malloc(NODE_CAP * sizeof *c->node);
    c->node_hash = malloc(NODE_HASH * sizeof *c->node_hash);
    c->heads = malloc(HEAD_POOL * sizeof *c->heads);
    c->st_off = malloc(STATE_CAP * sizeof *c->st_off);
    c->st_n = malloc(STATE_CAP * sizeof *c->st_n);
    c->st_acc = malloc(STATE_CAP);
    c->st_live = malloc(STATE_CAP * sizeof *c->st_live);
    c->st_hash = malloc(STATE_HASH * sizeof *c->st_hash);
    c->trans = malloc(TRANS_HASH * sizeof *c->trans);
    c->seen = calloc(SEEN_SLOTS, sizeof *c->seen);
    c->tmp = malloc(MOE_GRAMMAR_MAX_HEADS * sizeof *c->tmp);
    c->work = malloc((size_t)4 * MOE_GRAMMAR_MAX_EXPAND * sizeof *c->work);
    c->chain = malloc((MOE_GRAMMAR_MAX_DEPTH + 2) * sizeof *c->chain);
    c->at_depth = malloc(((size_t)v->max_depth + 2) * sizeof *c->at_depth);
    c->mask_words = (v->n_vocab + 63) / 64;
    c->dense = malloc((size_t)DENSE_STATES * 256 * sizeof *c->dense);
    c->mask_bits = malloc((size_t)MASK_SLOTS * (size_t)c->mask_words * sizeof *c->mask_bits);
    if (!c->node || !c->node_hash || !c->heads || !c->st_off || !c->st_n || !c->st_acc || !c->st_live ||
        !c->st_hash || !c->trans || !c->seen || !c->tmp || !c->work || !c->chain || !c->at_depth || !c->mask_bits || !c->dense) {
        moe_constraint_free(c);
        return moe_errf(err, errlen, MOE_ENOMEM, "constraint: out of memory");
    }
    tables_clear(c);
    moe_constraint_reset(c);
    if (c->cur < 0) {
        int rc = moe_errf(err, errlen, MOE_ERANGE, "%s", c->err);
        moe_constraint_free(c);
        return rc;
    }
    *out = c;
    return MOE_OK;
}

const char *moe_constraint_error(const moe_constraint *c) { return c ? c->err : "constraint is NULL"; }

bool moe_constraint_accepting(const moe_constraint *c) {
    return c && c->cur >= 0 && (c->ended || c->st_acc[c->cur]);
}

bool moe_constraint_finished(const moe_constraint *c) {
    if (!c || c->cur < 0) return false;
    if (c->ended) return true;
    const uint64_t *l = c->st_live[c->cur];
    return c->st_acc[c->cur] && !(l[0] | l[1] | l[2] | l[3]);
}

/* Walks bytes from the current state; the resulting state in *end, -2 when
 * they leave the grammar, -1 on a limit. One retry after a rebuild when the
 * tables fill up midway. */
static int walk(moe_constraint *c, const char *bytes, size_t len, int *end) {
    for (int attempt = 0; attempt < 2; attempt++) {
        if (make_room(c)) return MOE_ERANGE;
        int s = c->cur;
        for (size_t i = 0; i < len && s >= 0; i++) s = step(c, s, (uint8_t)bytes[i]);
        if (s != -1) { *end = s; return MOE_OK; }
        if (strcmp(c->err, "full") || attempt) break;
        c->n_node = NODE_CAP; /* force the rebuild */
    }
    if (!strcmp(c->err, "full")) snprintf(c->err, sizeof c->err, "grammar: too many parser states for one step");
    return MOE_ERANGE;
}

int moe_constraint_try_bytes(moe_constraint *c, const char *bytes, size_t len, bool *ok) {
    *ok = false;
    if (c->cur < 0 || c->ended) return c->cur < 0 ? MOE_ERANGE : MOE_OK;
    int s;
    int rc = walk(c, bytes, len, &s);
    if (rc) return rc;
    *ok = s >= 0;
    return MOE_OK;
}

int moe_constraint_accept_bytes(moe_constraint *c, const char *bytes, size_t len) {
    if (!c || (!bytes && len)) return MOE_EINVAL;
    if (c->cur < 0) return MOE_ERANGE;
    if (c->ended) { snprintf(c->err, sizeof c->err, "constraint: the generation has ended"); return MOE_EINVAL; }
    int s;
    int rc = walk(c, bytes, len, &s);
    if (rc) return rc;
    if (s < 0) { snprintf(c->err, sizeof c->err, "constraint: the bytes leave the grammar"); return MOE_EINVAL; }
    c->cur = s;
    return MOE_OK;
}

int moe_constraint_accept(moe_constraint *c, int32_t token) {
    if (!c) return MOE_EINVAL;
    const moe_grammar_vocab *v = c->v;
    if (token < 0 || token >= v->n_vocab) { snprintf(c->err, sizeof c->err, "constraint: token %d outside the vocabulary", token); return MOE_EINVAL; }
    if (c->cur < 0) return MOE_ERANGE;
    if (v->kind[token] == GV_EOG) {
        if (c->ended || !c->st_acc[c->cur]) { snprintf(c->err, sizeof c->err, "constraint: token %d ends the generation where the grammar cannot end", token); return MOE_EINVAL; }
        c->ended = true;
        return MOE_OK;
    }
    if (v->kind[token] != GV_BYTES) { snprintf(c->err, sizeof c->err, "constraint: token %d is a control token", token); return MOE_EINVAL; }
    return moe_constraint_accept_bytes(c, v->piece[token], v->piece_len[token]);
}

/* One scan of the trie in pre-order: a node whose byte is dead from its
 * parent's state is skipped with its whole subtree. */
static int mask_walk(moe_constraint *c, uint8_t *allowed, int *cnt) {
    const moe_grammar_vocab *v = c->v;
    c->at_depth[0] = c->cur;
    int n = 0;
    for (int i = 1; i < v->n_nodes;) {
        int d = v->depth[i];
        int s = step(c, c->at_depth[d - 1], v->byte[i]);
        if (s == -1) return -1;
        if (s < 0) { i = v->end[i]; continue; }
        c->at_depth[d] = s;
        for (int k = v->tok_first[i]; k < v->tok_first[i + 1]; k++) { allowed[v->tok[k]] = 1; n++; }
        i++;
    }
    *cnt = n;
    return 0;
}

int moe_constraint_mask(moe_constraint *c, uint8_t *allowed, int *n_allowed) {
    if (!c || !allowed) return MOE_EINVAL;
    const moe_grammar_vocab *v = c->v;
    memset(allowed, 0, (size_t)v->n_vocab);
    if (n_allowed) *n_allowed = 0;
    if (c->cur < 0) return MOE_ERANGE;
    if (c->ended) return MOE_OK;
    int n = 0, rc = -1;
    int slot = c->cur % MASK_SLOTS;
    uint64_t *bits = c->mask_bits + (size_t)slot * (size_t)c->mask_words;
    if (c->mask_state[slot] == c->cur) { /* this state's mask was computed before */
        for (int w = 0; w < c->mask_words; w++) {
            uint64_t x = bits[w];
            while (x) {
                int b = __builtin_ctzll(x);
                allowed[w * 64 + b] = 1;
                n++;
                x &= x - 1;
            }
        }
        goto eog;
    }
    for (int attempt = 0; attempt < 2 && rc; attempt++) {
        if (make_room(c)) return MOE_ERANGE;
        if (attempt) memset(allowed, 0, (size_t)v->n_vocab);
        rc = mask_walk(c, allowed, &n);
        if (rc && (strcmp(c->err, "full") || attempt)) break;
        if (rc) c->n_node = NODE_CAP; /* force the rebuild */
    }
    if (rc) {
        if (!strcmp(c->err, "full")) snprintf(c->err, sizeof c->err, "grammar: too many parser states for one step");
        memset(allowed, 0, (size_t)v->n_vocab);
        return MOE_ERANGE;
    }
    slot = c->cur % MASK_SLOTS;  /* a rebuild may have renumbered the state */
    bits = c->mask_bits + (size_t)slot * (size_t)c->mask_words;
    memset(bits, 0, (size_t)c->mask_words * sizeof *bits);
    for (int t = 0; t < v->n_vocab; t++) if (allowed[t]) bits[t >> 6] |= 1ull << (t & 63);
    c->mask_state[slot] = c->cur;
eog:
    if (c->st_acc[c->cur])
        for (int i = 0; i < v->n_eog; i++) { allowed[v->eog[i]] = 1; n++; }
    if (n_allowed) *n_allowed = n;
    return MOE_OK;
}
