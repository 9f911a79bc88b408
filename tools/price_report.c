/* price_report.c — statistics and reports of `moefast price`.
 *
 * Per window, the speedup of pair i is A's seconds/token over B's (> 1: B is
 * faster). The point estimate is the median over pairs; its 95% interval is a
 * percentile bootstrap over pairs (seeded, so a report is reproducible from
 * its runs). The score, decode^0.75 x prefill^0.25, is bootstrapped from the
 * same resampled pairs for both windows, keeping each pair's two windows
 * together. A third window, steps (the decode window's D steps without the
 * seed prefill), is reported beside them from the same resamples, because the
 * seed drowns small per-step changes in the decode window's noise; it is
 * informational only: neither the score nor the rejection rule reads it.
 * docs/MEASUREMENT.md describes the statistics and the schemas. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "price_report.h"
#include "stats.h"

#define REJECT_BELOW 0.95

static const char *const WIN_NAME[PW_COUNT] = {"prefill", "decode", "steps"};

/* The timing-window map printed with every report. */
static const char *const MAP_INSIDE[PW_COUNT] = {
    "one forward of the P-token prompt on an empty KV cache + argmax of the last logits; s/token = seconds / P",
    "seed prefill of the P-token prompt + argmax, then D teacher-forced single-token forwards, each + argmax; "
    "s/token = seconds / D",
    "the decode window's D steps alone, without the seed prefill; s/token = steps seconds / D; "
    "informational: not part of the score, never a cause of rejection",
};
static const char *const MAP_OUTSIDE =
    "process start, model load, session allocation, tokenization (the ids are given), the untimed warm-up "
    "forward, the discarded warm-up run of each side, the token check against the trace, JSON output";

/* ---- statistics ----------------------------------------------------------- */

typedef struct { uint64_t s[4]; } rng_t;

static void rng_seed(rng_t *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = stats_splitmix64(&seed);
}
static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
/* xoshiro256** */
static uint64_t rng_next(rng_t *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return out;
}
/* Uniform in [0, n) without modulo bias worth caring about (n is small). */
static int rng_below(rng_t *r, int n) { return (int)((rng_next(r) >> 11) * 0x1.0p-53 * n); }


static const char *interval_verdict(double lo, double hi) {
    if (lo <= 1.0 && hi >= 1.0) return "within noise";
    return lo > 1.0 ? "B faster" : "B slower";
}

int price_analyse(price_report *r) {
    const int n = r->n_pairs, nb = r->resamples;
    double *tmp = malloc((size_t)n * sizeof *tmp);
    double *tmp2 = malloc((size_t)n * sizeof *tmp2);
    double *tmp3 = malloc((size_t)n * sizeof *tmp3);
    /* boot[w] for each window, boot[NB_SCORE] for the score. */
    enum { NB_SCORE = PW_COUNT, NB = PW_COUNT + 1 };
    double *boot[NB];
    int ok = tmp && tmp2 && tmp3;
    for (int k = 0; k < NB; k++) ok &= (boot[k] = malloc((size_t)nb * sizeof(double))) != NULL;
    for (int w = 0; w < PW_COUNT && ok; w++) {
        price_window *pw = &r->win[w];
        pw->speedup = malloc((size_t)n * sizeof *pw->speedup);
        if (!pw->speedup) { ok = 0; break; }
        for (int i = 0; i < n; i++) pw->speedup[i] = r->ra[i].s_per_tok[w] / r->rb[i].s_per_tok[w];
        for (int i = 0; i < n; i++) tmp[i] = r->ra[i].s_per_tok[w];
        pw->a_med = stats_median_inplace(tmp, n);
        for (int i = 0; i < n; i++) tmp[i] = r->rb[i].s_per_tok[w];
        pw->b_med = stats_median_inplace(tmp, n);
        memcpy(tmp, pw->speedup, (size_t)n * sizeof *tmp);
        pw->med = stats_median_inplace(tmp, n);
    }
    if (ok) {
        /* Paired bootstrap: one set of pair indices per resample serves every
         * window and the score. The steps window reads the same indices and
         * draws no random numbers of its own, so the prefill, decode and
         * score intervals are exactly those of a report without it (same
         * runs, same seed: same figures). */
        rng_t rng;
        rng_seed(&rng, r->seed);
        const double *sp = r->win[PW_PREFILL].speedup, *sd = r->win[PW_DECODE].speedup;
        const double *ss = r->win[PW_STEPS].speedup;
        for (int b = 0; b < nb; b++) {
            for (int i = 0; i < n; i++) {
                int j = rng_below(&rng, n);
                tmp[i] = sp[j];
                tmp2[i] = sd[j];
                tmp3[i] = ss[j];
            }
            double mp = stats_median_inplace(tmp, n), md = stats_median_inplace(tmp2, n);
            boot[PW_PREFILL][b] = mp;
            boot[PW_DECODE][b] = md;
            boot[PW_STEPS][b] = stats_median_inplace(tmp3, n);
            boot[NB_SCORE][b] = pow(md, 0.75) * pow(mp, 0.25);
        }
        for (int k = 0; k < NB; k++) qsort(boot[k], (size_t)nb, sizeof(double), stats_cmp_double);
        for (int w = 0; w < PW_COUNT; w++) {
            price_window *pw = &r->win[w];
            pw->lo = stats_quantile_sorted(boot[w], nb, 0.025);
            pw->hi = stats_quantile_sorted(boot[w], nb, 0.975);
            /* Only the scored windows can be rejected; steps is informational. */
            pw->verdict = w < PW_SCORED && pw->med < REJECT_BELOW ? "rejected" : interval_verdict(pw->lo, pw->hi);
        }
        r->score = pow(r->win[PW_DECODE].med, 0.75) * pow(r->win[PW_PREFILL].med, 0.25);
        r->score_lo = stats_quantile_sorted(boot[NB_SCORE], nb, 0.025);
        r->score_hi = stats_quantile_sorted(boot[NB_SCORE], nb, 0.975);
        r->score_verdict = interval_verdict(r->score_lo, r->score_hi);

        /* Rejections: any changed token, or a scored window more than 5% slower. */
        size_t off = 0;
        r->reasons[0] = 0;
        if (r->n_fails) {
            const price_fail *f = &r->fails[0];
            char where[48];
            if (f->pair < 0) snprintf(where, sizeof where, "the warm-up run");
            else snprintf(where, sizeof where, "pair %d", f->pair);
            off += (size_t)snprintf(r->reasons + off, sizeof r->reasons - off,
                                    "%d run(s) changed a token (first: %s, side %c, %s step %d: expected %d, got %d); ",
                                    r->n_fails, where, f->side, f->window, f->step, f->expected, f->actual);
        }
        for (int w = 0; w < PW_SCORED && off < sizeof r->reasons; w++)
            if (r->win[w].med < REJECT_BELOW)
                off += (size_t)snprintf(r->reasons + off, sizeof r->reasons - off,
                                        "%s median speedup %.3f < %.2f; ", WIN_NAME[w], r->win[w].med, REJECT_BELOW);
        if (off >= 2 && off < sizeof r->reasons) r->reasons[off - 2] = 0;
        r->rejected = off > 0;
        r->verdict = r->rejected ? "rejected" : r->score_verdict;
    }
    free(tmp);
    free(tmp2);
    free(tmp3);
    for (int k = 0; k < NB; k++) free(boot[k]);
    return ok ? 0 : -1;
}

/* ---- text ---------------------------------------------------------------- */

static void side_line(FILE *f, const char *name, const price_side *s, const price_report *r) {
    int t = s->threads ? s->threads : r->threads;
    fprintf(f, "  %s: %-28s bin %s, ", name, s->text, s->bin ? s->bin : r->default_bin);
    if (t) fprintf(f, "threads %d", t);
    else fprintf(f, "threads (bench default)");
    fprintf(f, ", flags %s", s->flags ? s->flags : "(binary default)");
    for (int i = 0; i < s->n_env; i++) fprintf(f, "%s%s", i ? "," : ", env ", s->env[i]);
    fputc('\n', f);
}

static void print_ms(FILE *f, double s) { fprintf(f, "%10.4f ms  ", s * 1e3); }

static void print_map(FILE *f, const char *indent) {
    fprintf(f, "%stiming windows (P = prompt tokens, D = decode steps):\n", indent);
    for (int w = 0; w < PW_COUNT; w++) fprintf(f, "%s  %-8s inside: %s\n", indent, WIN_NAME[w], MAP_INSIDE[w]);
    fprintf(f, "%s  outside every window: %s\n", indent, MAP_OUTSIDE);
}

void price_print_text(const price_report *r, FILE *f) {
    fprintf(f, "moefast price: %s\n", r->model);
    side_line(f, "A", r->a, r);
    side_line(f, "B", r->b, r);
    if (r->noise) fprintf(f, "  (noise run: B is A again)\n");
    fprintf(f, "  %d pairs in alternating order (AB, BA, ...) after one discarded warm-up run of each side; "
               "P = %d, D = %d\n", r->n_pairs, r->prompt_len, r->decode_steps);
    if (!r->token_check)
        fprintf(f, "\n  ************************************************************\n"
                   "  *** TOKEN CHECK DISABLED (--no-token-check): the runs'   ***\n"
                   "  *** tokens were NOT compared with a golden trace.        ***\n"
                   "  ************************************************************\n\n");
    else if (!r->n_fails)
        fprintf(f, "  token check: ok, every run matched the trace %s\n", r->trace);
    else {
        fprintf(f, "  token check: FAILED in %d run(s):\n", r->n_fails);
        for (int i = 0; i < r->n_fails; i++) {
            const price_fail *x = &r->fails[i];
            if (x->pair < 0) fprintf(f, "    warm-up run");
            else fprintf(f, "    pair %d", x->pair);
            fprintf(f, ", side %c: %s step %d expected token %d, got %d\n", x->side, x->window, x->step,
                    x->expected, x->actual);
        }
    }
    fprintf(f, "\n  %-8s %15s %15s %12s %20s  %s\n", "window", "A s/token", "B s/token", "speedup A/B",
            "95% interval", "verdict");
    for (int w = 0; w < PW_COUNT; w++) {
        const price_window *pw = &r->win[w];
        fprintf(f, "  %-8s ", WIN_NAME[w]);
        print_ms(f, pw->a_med);
        print_ms(f, pw->b_med);
        fprintf(f, "%10.4f   [%7.4f, %7.4f]  %s\n", pw->med, pw->lo, pw->hi, pw->verdict);
    }
    fprintf(f, "  %-8s %31s %12.4f   [%7.4f, %7.4f]  %s\n", "score", "decode^0.75 x prefill^0.25", r->score,
            r->score_lo, r->score_hi, r->score_verdict);
    fprintf(f, "  (steps: the decode window's D steps alone, without the seed prefill; informational, "
               "not in the score, never a rejection)\n");
    if (r->noise)
        fprintf(f, "\n  noise floor (half-width of the 95%% interval, A against A): prefill +-%.4f, decode +-%.4f, "
                   "steps +-%.4f, score +-%.4f\n",
                (r->win[PW_PREFILL].hi - r->win[PW_PREFILL].lo) / 2, (r->win[PW_DECODE].hi - r->win[PW_DECODE].lo) / 2,
                (r->win[PW_STEPS].hi - r->win[PW_STEPS].lo) / 2, (r->score_hi - r->score_lo) / 2);
    fprintf(f, "\n  per-pair speedups (A time / B time; > 1: B faster):\n  %5s %5s", "pair", "order");
    for (int w = 0; w < PW_COUNT; w++) fprintf(f, " %10s", WIN_NAME[w]);
    fputc('\n', f);
    for (int i = 0; i < r->n_pairs; i++) {
        fprintf(f, "  %5d %5s", i, r->b_first[i] ? "BA" : "AB");
        for (int w = 0; w < PW_COUNT; w++) fprintf(f, " %10.4f", r->win[w].speedup[i]);
        fputc('\n', f);
    }
    price_env_text(r, f);
    fprintf(f, "\n  verdict: %s%s%s\n", r->rejected ? "REJECTED" : r->verdict, r->rejected ? ": " : "",
            r->rejected ? r->reasons : "");
    fprintf(f, "  (bootstrap: %d resamples, seed %llu; \"within noise\": the interval contains 1; "
               "rejected: a changed token or a prefill or decode median speedup < %.2f)\n",
            r->resamples, (unsigned long long)r->seed, REJECT_BELOW);
    if (!r->token_check) fprintf(f, "  *** TOKEN CHECK DISABLED ***\n");
    fputc('\n', f);
    print_map(f, "  ");
}

/* ---- JSON (schema "moefast.price/1", docs/MEASUREMENT.md) ---------------- */

static json_t *jstr(const char *s) { return s ? json_string(s) : json_null(); }

static json_t *json_side(const price_side *s, const price_report *r) {
    json_t *o = json_object(), *env = json_array();
    json_object_set_new(o, "spec", jstr(s->text));
    json_object_set_new(o, "bin", jstr(s->bin ? s->bin : r->default_bin));
    json_object_set_new(o, "flags", jstr(s->flags));
    json_object_set_new(o, "threads", json_integer(s->threads ? s->threads : r->threads));
    for (int i = 0; i < s->n_env; i++) json_array_append_new(env, json_string(s->env[i]));
    json_object_set_new(o, "env", env);
    return o;
}

static json_t *json_interval(double lo, double hi) {
    json_t *a = json_array();
    json_array_append_new(a, json_real(lo));
    json_array_append_new(a, json_real(hi));
    return a;
}

void price_print_json(const price_report *r, FILE *f) {
    json_t *root = json_object();
    json_object_set_new(root, "schema", json_string("moefast.price/1"));
    json_object_set_new(root, "model", jstr(r->model));
    json_object_set_new(root, "pairs", json_integer(r->n_pairs));
    json_object_set_new(root, "noise", json_boolean(r->noise));
    json_object_set_new(root, "prompt_len", json_integer(r->prompt_len));
    json_object_set_new(root, "decode_steps", json_integer(r->decode_steps));
    json_object_set_new(root, "a", json_side(r->a, r));
    json_object_set_new(root, "b", json_side(r->b, r));

    json_t *tc = json_object(), *fails = json_array();
    json_object_set_new(tc, "enabled", json_boolean(r->token_check));
    json_object_set_new(tc, "trace", jstr(r->trace));
    json_object_set_new(tc, "ok", json_boolean(r->token_check && !r->n_fails));
    for (int i = 0; i < r->n_fails; i++) {
        const price_fail *x = &r->fails[i];
        char side[2] = {x->side, 0};
        json_t *o = json_object();
        json_object_set_new(o, "pair", json_integer(x->pair));
        json_object_set_new(o, "warmup", json_boolean(x->pair < 0));
        json_object_set_new(o, "side", json_string(side));
        json_object_set_new(o, "window", json_string(x->window));
        json_object_set_new(o, "step", json_integer(x->step));
        json_object_set_new(o, "expected", json_integer(x->expected));
        json_object_set_new(o, "actual", json_integer(x->actual));
        json_array_append_new(fails, o);
    }
    json_object_set_new(tc, "failures", fails);
    json_object_set_new(root, "token_check", tc);

    json_t *wins = json_object();
    for (int w = 0; w < PW_COUNT; w++) {
        const price_window *pw = &r->win[w];
        json_t *o = json_object(), *sp = json_array();
        json_object_set_new(o, "a_median_s_per_token", json_real(pw->a_med));
        json_object_set_new(o, "b_median_s_per_token", json_real(pw->b_med));
        json_object_set_new(o, "median_speedup", json_real(pw->med));
        json_object_set_new(o, "ci95", json_interval(pw->lo, pw->hi));
        json_object_set_new(o, "half_width", json_real((pw->hi - pw->lo) / 2));
        json_object_set_new(o, "verdict", json_string(pw->verdict));
        for (int i = 0; i < r->n_pairs; i++) json_array_append_new(sp, json_real(pw->speedup[i]));
        json_object_set_new(o, "speedups", sp);
        json_object_set_new(wins, WIN_NAME[w], o);
    }
    json_object_set_new(root, "windows", wins);

    json_t *sc = json_object();
    json_object_set_new(sc, "formula", json_string("decode^0.75 * prefill^0.25"));
    json_object_set_new(sc, "value", json_real(r->score));
    json_object_set_new(sc, "ci95", json_interval(r->score_lo, r->score_hi));
    json_object_set_new(sc, "half_width", json_real((r->score_hi - r->score_lo) / 2));
    json_object_set_new(sc, "verdict", json_string(r->score_verdict));
    json_object_set_new(root, "score", sc);
    if (r->noise) {
        json_t *nf = json_object();
        for (int w = 0; w < PW_COUNT; w++)
            json_object_set_new(nf, WIN_NAME[w], json_real((r->win[w].hi - r->win[w].lo) / 2));
        json_object_set_new(nf, "score", json_real((r->score_hi - r->score_lo) / 2));
        json_object_set_new(root, "noise_floor", nf);
    } else {
        json_object_set_new(root, "noise_floor", json_null());
    }
    json_object_set_new(root, "verdict", json_string(r->verdict));
    json_object_set_new(root, "rejected", json_boolean(r->rejected));
    json_object_set_new(root, "reasons", json_string(r->reasons));
    price_env_json(r, root);

    json_t *runs = json_array();
    for (int i = 0; i < r->n_pairs; i++) {
        json_t *o = json_object(), *ja = json_object(), *jb = json_object();
        json_object_set_new(o, "pair", json_integer(i));
        json_object_set_new(o, "order", json_string(r->b_first[i] ? "BA" : "AB"));
        for (int w = 0; w < PW_COUNT; w++) {
            json_object_set_new(ja, WIN_NAME[w], json_real(r->ra[i].s_per_tok[w]));
            json_object_set_new(jb, WIN_NAME[w], json_real(r->rb[i].s_per_tok[w]));
        }
        json_object_set_new(o, "a", ja);
        json_object_set_new(o, "b", jb);
        json_array_append_new(runs, o);
    }
    json_object_set_new(root, "runs", runs);

    json_t *bs = json_object();
    json_object_set_new(bs, "resamples", json_integer(r->resamples));
    json_object_set_new(bs, "seed", json_integer((json_int_t)r->seed));
    json_object_set_new(bs, "confidence", json_real(0.95));
    json_object_set_new(bs, "method", json_string("percentile bootstrap of the median; pairs resampled, "
                                                  "all windows together"));
    json_object_set_new(root, "bootstrap", bs);

    json_t *map = json_object();
    for (int w = 0; w < PW_COUNT; w++) json_object_set_new(map, WIN_NAME[w], json_string(MAP_INSIDE[w]));
    json_object_set_new(map, "outside", json_string(MAP_OUTSIDE));
    json_object_set_new(root, "timing_map", map);

    char *txt = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (txt) { fputs(txt, f); fputc('\n', f); free(txt); }
}

/* ---- CSV ------------------------------------------------------------------ */

void price_print_csv(const price_report *r, FILE *f) {
    fprintf(f, "# moefast price: model %s; A = %s; B = %s%s\n", r->model, r->a->text, r->b->text,
            r->noise ? " (noise run)" : "");
    if (!r->token_check) fprintf(f, "# *** TOKEN CHECK DISABLED (--no-token-check) ***\n");
    else fprintf(f, "# token check: %s (%d failing runs) against %s\n", r->n_fails ? "FAILED" : "ok", r->n_fails,
                 r->trace);
    for (int w = 0; w < PW_COUNT; w++) fprintf(f, "# %s window: %s\n", WIN_NAME[w], MAP_INSIDE[w]);
    fprintf(f, "# outside every window: %s\n", MAP_OUTSIDE);
    if (r->env)
        fprintf(f, "# environment gate: %d reruns (bandwidth changed: %d, steal: %d), %d pairs kept failing; cold: %s\n",
                r->rerun_bw + r->rerun_steal, r->rerun_bw, r->rerun_steal, r->kept_failing, r->cold ? "yes" : "no");
    fprintf(f, "kind,window,pair,order,a_s_per_token,b_s_per_token,speedup,ci95_lo,ci95_hi,verdict\n");
    for (int w = 0; w < PW_COUNT; w++)
        for (int i = 0; i < r->n_pairs; i++)
            fprintf(f, "pair,%s,%d,%s,%.9g,%.9g,%.6g,,,\n", WIN_NAME[w], i, r->b_first[i] ? "BA" : "AB",
                    r->ra[i].s_per_tok[w], r->rb[i].s_per_tok[w], r->win[w].speedup[i]);
    for (int w = 0; w < PW_COUNT; w++)
        fprintf(f, "summary,%s,,,%.9g,%.9g,%.6g,%.6g,%.6g,%s\n", WIN_NAME[w], r->win[w].a_med, r->win[w].b_med,
                r->win[w].med, r->win[w].lo, r->win[w].hi, r->win[w].verdict);
    fprintf(f, "summary,score,,,,,%.6g,%.6g,%.6g,%s\n", r->score, r->score_lo, r->score_hi, r->score_verdict);
    fprintf(f, "verdict,,,,,,,,,%s\n", r->verdict);
}

/* ---- SVG: per-pair speedups, median line and interval band per window ----- */

static void svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

int price_write_svg(const price_report *r, FILE *f) {
    /* One panel per window side by side, each titled in two lines (name;
     * median, interval, verdict) so that a title stays inside its 380 px
     * panel; 50 px between panels leave room for the next panel's y labels. */
    const double pw_w = 380, top = 90, ph = 280, left0 = 60, gap = 50;
    const double W = left0 + PW_COUNT * pw_w + (PW_COUNT - 1) * gap + 20, H = 440;
    /* One y range for all panels so they compare at a glance. */
    double lo = 1.0, hi = 1.0;
    for (int w = 0; w < PW_COUNT; w++) {
        const price_window *p = &r->win[w];
        for (int i = 0; i < r->n_pairs; i++) {
            if (p->speedup[i] < lo) lo = p->speedup[i];
            if (p->speedup[i] > hi) hi = p->speedup[i];
        }
        if (p->lo < lo) lo = p->lo;
        if (p->hi > hi) hi = p->hi;
    }
    double pad = (hi - lo) * 0.1 + 0.01;
    lo = lo - pad > 0 ? lo - pad : 0; /* speedups are positive */
    hi += pad;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\">moefast price: speedup A/B per pair "
               "(&gt; 1: B faster) &#8212; score %.4f [%.4f, %.4f], %s</text>\n",
            left0, r->score, r->score_lo, r->score_hi, r->verdict);
    fprintf(f, "<text x=\"%.0f\" y=\"42\" fill=\"#444\">A: ", left0);
    svg_text(f, r->a->text);
    fputs("   B: ", f);
    svg_text(f, r->noise ? "A (noise run)" : r->b->text);
    if (!r->token_check) fputs("   TOKEN CHECK DISABLED", f);
    fputs("</text>\n", f);
    for (int w = 0; w < PW_COUNT; w++) {
        const price_window *p = &r->win[w];
        double x0 = left0 + w * (pw_w + gap), y0 = top;
#define YPOS(v) (y0 + ph - ((v) - lo) / (hi - lo) * ph)
        double xs = r->n_pairs > 1 ? (pw_w - 40) / (r->n_pairs - 1) : 0;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n",
                x0, y0, pw_w, ph);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#cfe0f5\"/>\n", x0,
                YPOS(p->hi), pw_w, YPOS(p->lo) - YPOS(p->hi));
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" stroke-dasharray=\"5,4\"/>\n",
                x0, x0 + pw_w, YPOS(1.0), YPOS(1.0));
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#1f5fbf\" stroke-width=\"2\"/>\n",
                x0, x0 + pw_w, YPOS(p->med), YPOS(p->med));
        for (int t = 0; t <= 4; t++) {
            double v = lo + (hi - lo) * t / 4;
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#444\">%.3f</text>\n", x0 - 4,
                    YPOS(v) + 4, v);
        }
        for (int i = 0; i < r->n_pairs; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>pair %d (%s): %.4f</title>"
                       "</circle>\n",
                    x0 + 20 + i * xs, YPOS(p->speedup[i]), r->b_first[i] ? "#d9822b" : "#2b8a3e", i,
                    r->b_first[i] ? "BA" : "AB", p->speedup[i]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">%s%s</text>\n", x0, y0 - 24,
                WIN_NAME[w], w < PW_SCORED ? "" : " (informational, not in the score)");
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\">median %.4f, 95%% [%.4f, %.4f] &#8212; %s</text>\n",
                x0, y0 - 8, p->med, p->lo, p->hi, p->verdict);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#444\">pair (green AB, orange BA)"
                   "</text>\n",
                x0 + pw_w / 2, y0 + ph + 20);
#undef YPOS
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#444\">blue line: median; band: bootstrap 95%% interval; "
               "dashed: 1.0; score = decode^0.75 x prefill^0.25; steps = the decode window's steps without "
               "the seed prefill</text>\n</svg>\n",
            left0, H - 12);
    return fclose(f) == 0 ? 0 : -1;
}
