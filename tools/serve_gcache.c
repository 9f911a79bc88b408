/* serve_gcache.c — compiled grammars reused across `moefast serve` requests
 * (docs/SERVE.md, "Grammar cache").
 *
 * A constraint owns about 12 MB of tables (states, transitions, dense rows,
 * recent masks) and learns its transitions as generation explores them, so
 * building one per request costs the allocation and every first mask again.
 * Agents send the same tools (or schema) request after request: when a
 * request ends, its grammar and constraint, reset to the start state, go
 * into a small cache keyed by the grammar's text; a request with the same
 * text takes them out instead of parsing and building. An entry belongs to
 * one request at a time (taken out, not shared), and a reset constraint
 * gives the masks a fresh one gives (they depend on the grammar state
 * only; the caches only make them cheaper), so a request's tokens are the
 * same whether it hit the cache or not. At most GC_SLOTS entries: the
 * least recently returned is freed first; all are freed at shutdown. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

#define GC_SLOTS 4

typedef struct gc_entry {
    char *key;              /* kind byte, then the grammar text */
    size_t klen;
    moe_grammar *g;
    moe_constraint *c;
    uint64_t when;
} gc_entry;

struct srv_gcache {
    pthread_mutex_t mu;
    gc_entry e[GC_SLOTS];
    int n;
    uint64_t tick, hits, misses;
};

int gcache_new(srv *s) {
    s->gcache = calloc(1, sizeof *s->gcache);
    if (!s->gcache) return MOE_ENOMEM;
    pthread_mutex_init(&s->gcache->mu, NULL);
    return MOE_OK;
}

static void entry_free(gc_entry *x) {
    free(x->key);
    moe_constraint_free(x->c);
    moe_grammar_free(x->g);
    memset(x, 0, sizeof *x);
}

void gcache_free(srv *s) {
    srv_gcache *gc = s->gcache;
    if (!gc) return;
    for (int i = 0; i < gc->n; i++) entry_free(&gc->e[i]);
    pthread_mutex_destroy(&gc->mu);
    free(gc);
    s->gcache = NULL;
}

void gcache_stats(srv *s, uint64_t *hits, uint64_t *misses) {
    *hits = *misses = 0;
    if (!s->gcache) return;
    pthread_mutex_lock(&s->gcache->mu);
    *hits = s->gcache->hits;
    *misses = s->gcache->misses;
    pthread_mutex_unlock(&s->gcache->mu);
}

int gcache_build(srv *s, srv_req *r, char kind, const char *text, size_t len, char *err, size_t errlen) {
    char *key = malloc(len + 1);
    if (!key) { snprintf(err, errlen, "out of memory"); return MOE_ENOMEM; }
    key[0] = kind;
    memcpy(key + 1, text, len);
    srv_gcache *gc = s->gcache;
    if (gc) {
        pthread_mutex_lock(&gc->mu);
        for (int i = 0; i < gc->n; i++)
            if (gc->e[i].klen == len + 1 && !memcmp(gc->e[i].key, key, len + 1)) {
                r->gram = gc->e[i].g;
                r->con = gc->e[i].c;
                free(gc->e[i].key);
                gc->e[i] = gc->e[--gc->n];
                memset(&gc->e[gc->n], 0, sizeof gc->e[gc->n]);
                gc->hits++;
                break;
            }
        if (!r->con) gc->misses++;
        pthread_mutex_unlock(&gc->mu);
    }
    int rc = MOE_OK;
    if (!r->con) {
        rc = kind == 'S' ? moe_grammar_from_json_schema(text, len, &r->gram, err, errlen)
                         : moe_grammar_parse(text, len, NULL, &r->gram, err, errlen);
        if (rc == MOE_OK) rc = moe_constraint_new(r->gram, s->gvoc, &r->con, err, errlen);
    }
    if (rc == MOE_OK && gc) {
        r->gkey = key;
        r->gkey_len = len + 1;
        r->gcache = gc;
    } else
        free(key);
    return rc;
}

void gcache_give(srv_req *r) {
    srv_gcache *gc = r->gcache;
    if (!gc || !r->con || !r->gkey) return;
    moe_constraint_reset(r->con);
    pthread_mutex_lock(&gc->mu);
    if (gc->n == GC_SLOTS) {                       /* the least recently returned goes */
        int old = 0;
        for (int i = 1; i < gc->n; i++) if (gc->e[i].when < gc->e[old].when) old = i;
        entry_free(&gc->e[old]);
        gc->e[old] = gc->e[--gc->n];
        memset(&gc->e[gc->n], 0, sizeof gc->e[gc->n]);
    }
    gc->e[gc->n++] = (gc_entry){r->gkey, r->gkey_len, r->gram, r->con, ++gc->tick};
    pthread_mutex_unlock(&gc->mu);
    r->gkey = NULL;
    r->gram = NULL;
    r->con = NULL;
}
