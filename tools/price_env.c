/* price_env.c — `moefast price`'s validity gate on the environment
 * (docs/MEASUREMENT.md): around each pair of runs the 1-minute load average,
 * the CPU time stolen by the hypervisor (/proc/stat's steal column) and a
 * quick memory bandwidth probe (moe_probe_read_bandwidth) before and after.
 * A pair that straddles a change of the memory's state (the two probes
 * differ by more than --gate-bw %) or lost more than PRICE_STEAL_MAX of its
 * CPU time is run again, at most --gate-retries times; the reports say how
 * many pairs were rerun and why. */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "price_report.h"

/* The first line of /proc/stat: user nice system idle iowait irq softirq
 * steal ... (jiffies since boot); total = the first eight. */
void price_cpu_read(price_cpu *c) {
    *c = (price_cpu){0};
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    unsigned long long v[8] = {0};
    c->ok = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]) == 8;
    fclose(f);
    for (int i = 0; i < 8; i++) c->total += v[i];
    c->steal = v[7];
}

double price_load1(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double l = -1;
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

const char *price_gate_why(const price_env *e, double bw_pct) {
    if (bw_pct > 0 && e->bw0 > 0 && e->bw1 > 0) {
        const double hi = e->bw0 > e->bw1 ? e->bw0 : e->bw1;
        if (fabs(e->bw0 - e->bw1) > bw_pct / 100 * hi) return "bandwidth";
    }
    if (e->steal > PRICE_STEAL_MAX) return "steal";
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median and maximum of the known (>= 0) values of field off of env[]; false when none */
static bool med_max(const price_report *r, size_t off, double *med, double *max) {
    double *v = malloc((size_t)r->n_pairs * sizeof *v);
    int n = 0;
    for (int i = 0; v && i < r->n_pairs; i++) {
        const double x = *(const double *)((const char *)&r->env[i] + off);
        if (x >= 0) v[n++] = x;
    }
    if (n) {
        qsort(v, (size_t)n, sizeof *v, cmp_d);
        *med = v[n / 2];
        *max = v[n - 1];
    }
    free(v);
    return n > 0;
}

void price_env_text(const price_report *r, FILE *f) {
    if (!r->env) return;
    fprintf(f, "\n  environment gate: ");
    if (r->gate_bw_pct > 0)
        fprintf(f, "a pair is rerun when the bandwidth probe before and after it differs by > %g%%", r->gate_bw_pct);
    else
        fprintf(f, "no bandwidth probe (--gate-bw 0)");
    fprintf(f, " or > %g%% of its CPU time was stolen; at most %d reruns a pair\n", PRICE_STEAL_MAX * 100,
            r->gate_retries);
    fprintf(f, "  reruns: %d (bandwidth changed: %d, steal: %d); pairs kept after the last rerun still failing: %d\n",
            r->rerun_bw + r->rerun_steal, r->rerun_bw, r->rerun_steal, r->kept_failing);
    double md, mx;
    if (med_max(r, offsetof(price_env, load1), &md, &mx)) fprintf(f, "  load average (1 min): median %.2f, max %.2f", md, mx);
    if (med_max(r, offsetof(price_env, steal), &md, &mx)) fprintf(f, "; steal: median %.2f%%, max %.2f%%", md * 100, mx * 100);
    if (r->gate_bw_pct > 0 && med_max(r, offsetof(price_env, bw0), &md, &mx))
        fprintf(f, "; probe before the pairs: median %.2f GB/s", md);
    fprintf(f, "\n");
    if (r->cold) fprintf(f, "  --cold: the prefill window is each run's first forward (no warm-up forward)\n");
}

void price_env_json(const price_report *r, void *root_) {
    json_t *root = root_;
    json_object_set_new(root, "cold", json_boolean(r->cold));
    if (!r->env) return;
    json_t *g = json_object(), *pairs = json_array();
    json_object_set_new(g, "bandwidth_tolerance_pct", json_integer((json_int_t)r->gate_bw_pct));
    json_object_set_new(g, "steal_max", json_real(PRICE_STEAL_MAX));
    json_object_set_new(g, "max_reruns_per_pair", json_integer(r->gate_retries));
    json_object_set_new(g, "reruns", json_integer(r->rerun_bw + r->rerun_steal));
    json_t *why = json_object();
    json_object_set_new(why, "bandwidth", json_integer(r->rerun_bw));
    json_object_set_new(why, "steal", json_integer(r->rerun_steal));
    json_object_set_new(g, "reruns_by_reason", why);
    json_object_set_new(g, "kept_failing", json_integer(r->kept_failing));
    for (int i = 0; i < r->n_pairs; i++) {
        const price_env *e = &r->env[i];
        json_t *o = json_object();
        json_object_set_new(o, "load1", e->load1 >= 0 ? json_real(e->load1) : json_null());
        json_object_set_new(o, "steal", e->steal >= 0 ? json_real(e->steal) : json_null());
        json_object_set_new(o, "bandwidth_before_gb_per_second", e->bw0 > 0 ? json_real(e->bw0) : json_null());
        json_object_set_new(o, "bandwidth_after_gb_per_second", e->bw1 > 0 ? json_real(e->bw1) : json_null());
        json_object_set_new(o, "attempts", json_integer(e->attempts));
        json_object_set_new(o, "gate_ok", json_boolean(e->gate_ok));
        json_array_append_new(pairs, o);
    }
    json_object_set_new(g, "pairs", pairs);
    json_object_set_new(root, "environment", g);
}
