/* cmd_serve.c — `moefast serve`: an OpenAI-compatible HTTP server with
 * continuous batching (docs/SERVE.md; the parts are described in serve.h).
 *
 * Startup: the model, the context (one sequence per slot), the engine
 * thread, then the listener. SIGINT/SIGTERM: the listener closes, queued
 * requests get 503, running ones finish (or are cancelled after
 * --shutdown-timeout), the answers being sent are given time to go out,
 * everything is freed and the process exits 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <microhttpd.h>

#include "cli.h"
#include "moefast.h"
#include "serve.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: moefast serve -m FILE [--host ADDR] [--port N] [--slots N] [--ctx N] [--queue N]\n"
            "                     [--api-key KEY] [-t N] [--flags SPEC] [--chunk N] [--alias NAME]\n"
            "                     [--chat-format NAME] [--reasoning-format F] [--max-body BYTES]\n"
            "                     [--shutdown-timeout S] [--profile] [--rope-scaling yarn --rope-scale F]\n"
            "  --host ADDR     address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)\n"
            "  --port N        TCP port (default 8080; 0: any free port, printed at startup)\n"
            "  --slots N       requests generated together, one KV cache each (default 4)\n"
            "  --ctx N         positions per slot: prompt + max_tokens (default min(model, 4096))\n"
            "  --queue N       requests waiting for a slot before 503 (default 16)\n"
            "  --api-key KEY   require 'Authorization: Bearer KEY' on /v1/* (also MOEFAST_API_KEY)\n"
            "  --chunk N       most prompt tokens per step, so decoding never stalls (default 64)\n"
            "  --alias NAME    the model's name in the API (default: the file name)\n"
            "  --reasoning-format F  deepseek (default): a thinking model's <think> text is\n"
            "                  returned as reasoning_content; none: left in the content\n"
            "  --max-body B    largest request body (default 4194304)\n"
            "  --shutdown-timeout S  on SIGTERM, how long running requests may finish (default 10)\n"
            CLI_ROPE_USAGE
            "  --profile       measure: weight bytes per step and the memory bandwidth in /metrics\n"
            "                  (one clock read per phase; `make bench` uses it)\n"
            "  endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,\n"
            "             GET /health, GET /metrics\n");
}

typedef struct serve_opts {
    const char *path, *host, *api_key, *flags, *alias, *format;
    long port, slots, n_ctx, queue, threads, chunk, max_body, grace;
    bool profile, reason_none;
    moe_load_params rope;   /* --rope-scaling, --rope-scale, --yarn-orig-ctx */
} serve_opts;

static int parse_args(int argc, char **argv, serve_opts *o) {
    const char *C = "serve";
    *o = (serve_opts){.host = "127.0.0.1", .port = 8080, .slots = 4, .queue = 16, .chunk = 64, .max_body = 4 << 20, .grace = 10};
    o->api_key = getenv("MOEFAST_API_KEY");
    int rr;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) return cli_fail(C, "%s needs a file", a); o->path = v; }
        else if (!strcmp(a, "--host")) { if (!v) return cli_fail(C, "--host needs an address"); o->host = v; }
        else if (!strcmp(a, "--port")) { if (cli_parse_int(C, a, v, 0, 65535, &o->port)) return 2; }
        else if (!strcmp(a, "--slots")) { if (cli_parse_int(C, a, v, 1, 256, &o->slots)) return 2; }
        else if (!strcmp(a, "--ctx")) { if (cli_parse_int(C, a, v, 16, 1 << 22, &o->n_ctx)) return 2; }
        else if (!strcmp(a, "--queue")) { if (cli_parse_int(C, a, v, 1, 65536, &o->queue)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_int(C, a, v, 1, 1024, &o->threads)) return 2; }
        else if (!strcmp(a, "--chunk")) { if (cli_parse_int(C, a, v, 1, 65536, &o->chunk)) return 2; }
        else if (!strcmp(a, "--max-body")) { if (cli_parse_int(C, a, v, 1024, 1L << 30, &o->max_body)) return 2; }
        else if (!strcmp(a, "--shutdown-timeout")) { if (cli_parse_int(C, a, v, 0, 3600, &o->grace)) return 2; }
        else if (!strcmp(a, "--api-key")) { if (!v || !*v) return cli_fail(C, "--api-key needs a key"); o->api_key = v; }
        else if (!strcmp(a, "--alias")) { if (!v || !*v) return cli_fail(C, "--alias needs a name"); o->alias = v; }
        else if (!strcmp(a, "--chat-format")) { if (!v) return cli_fail(C, "--chat-format needs a name"); o->format = v; }
        else if (!strcmp(a, "--reasoning-format")) {
            if (!v || (strcmp(v, "none") && strcmp(v, "deepseek") && strcmp(v, "auto")))
                return cli_fail(C, "--reasoning-format needs none, deepseek or auto");
            o->reason_none = !strcmp(v, "none");
        }
        else if (!strcmp(a, "--flags")) { if (!v) return cli_fail(C, "--flags needs a spec"); o->flags = v; }
        else if (!strncmp(a, "--flags=", 8)) { o->flags = a + 8; used = 0; }
        else if ((rr = cli_rope_arg(C, a, v, &o->rope)) != 0) { if (rr < 0) return 2; }
        else if (!strcmp(a, "--profile")) { o->profile = true; used = 0; }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return -1; }
        else { usage(stderr); return cli_fail(C, "unknown argument '%s'", a); }
        i += used;
    }
    if (!o->path) { usage(stderr); return cli_fail(C, "-m FILE is required"); }
    if (o->api_key && !*o->api_key) o->api_key = NULL;
    return 0;
}

/* Waits for SIGINT/SIGTERM (blocked in every thread, taken here). */
static int wait_signal(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {}
    return sig;
}

int cmd_serve(int argc, char **argv) {
    const char *C = "serve";
    serve_opts o;
    const int pr = parse_args(argc, argv, &o);
    if (pr) return pr < 0 ? 0 : pr;

    /* before any thread exists, so they all inherit the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_load_params lp = o.rope;
    lp.flags = o.flags;
    /* --profile's read bandwidth, before the model loads: the probe unmaps its
     * buffer, and its pages then go to the weights, not to the slots' KV
     * caches, which requests touch later (include/moefast/lab.h, moe_membw_new) */
    const double read_gbs = o.profile ? moe_measure_read_bandwidth((int)o.threads) : 0.0;
    if (cli_model_load(o.path, &lp, &m, err, sizeof err)) return cli_fail(C, "%s", err);
    if (o.n_ctx) cli_check_ctx(C, m, o.n_ctx);
    const char *base = strrchr(o.path, '/');
    base = base ? base + 1 : o.path;
    char *name = strdup(o.alias ? o.alias : base);
    if (!name) { moe_model_free(m); return cli_fail(C, "out of memory"); }
    if (!o.alias && strlen(name) > 5 && !strcmp(name + strlen(name) - 5, ".gguf")) name[strlen(name) - 5] = 0;

    srv s;
    int rc = 2;
    struct MHD_Daemon *d = NULL;
    moe_context_params cp = {.n_ctx = (int)o.n_ctx, .n_threads = (int)o.threads, .n_seq = (int)o.slots};
    if (srv_init(&s, m, &cp, (int)o.chunk, (int)o.queue, err, sizeof err)) { cli_fail(C, "%s", err); goto done; }
    s.model_name = name;
    s.api_key = o.api_key;
    s.chat_format = o.format;
    s.reason_extract = !o.reason_none;
    s.harmony = reason_harmony(&s);
    s.max_body = (size_t)o.max_body;
    /* tests only: slows each step so that queues fill and clients can leave mid-request */
    const char *delay = getenv("MOEFAST_SERVE_STEP_DELAY_MS");
    if (delay && atoi(delay) > 0 && atoi(delay) <= 10000) s.step_delay_us = (unsigned)(1000 * atoi(delay));
    char *probe = NULL;
    if (moe_chat_render(m, o.format, NULL, 0, true, &probe, err, sizeof err))
        fprintf(stderr, "moefast serve: warning: /v1/chat/completions will fail: %s\n", err);
    free(probe);
    if (o.profile && srv_enable_profile(&s, read_gbs)) { cli_fail(C, "cannot enable the profile (out of memory)"); goto done; }
    if (srv_start(&s)) { cli_fail(C, "cannot start the engine thread"); goto done; }
    int port = 0;
    if (!(d = http_start(&s, o.host, (int)o.port, &port, err, sizeof err))) { cli_fail(C, "%s", err); goto done; }
    char num[128];
    fprintf(stderr, "moefast serve: listening on http://%s%s%s:%d (model %s, %d slots x %d positions, %d threads, numerics %s, %s)\n",
            strchr(o.host, ':') ? "[" : "", o.host, strchr(o.host, ':') ? "]" : "", port, name, s.n_slots, s.n_ctx,
            moe_context_threads(s.ctx), cli_numerics(m, num, sizeof num), o.api_key ? "API key required" : "no API key");

    const int sig = wait_signal();
    fprintf(stderr, "moefast serve: %s: shutting down (running requests get %lds)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", o.grace);
    const MHD_socket lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    srv_shutdown(&s, (double)o.grace);
    /* the last answers are being written: give them a moment */
    for (int i = 0; i < 200 && http_active() > 0; i++) usleep(10 * 1000);
    rc = 0;
done:
    if (d) MHD_stop_daemon(d);
    srv_shutdown(&s, 0);
    srv_free(&s);
    free(name);
    moe_model_free(m);
    if (rc == 0) fprintf(stderr, "moefast serve: stopped\n");
    return rc;
}
