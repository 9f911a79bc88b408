/* bench_report.c — `moefast bench`'s report of a finished bench_run: the text
 * lines, or the moefast.bench/1 JSON that `moefast price` parses (the schema
 * is documented in docs/MEASUREMENT.md; field names and order are part of it). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

static json_t *num_or_null(bool have, double v) { return have ? json_real(v) : json_null(); }

static json_t *runs_array(const double *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

/* ---- --phases ------------------------------------------------------------- */

static double profile_sum_s(const phase_profile *pp) {
    double t = 0;
    for (int i = 0; i < pp->n; i++) t += pp->st[i].seconds;
    return t;
}

/* The text table: phases that ran, in data-flow order. */
static void print_profile(const char *title, const phase_profile *pp) {
    const double k = 1.0 / pp->steps;
    printf("  %s\n", title);
    printf("    %-10s %8s %9s %7s %10s %8s %9s %8s\n", "phase", "calls", "ms", "share", "weight MB", "GB/s",
           "KV MB", "KV GB/s");
    for (int i = 0; i < pp->n; i++) {
        const moe_phase_stat *e = &pp->st[i];
        if (e->calls == 0) continue;
        printf("    %-10s %8.2f %9.4f %6.1f%% %10.3f", e->name, (double)e->calls * k, 1e3 * e->seconds * k,
               100.0 * e->seconds / pp->measured_s, e->weight_bytes * k / 1e6);
        if (e->weight_bytes > 0 && e->seconds > 0) printf(" %8.2f", e->weight_bytes / e->seconds / 1e9);
        else printf(" %8s", "-");
        if (e->kv_bytes > 0 && e->seconds > 0)
            printf(" %9.3f %8.2f", e->kv_bytes * k / 1e6, e->kv_bytes / e->seconds / 1e9);
        printf("\n");
    }
    const double sum = profile_sum_s(pp);
    printf("    %-19s %9.4f %5.1f%%   of the measured %.4f ms; the rest, %.4f ms, is outside the phases\n",
           "sum of phases", 1e3 * sum * k, 100.0 * sum / pp->measured_s, 1e3 * pp->measured_s * k, 1e3 * (pp->measured_s - sum) * k);
}

static json_t *profile_json(const phase_profile *pp, int tokens) {
    if (!pp->have) return json_null();
    const double k = 1.0 / pp->steps, sum = profile_sum_s(pp);
    json_t *w = json_object();
    json_object_set_new(w, "steps", json_integer(pp->steps));
    json_object_set_new(w, "tokens", json_integer(tokens));
    json_object_set_new(w, "measured_ms_per_step", json_real(1e3 * pp->measured_s * k));
    json_object_set_new(w, "phases_ms_per_step", json_real(1e3 * sum * k));
    json_object_set_new(w, "outside_ms_per_step", json_real(1e3 * (pp->measured_s - sum) * k));
    json_t *a = json_array();
    for (int i = 0; i < pp->n; i++) {
        const moe_phase_stat *e = &pp->st[i];
        if (e->calls == 0) continue;
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(e->name));
        json_object_set_new(o, "calls_per_step", json_real((double)e->calls * k));
        json_object_set_new(o, "ms_per_step", json_real(1e3 * e->seconds * k));
        json_object_set_new(o, "share", json_real(e->seconds / pp->measured_s));
        json_object_set_new(o, "weight_mb_per_step", json_real(e->weight_bytes * k / 1e6));
        json_object_set_new(o, "gb_per_s", num_or_null(e->weight_bytes > 0 && e->seconds > 0,
                                                       e->weight_bytes / e->seconds / 1e9));
        json_object_set_new(o, "kv_mb_per_step", json_real(e->kv_bytes * k / 1e6));
        json_object_set_new(o, "kv_gb_per_s", num_or_null(e->kv_bytes > 0 && e->seconds > 0,
                                                          e->kv_bytes / e->seconds / 1e9));
        json_array_append_new(a, o);
    }
    json_object_set_new(w, "entries", a);
    return w;
}

/* ---- JSON ------------------------------------------------------------------ */

static json_t *json_model(const bench_run *b) {
    json_t *jm = json_object();
    json_object_set_new(jm, "path", json_string(b->o.model));
    json_object_set_new(jm, "arch", json_string(b->arch_buf));
    json_object_set_new(jm, "n_vocab", json_integer(b->n_vocab));
    json_object_set_new(jm, "bytes_per_token", json_integer((json_int_t)b->bpt));
    return jm;
}

static json_t *json_config(const bench_run *b) {
    const bench_opts *o = &b->o;
    const bool have_p = b->sum.have_p, have_d = b->sum.have_d;
    json_t *jc = json_object();
    json_object_set_new(jc, "threads", json_integer(b->threads_used));
    json_object_set_new(jc, "flags", json_string(b->flags_buf));
    json_object_set_new(jc, "isa", json_string(b->kern_name));
    json_object_set_new(jc, "window", json_string(have_p && have_d ? "both" : have_p ? "prefill" : "decode"));
    json_object_set_new(jc, "prompt_len", json_integer(b->P));
    json_object_set_new(jc, "decode_steps", json_integer(b->D));
    json_object_set_new(jc, "repeat", json_integer(o->repeat));
    json_object_set_new(jc, "cold", json_boolean(o->cold));
    json_object_set_new(jc, "prompt_source", json_string(o->trace ? "trace" : "random"));
    json_object_set_new(jc, "trace", o->trace ? json_string(o->trace) : json_null());
    json_object_set_new(jc, "note", b->note[0] ? json_string(b->note) : json_null());
    return jc;
}

static json_t *json_prefill(const bench_run *b) {
    const double p_s = b->sum.p_s;
    const int P = b->P;
    json_t *jp = json_object();
    json_object_set_new(jp, "tokens", json_integer(P));
    json_object_set_new(jp, "seconds", json_real(p_s));
    json_object_set_new(jp, "seconds_per_token", json_real(p_s / P));
    json_object_set_new(jp, "tokens_per_second", json_real(p_s > 0 ? P / p_s : 0));
    json_object_set_new(jp, "runs_seconds", runs_array(b->tm.prefill, b->o.repeat));
    return jp;
}

static json_t *json_ceiling(const bench_run *b) {
    const bench_summary *u = &b->sum;
    json_t *jce = json_object();
    json_object_set_new(jce, "seconds_per_token", json_real(u->ceil_s));
    json_object_set_new(jce, "tokens_per_second", json_real(1.0 / u->ceil_s));
    json_object_set_new(jce, "runs_seconds_per_token", runs_array(b->tm.ceil, b->o.repeat));
    json_t *jk = json_array();
    for (int i = 0; i < u->n_ceil_parts && i < MAX_CEIL_PARTS; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "kernel", json_string(u->ceil_parts[i].kernel));
        json_object_set_new(e, "bytes_per_token", json_real(u->ceil_parts[i].bytes_per_token));
        json_object_set_new(e, "gb_per_second", json_real(u->ceil_parts[i].gb_per_s));
        json_array_append_new(jk, e);
    }
    json_object_set_new(jce, "kernels", jk);
    const moe_ceiling_part *a = u->attn_part;
    json_t *ja = json_null();
    if (a && a->gb_per_s > 0) {
        ja = json_object();
        json_object_set_new(ja, "kernel", json_string(a->kernel));
        json_object_set_new(ja, "bytes_per_token", json_real(a->bytes_per_token));
        json_object_set_new(ja, "gb_per_second", json_real(a->gb_per_s));
    }
    json_object_set_new(jce, "attention", ja);
    return jce;
}

static json_t *json_decode(const bench_run *b) {
    const bench_summary *u = &b->sum;
    const timings *tm = &b->tm;
    const int D = b->D, repeat = b->o.repeat;
    /* per-window bandwidth figures: not under --ab (its steps mix two configurations) */
    const bool per_window = u->have_bw && !b->o.ab, have_ceil = u->have_ceil;
    json_t *jd = json_object();
    json_object_set_new(jd, "seed_tokens", json_integer(b->P));
    json_object_set_new(jd, "steps", json_integer(D));
    json_object_set_new(jd, "seconds", json_real(u->d_s));
    json_object_set_new(jd, "seconds_per_token", json_real(u->d_s / D));
    json_object_set_new(jd, "tokens_per_second", json_real(u->d_s > 0 ? D / u->d_s : 0));
    json_object_set_new(jd, "seed_seconds", json_real(u->seed_s));
    json_object_set_new(jd, "steps_seconds", json_real(u->steps_s));
    json_object_set_new(jd, "steps_tokens_per_second", json_real(u->steps_tps));
    json_object_set_new(jd, "bytes_per_token", json_integer((json_int_t)b->bpt));
    json_object_set_new(jd, "achieved_gb_per_second", json_real(u->achieved));
    json_object_set_new(jd, "bandwidth_gb_per_second", num_or_null(u->have_bw, u->bw));
    json_object_set_new(jd, "pct_of_bandwidth_limit", num_or_null(u->have_bw, u->pct));
    json_object_set_new(jd, "kv_bytes_per_token", json_real(b->kvpt));
    json_object_set_new(jd, "pct_of_bandwidth_limit_with_kv", num_or_null(u->have_bw, u->pct_kv));
    json_object_set_new(jd, "compute_ceiling", have_ceil ? json_ceiling(b) : json_null());
    json_object_set_new(jd, "roofline_tokens_per_second", num_or_null(have_ceil && u->roof_tps > 0, u->roof_tps));
    json_object_set_new(jd, "pct_of_roofline", num_or_null(have_ceil && u->roof_tps > 0, u->pct_roof));
    json_object_set_new(jd, "pct_of_roofline_runs", have_ceil ? runs_array(tm->roof, repeat) : json_null());
    json_object_set_new(jd, "pct_of_weights_roofline",
                        num_or_null(have_ceil && u->roof_tps > 0, u->pct_roof_w));
    json_object_set_new(jd, "pct_of_weights_roofline_runs", have_ceil ? runs_array(tm->roof_w, repeat) : json_null());
    json_object_set_new(jd, "bandwidth_runs_gb_per_second", per_window ? runs_array(tm->bw, repeat) : json_null());
    json_object_set_new(jd, "bandwidth_before_runs_gb_per_second",
                        per_window ? runs_array(tm->bw0, repeat) : json_null());
    json_object_set_new(jd, "bandwidth_after_runs_gb_per_second",
                        per_window ? runs_array(tm->bw1, repeat) : json_null());
    json_t *st = json_array();
    for (int r = 0; r < repeat && per_window; r++) json_array_append_new(st, json_boolean(tm->steady[r]));
    json_object_set_new(jd, "bandwidth_steady_runs", per_window ? st : (json_decref(st), json_null()));
    json_object_set_new(jd, "pct_steady_windows", per_window ? json_integer(u->bws.steady) : json_null());
    json_object_set_new(jd, "pct_runs", per_window ? runs_array(tm->pct, repeat) : json_null());
    json_object_set_new(jd, "runs_seconds", runs_array(tm->decode, repeat));
    return jd;
}

static json_t *json_token_check(const token_check *tc) {
    json_t *jt = json_object();
    json_object_set_new(jt, "ok", json_boolean(tc->ok));
    json_object_set_new(jt, "checked", json_integer(tc->checked));
    json_object_set_new(jt, "ties", json_integer(tc->ties));
    json_object_set_new(jt, "first_mismatch_step", json_integer(tc->step));
    json_object_set_new(jt, "window", tc->window ? json_string(tc->window) : json_null());
    json_object_set_new(jt, "expected", json_integer(tc->expected));
    json_object_set_new(jt, "actual", json_integer(tc->actual));
    char cfg[2] = {tc->config, 0};
    json_object_set_new(jt, "config", tc->config ? json_string(cfg) : json_null());
    return jt;
}

static json_t *json_ab(const bench_run *b) {
    const ab_stats *ab = &b->ab;
    json_t *ja = json_object();
    json_object_set_new(ja, "spec", json_string(b->o.ab));
    json_object_set_new(ja, "a_flags", json_string(b->a_flags));
    json_object_set_new(ja, "b_flags", json_string(b->b_flags));
    json_object_set_new(ja, "b_sibling_session", json_boolean(b->b_sibling));
    json_object_set_new(ja, "b_tokens_checked", json_boolean(b->b_check && b->o.trace));
    json_object_set_new(ja, "a_median_s", json_real(ab->a_med));
    json_object_set_new(ja, "b_median_s", json_real(ab->b_med));
    json_object_set_new(ja, "a_tokens_per_second", json_real(1.0 / ab->a_med));
    json_object_set_new(ja, "b_tokens_per_second", json_real(1.0 / ab->b_med));
    json_object_set_new(ja, "speedup", json_real(ab->speedup));
    json_object_set_new(ja, "lo", json_real(ab->lo));
    json_object_set_new(ja, "hi", json_real(ab->hi));
    json_object_set_new(ja, "pairs", json_integer(ab->pairs));
    json_object_set_new(ja, "resamples", json_integer(AB_RESAMPLES));
    json_object_set_new(ja, "seed", json_integer((json_int_t)AB_SEED));
    return ja;
}

static json_t *json_phases(const bench_run *b) {
    json_t *jph = json_object();
    json_object_set_new(jph, "profiled_repeat", json_integer(b->o.repeat));
    json_object_set_new(jph, "decode", profile_json(&b->prof_decode, b->D));
    json_object_set_new(jph, "prefill", profile_json(&b->prof_prefill, b->P));
    return jph;
}

int bench_report_json(const bench_run *b) {
    const bench_opts *o = &b->o;
    json_t *root = json_object();
    json_object_set_new(root, "schema", json_string(BENCH_SCHEMA));
    json_object_set_new(root, "model", json_model(b));
    json_object_set_new(root, "config", json_config(b));
    json_object_set_new(root, "load_seconds", json_real(b->t_load));
    json_object_set_new(root, "peak_rss_bytes", json_integer(b->hwm));
    json_object_set_new(root, "prefill", b->sum.have_p ? json_prefill(b) : json_null());
    json_object_set_new(root, "decode", b->sum.have_d ? json_decode(b) : json_null());
    json_object_set_new(root, "token_check", o->trace ? json_token_check(&b->tc) : json_null());
    json_object_set_new(root, "ab", o->ab ? json_ab(b) : json_null());
    json_object_set_new(root, "phases", o->phases ? json_phases(b) : json_null());
    char *txt = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (!txt) return cli_fail(CMD, "out of memory");
    puts(txt);
    free(txt);
    return 0;
}

/* ---- text ------------------------------------------------------------------ */

/* The bandwidth line(s) after "achieved": against one measurement (--ab),
 * the window's own (one repeat) or the median over the steady windows. */
static void text_bandwidth(const bench_run *b) {
    const bench_summary *u = &b->sum;
    const timings *tm = &b->tm;
    const double limit_tps = b->bpt ? u->bw * 1e9 / (double)b->bpt : 0.0;
    if (u->have_bw && b->o.ab)
        printf("  = %.1f %% of the measured %.2f GB/s read bandwidth (limit %.1f tok/s)\n", u->pct, u->bw, limit_tps);
    else if (u->have_bw && b->o.repeat == 1)
        printf("  = %.1f %% of the %.2f GB/s read bandwidth measured around the window (%.2f before, %.2f "
               "after%s; limit %.1f tok/s)\n", u->pct, u->bw, tm->bw0[0], tm->bw1[0],
               tm->steady[0] ? "" : ": NOT steady, the figure is doubtful", limit_tps);
    else if (u->have_bw)
        printf("\n  bandwidth limit      %10.1f %% (median over the %d of %d repeats whose read bandwidth, measured\n"
               "                                  right before and right after the window, agreed within %.0f %%%s;\n"
               "                                  window bandwidths %.2f..%.2f GB/s%s)\n",
               u->pct, u->bws.steady ? u->bws.steady : u->bws.measured, b->o.repeat, 100.0 * (STATS_BW_STEADY - 1),
               u->bws.steady ? "" : ": none did, so over all of them", u->bw_lo, u->bw_hi,
               u->bw_hi > 1.25 * u->bw_lo ? "; the machine's bandwidth changed between repeats" : "");
    else
        printf("  (bandwidth not measured)\n");
    if (u->have_bw)
        printf("  limit with KV        %10.1f %% (the same, counting the KV cache's bytes too: (weights + KV)\n"
               "                                  per step / bandwidth)\n", u->pct_kv);
}

static void text_part(const moe_ceiling_part *p, double bw) {
    printf("    %-28s %9.3f MB/token at %7.2f GB/s from cache = %6.3f ms%s\n", p->kernel, p->bytes_per_token / 1e6,
           p->gb_per_s, p->gb_per_s > 0 ? p->bytes_per_token / p->gb_per_s / 1e6 : 0.0,
           p->gb_per_s < bw ? "  (slower than that window's memory)" : "");
}

static void text_ceiling(const bench_run *b) {
    const bench_summary *u = &b->sum;
    const int th = b->threads_used;
    printf("  compute ceiling      %10.1f tok/s (the step's matrix products and attention items with their\n"
           "                                  weights and KV cache in cache, %d thread%s; norms and glue not in\n"
           "                                  it), per kernel (measured after the last window):\n",
           1.0 / u->ceil_s, th, th == 1 ? "" : "s");
    for (int i = 0; i < u->n_ceil_parts && i < MAX_CEIL_PARTS; i++) text_part(&u->ceil_parts[i], u->ceil_bw);
    if (u->attn_part && u->attn_part->gb_per_s > 0) text_part(u->attn_part, u->ceil_bw);
    if (u->roof_tps > 0)
        printf("  roofline             %10.1f %% (the steps against the roofline, %.1f tok/s: each kernel's bytes at\n"
               "                                  the slower of the read bandwidth and its rate from cache;\n"
               "                                  the weights' kernels alone: %.1f %%)\n",
               u->pct_roof, u->roof_tps, u->pct_roof_w);
}

static void text_decode(const bench_run *b) {
    const bench_summary *u = &b->sum;
    const int P = b->P, D = b->D;
    printf("  decode   (%d seed + %d steps)  %8.2f tok/s   %9.3f ms/tok\n", P, D, D / u->d_s, 1e3 * u->d_s / D);
    printf("  decode steps alone   %10.2f tok/s   %9.3f ms/tok  (seed %.3f s)\n", u->steps_tps,
           1e3 * u->steps_s / D, u->seed_s);
    printf("  weights per token    %10.3f MB\n", (double)b->bpt / 1e6);
    printf("  KV cache per token   %10.3f MB  (mean over the steps: keys and values attention reads)\n",
           b->kvpt / 1e6);
    printf("  achieved             %10.3f GB/s", u->achieved);
    text_bandwidth(b);
    if (u->have_ceil) text_ceiling(b);
}

static void text_ab(const bench_run *b) {
    const ab_stats *ab = &b->ab;
    printf("  in-process A/B (--ab %s%s): %d pairs of %s\n", b->o.ab[0] ? b->o.ab : "''",
           strcmp(b->a_flags, b->b_flags) ? "" : ", B = A: an A/A control", ab->pairs,
           b->b_sibling ? "runs of the same decode step, A first on even steps, B first on odd ones"
                        : "adjacent decode steps, A even, B odd");
    printf("    A %9.3f ms/step %10.2f tok/s   flags %s\n", 1e3 * ab->a_med, 1.0 / ab->a_med, b->a_flags);
    printf("    B %9.3f ms/step %10.2f tok/s   flags %s\n", 1e3 * ab->b_med, 1.0 / ab->b_med, b->b_flags);
    if (b->b_sibling)
        printf("    (B: a sibling session with its own KV cache and seed, same model and worker pool; the window's\n"
               "     figures above are A's%s)\n",
               b->b_check || !b->o.trace ? "" : "; its numerics differ from A's, so its tokens were not checked");
    printf("    speedup A/B of the medians %.4f [%.4f, %.4f] (bootstrap 95%%, %d resamples of the pairs, "
           "seed %llu; > 1: B faster)\n", ab->speedup, ab->lo, ab->hi, AB_RESAMPLES, (unsigned long long)AB_SEED);
}

static void text_phases(const bench_run *b) {
    char title[256], rep_note[64] = "";
    const int repeat = b->o.repeat;
    if (repeat > 1) snprintf(rep_note, sizeof rep_note, " of the last repeat only (%d of %d)", repeat, repeat);
    if (b->prof_prefill.have) {
        snprintf(title, sizeof title, "phase profile, prefill window (%d tokens, one forward)%s, per window:", b->P,
                 rep_note);
        print_profile(title, &b->prof_prefill);
    }
    if (b->prof_decode.have) {
        snprintf(title, sizeof title, "phase profile, decode: the %d steps after the seed (context %d..%d)%s, "
                 "per step:", b->D, b->P + 1, b->P + b->D, rep_note);
        print_profile(title, &b->prof_decode);
    }
}

static void text_token_check(const bench_run *b) {
    const token_check *tc = &b->tc;
    if (!b->o.trace)
        printf("  token check          none (no --trace; prompt = %d pseudo-random ids)\n", b->P);
    else if (tc->ok)
        printf("  token check          ok (%d steps checked, %d tolerated ties) against %s\n", tc->checked, tc->ties,
               b->o.trace);
    else if (tc->config)
        printf("  token check          FAILED: %s step %d (run with flags %c) expected %d, got %d\n", tc->window,
               tc->step, tc->config, tc->expected, tc->actual);
    else
        printf("  token check          FAILED: %s step %d expected %d, got %d\n", tc->window, tc->step, tc->expected,
               tc->actual);
}

void bench_report_text(const bench_run *b) {
    const bench_summary *u = &b->sum;
    const int th = b->threads_used, P = b->P;
    printf("moefast bench: %s (%s), %d thread%s, flags %s, isa %s\n", b->o.model, b->arch_buf, th, th == 1 ? "" : "s",
           b->flags_buf, b->kern_name);
    if (b->note[0]) printf("  note: %s\n", b->note);
    printf("  load                 %10.3f s\n", b->t_load);
    if (u->have_p) printf("  prefill  (%4d tok)  %10.2f tok/s   %9.3f ms/tok\n", P, P / u->p_s, 1e3 * u->p_s / P);
    if (u->have_d) text_decode(b);
    if (b->o.ab) text_ab(b);
    if (b->prof_prefill.have || b->prof_decode.have) text_phases(b);
    printf("  peak RSS (VmHWM)     %10.1f MB\n", b->hwm >= 0 ? (double)b->hwm / 1e6 : -1.0);
    text_token_check(b);
    if (b->o.repeat > 1) printf("  (medians of %d repeats)\n", b->o.repeat);
}
