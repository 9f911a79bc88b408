/* kv_mem.c — process memory of a filled KV cache (prints, never asserts;
 * bench/kv_mem.sh makes the table of docs/KV_TQ.md from it).
 *
 *   kv_mem MODEL FLAGS N [THREADS [FILL]]
 *
 * Loads MODEL with FLAGS (e.g. default, +kv_q8, +kv_tq), creates a session
 * of n_ctx N, prefills FILL (default N) pseudo-random token ids (chunks of
 * the default n_batch) and prints one line: VmSize (address space) and VmRSS after the
 * load, after the session's creation and after the prefill, and VmHWM (the
 * peak RSS) at the end, in MB (1e6 bytes). The KV cache is allocated at
 * session creation for all N positions (calloc: address space reserved, the
 * pages zero and untouched), so RSS grows only as positions are written.
 * Without arguments it says so and exits 0 (bench/run.sh runs every bench
 * binary bare). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moefast.h"

static double mb(long long b) { return (double)b / 1e6; }

int main(int argc, char **argv) {
    if (argc < 4) {
        printf("kv_mem: usage: kv_mem MODEL FLAGS N [THREADS [FILL]] (no model given: skipped)\n");
        return 0;
    }
    const int n = atoi(argv[3]), th = argc > 4 ? atoi(argv[4]) : 2, fill = argc > 5 ? atoi(argv[5]) : n;
    if (n < 1 || th < 1 || fill < 1 || fill > n) { fprintf(stderr, "kv_mem: bad N, THREADS or FILL\n"); return 2; }
    char err[MOE_ERR_LEN] = "";
    moe_load_params lp = {.flags = argv[2]};
    moe_model *m = NULL;
    if (moe_model_load(argv[1], &lp, &m, err, sizeof err) != MOE_OK) { fprintf(stderr, "kv_mem: %s\n", err); return 1; }
    const long long sz0 = moe_proc_status_bytes("VmSize"), rss0 = moe_proc_status_bytes("VmRSS");
    moe_session_params sp = {.n_ctx = n, .n_threads = th};
    moe_session *s = NULL;
    if (moe_session_new(m, &sp, &s, err, sizeof err) != MOE_OK) {
        fprintf(stderr, "kv_mem: %s\n", err);
        moe_model_free(m);
        return 1;
    }
    const long long sz1 = moe_proc_status_bytes("VmSize"), rss1 = moe_proc_status_bytes("VmRSS");
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!ids) { fprintf(stderr, "kv_mem: out of memory\n"); return 1; }
    const int nv = moe_model_n_vocab(m);
    uint32_t x = 12345;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        ids[i] = (int32_t)((x >> 8) % (uint32_t)(nv > 1 ? nv - 1 : 1)) + 1;
    }
    const int rc = moe_session_forward(s, ids, fill, NULL, false);
    if (rc != MOE_OK) fprintf(stderr, "kv_mem: %s\n", moe_session_error(s));
    const long long sz2 = moe_proc_status_bytes("VmSize"), rss2 = moe_proc_status_bytes("VmRSS");
    const long long hwm = moe_proc_status_bytes("VmHWM");
    printf("flags %s n_ctx %d filled %d: VmSize MB load %.1f session %.1f filled %.1f; VmRSS MB load %.1f session %.1f filled "
           "%.1f; VmHWM MB %.1f\n",
           argv[2], n, fill, mb(sz0), mb(sz1), mb(sz2), mb(rss0), mb(rss1), mb(rss2), mb(hwm));
    free(ids);
    moe_session_free(s);
    moe_model_free(m);
    return rc == MOE_OK ? 0 : 1;
}
