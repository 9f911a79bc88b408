/* mpi.c — `mpirun -np N moefast run|bench|serve|gate|trace|chat ...`: expert
 * parallelism over MPI (the library's side: include/moefast/shard.h,
 * docs/SCALE.md).
 *
 * Every rank gets the same command line. Rank r loads the model file as
 * expert shard r of N. Rank 0 runs the command; ranks 1..N-1 never run it:
 * they answer rank 0's expert requests until it says quit. The protocol
 * (point-to-point, tags below):
 *   start   each rank > 0 sends STATUS (loaded or its error, and the
 *           identity of its file); rank 0 checks them and sends GO, or QUIT
 *           after printing which rank failed and why
 *   steps   rank 0 posts HEAD (moe_shard_head + groups) and ROWS, receives
 *           REPLY, all non-blocking; its wait is bounded (MOEFAST_MPI_TIMEOUT
 *           seconds, default 60): a rank that does not answer is an error
 *           naming it, and the job is aborted
 *   end     rank 0 sends QUIT; each rank answers STATS (its peak RSS, the
 *           requests and rows it computed, its compute time) and finalizes
 * Ranks > 0 wait for rank 0 without a limit (a server may idle for days); a
 * rank that dies is reported and the job ended by mpirun itself. Built only
 * when Open MPI's development files are installed (the Makefile defines
 * MOEFAST_MPI); otherwise these functions pass straight through. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#ifndef MOEFAST_MPI

int cli_mpi_begin(int argc, char **argv, int *rc) {
    (void)argc, (void)argv, (void)rc;
    return 0;
}
int cli_mpi_end(int rc) { return rc; }
bool cli_mpi_built(void) { return false; }
int cli_model_load(const char *path, const moe_load_params *lp, moe_model **m, char *err, size_t errlen) {
    return moe_model_load(path, lp, m, err, errlen);
}

#else

#include <mpi.h>
#include <openssl/evp.h>

enum { TAG_STATUS = 1, TAG_GO, TAG_QUIT, TAG_HEAD, TAG_ROWS, TAG_REPLY, TAG_STATS };
#define MAX_RANKS 4096

typedef struct {
    int rc;                  /* 0: loaded */
    char identity[65];       /* of the file (file_identity) */
    char err[MOE_ERR_LEN];
} status_msg;

typedef struct {
    double rss_peak_mb, rss_mb, compute_s;
    long long requests, rows;
} stats_msg;

/* The job's state on this rank. */
static struct {
    bool on;                 /* launched by mpirun with N > 1 */
    int rank, size;
    bool started;            /* rank 0: the start handshake ran (the others wait for GO or QUIT) */
    bool failed;             /* rank 0: the link failed; the others may be mid-request: abort */
    double timeout;
    /* rank 0's link */
    MPI_Request req[3 * MAX_RANKS];
    int shard_of[3 * MAX_RANKS], layer_of[3 * MAX_RANKS];
    int nreq;
    long long exchanges;
    double bytes_sent, bytes_received, wait_s;
    char cmd[32];
} J;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Yields while messages are frequent (the layers of a step: a rank that
 * spun without yielding would hold a core the rank it waits for may need,
 * for a whole scheduler slice), sleeps once the other side is idle, so a
 * waiting rank does not take a core. */
static void backoff(double since) {
    const double idle = now() - since;
    if (idle < 0.002) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, idle < 1.0 ? 50000L : 1000000L};
    nanosleep(&ts, NULL);
}

/* The identity of a model file: sha256 of its size, its first 32 MiB (the
 * GGUF header, metadata and tensor table) and 256 4-KiB samples spread over
 * the rest, read with pread (never mapped: no rank makes another shard's
 * pages resident). MOEFAST_MPI_HASH=full hashes every byte instead. */
static int file_identity(const char *path, char hex[65], char *err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return snprintf(err, errlen, "%s: %s", path, strerror(errno)), -1;
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return snprintf(err, errlen, "%s: %s", path, strerror(errno)), -1; }
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char buf[1 << 16], dig[32];
    const char *full = getenv("MOEFAST_MPI_HASH");
    const bool all = full && !strcmp(full, "full");
    const off_t size = st.st_size, head = all ? size : (size < (32 << 20) ? size : (32 << 20));
    int rc = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? 0 : -1;
    if (!rc) EVP_DigestUpdate(md, &size, sizeof size);
    for (off_t o = 0; !rc && o < head;) {
        const ssize_t n = pread(fd, buf, (size_t)(head - o < (off_t)sizeof buf ? head - o : (off_t)sizeof buf), o);
        if (n <= 0) { rc = -1; break; }
        EVP_DigestUpdate(md, buf, (size_t)n);
        o += n;
    }
    for (int i = 0; !rc && !all && size > head && i < 256; i++) {
        const off_t o = head + (off_t)((double)(size - head - 1) * i / 256.0);
        const ssize_t n = pread(fd, buf, 4096, o);
        if (n < 0) rc = -1;
        else EVP_DigestUpdate(md, buf, (size_t)n);
    }
    unsigned int dl = 0;
    if (!rc && EVP_DigestFinal_ex(md, dig, &dl) != 1) rc = -1;
    EVP_MD_CTX_free(md);
    close(fd);
    if (rc) return snprintf(err, errlen, "%s: cannot read it to check that every rank has the same file", path), -1;
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", dig[i]);
    return 0;
}

static double mem_mb(const char *key) {
    const long long b = moe_proc_status_bytes(key);
    return b < 0 ? 0.0 : (double)b / 1048576.0;
}

/* ---- rank 0's link (moe_shard_link) ---------------------------------------------------- */

static int link_post(void *user, int shard, const void *head, size_t head_bytes, const void *rows, size_t rows_bytes,
                     void *reply, size_t reply_bytes, char *err, size_t errlen) {
    (void)user;
    if (rows_bytes > INT_MAX || reply_bytes > INT_MAX || J.nreq + 3 > 3 * MAX_RANKS) {
        snprintf(err, errlen, "mpi: a request of %zu bytes to rank %d is too large for one message", rows_bytes, shard);
        return MOE_EINVAL;
    }
    moe_shard_head h;
    memcpy(&h, head, sizeof h);
    int *sh = J.shard_of + J.nreq, *ly = J.layer_of + J.nreq;
    sh[0] = sh[1] = sh[2] = shard;
    ly[0] = ly[1] = ly[2] = h.layer;
    MPI_Request *r = J.req + J.nreq;
    if (MPI_Irecv(reply, (int)reply_bytes, MPI_BYTE, shard, TAG_REPLY, MPI_COMM_WORLD, &r[0]) != MPI_SUCCESS ||
        MPI_Isend(head, (int)head_bytes, MPI_BYTE, shard, TAG_HEAD, MPI_COMM_WORLD, &r[1]) != MPI_SUCCESS ||
        MPI_Isend(rows, (int)rows_bytes, MPI_BYTE, shard, TAG_ROWS, MPI_COMM_WORLD, &r[2]) != MPI_SUCCESS) {
        snprintf(err, errlen, "mpi: cannot send layer %d's expert request to rank %d", h.layer, shard);
        J.failed = true;
        return MOE_EIO;
    }
    J.nreq += 3;
    J.exchanges++;
    J.bytes_sent += (double)(head_bytes + rows_bytes);
    J.bytes_received += (double)reply_bytes;
    return MOE_OK;
}

static int link_wait(void *user, char *err, size_t errlen) {
    (void)user;
    const double t0 = now(), deadline = t0 + J.timeout;
    int left = J.nreq;
    while (left > 0) {
        left = 0;
        for (int i = 0; i < J.nreq; i++) {
            if (J.req[i] == MPI_REQUEST_NULL) continue;
            int done = 0;
            if (MPI_Test(&J.req[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                snprintf(err, errlen, "mpi: the exchange with rank %d failed (layer %d)", J.shard_of[i], J.layer_of[i]);
                J.failed = true;
                return MOE_EIO;
            }
            left += !done;
        }
        if (left == 0) break;
        if (now() > deadline) {
            int r = -1, l = -1;
            for (int i = 0; i < J.nreq && r < 0; i++)
                if (J.req[i] != MPI_REQUEST_NULL) r = J.shard_of[i], l = J.layer_of[i];
            snprintf(err, errlen, "mpi: rank %d did not answer layer %d's expert request within %g s "
                     "(MOEFAST_MPI_TIMEOUT)", r, l, J.timeout);
            J.failed = true;
            return MOE_EIO;
        }
        backoff(t0);
    }
    J.nreq = 0;
    J.wait_s += now() - t0;
    return MOE_OK;
}

static moe_shard_link LINK = {NULL, 0, link_post, link_wait};

/* Receives one message of `tag` from rank `src` into buf (at most cap
 * bytes), polling; deadline 0: none. Returns the bytes, or -1 on timeout. */
static int recv_poll(void *buf, int cap, int src, int tag, double deadline, MPI_Status *st_out) {
    const double t0 = now();
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, &st);
        if (flag) {
            int n = 0;
            MPI_Get_count(&st, MPI_BYTE, &n);
            if (n > cap) return -2;
            MPI_Recv(buf, n, MPI_BYTE, st.MPI_SOURCE, tag, MPI_COMM_WORLD, &st);
            if (st_out) *st_out = st;
            return n;
        }
        if (deadline > 0 && now() > deadline) return -1;
        backoff(t0);
    }
}

/* ---- rank 0: the start handshake ------------------------------------------------------- */

int cli_model_load(const char *path, const moe_load_params *lp_in, moe_model **m, char *err, size_t errlen) {
    if (!J.on) return moe_model_load(path, lp_in, m, err, errlen);
    if (J.started) return snprintf(err, errlen, "mpi: one model per MPI job (%s loaded twice)", path), MOE_EINVAL;
    J.started = true;
    moe_load_params lp = lp_in ? *lp_in : (moe_load_params){0};
    lp.shard = 0, lp.n_shards = J.size, lp.link = &LINK;
    LINK.n_shards = J.size;
    char mine[65] = "";
    int rc = moe_model_load(path, &lp, m, err, errlen);
    if (!rc && file_identity(path, mine, err, errlen)) rc = MOE_EIO;
    /* every other rank's status, bounded: loading is reading the file */
    const char *lt = getenv("MOEFAST_MPI_LOAD_TIMEOUT");
    const double deadline = now() + (lt && atof(lt) > 0 ? atof(lt) : 600.0);
    bool ok = rc == 0;
    for (int i = 1; i < J.size; i++) {
        status_msg s;
        MPI_Status st;
        const int n = recv_poll(&s, (int)sizeof s, MPI_ANY_SOURCE, TAG_STATUS, deadline, &st);
        if (n != (int)sizeof s) {
            snprintf(err, errlen, "mpi: %d of %d ranks reported within the load timeout (MOEFAST_MPI_LOAD_TIMEOUT)", i,
                     J.size);
            J.failed = true;
            moe_model_free(*m), *m = NULL;
            return MOE_EIO;
        }
        s.err[sizeof s.err - 1] = 0, s.identity[64] = 0;
        if (s.rc && ok) snprintf(err, errlen, "mpi: rank %d cannot load its expert shard: %s", st.MPI_SOURCE, s.err);
        else if (ok && rc == 0 && strcmp(s.identity, mine))
            snprintf(err, errlen, "mpi: rank %d's model file differs from rank 0's (%s: identity %.16s vs %.16s); "
                     "every rank must load the same file", st.MPI_SOURCE, path, s.identity, mine);
        if (s.rc || strcmp(s.identity, mine)) ok = false;
    }
    if (!ok) {                                   /* QUIT follows in cli_mpi_end */
        moe_model_free(*m), *m = NULL;
        return rc ? rc : MOE_EINVAL;
    }
    for (int r = 1; r < J.size; r++) MPI_Send(NULL, 0, MPI_BYTE, r, TAG_GO, MPI_COMM_WORLD);
    return MOE_OK;
}

/* ---- ranks > 0: load, report, answer --------------------------------------------------- */

/* The value of -m/--model, -t/--threads, --flags in the command's arguments. */
static const char *arg_value(int argc, char **argv, const char *a, const char *b) {
    for (int i = 1; i < argc; i++) {
        const size_t la = strlen(a), lb = b ? strlen(b) : 0;
        if ((!strcmp(argv[i], a) || (b && !strcmp(argv[i], b))) && i + 1 < argc) return argv[i + 1];
        if (!strncmp(argv[i], a, la) && argv[i][la] == '=') return argv[i] + la + 1;
        if (b && !strncmp(argv[i], b, lb) && argv[i][lb] == '=') return argv[i] + lb + 1;
    }
    return NULL;
}

static int fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "moefast: rank %d: ", J.rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
}

static void *grow(void *p, size_t *cap, size_t need) {
    if (need <= *cap) return p;
    void *q = realloc(p, need);
    if (q) *cap = need;
    return q;
}

/* Answers requests until QUIT; 0, or the job is aborted. */
static int serve_requests(moe_shard_worker *w) {
    char err[MOE_ERR_LEN];
    stats_msg stats = {0};
    void *head = NULL, *rows = NULL, *reply = NULL;
    size_t head_cap = 0, rows_cap = 0, reply_cap = 0;
    const size_t head_max = sizeof(moe_shard_head) + (size_t)MAX_RANKS * 64 * sizeof(moe_shard_group);
    double last = now();
    /* TEST ONLY (tests/cli_mpi.sh): never answer, to check rank 0's bounded wait */
    const bool stall = getenv("MOEFAST_MPI_TEST_STALL") != NULL;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
        if (!flag) { backoff(last); continue; }
        if (st.MPI_TAG == TAG_QUIT) {
            MPI_Recv(NULL, 0, MPI_BYTE, 0, TAG_QUIT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            break;
        }
        if (st.MPI_TAG != TAG_HEAD) return fatal("unexpected message (tag %d) from rank 0", st.MPI_TAG);
        int hb = 0;
        MPI_Get_count(&st, MPI_BYTE, &hb);
        if (hb < 0 || (size_t)hb > head_max || !(head = grow(head, &head_cap, (size_t)hb + 1)))
            return fatal("a request head of %d bytes", hb);
        MPI_Recv(head, hb, MPI_BYTE, 0, TAG_HEAD, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        size_t rb = 0, pb = 0;
        if (moe_shard_request_sizes(w, head, (size_t)hb, &rb, &pb, err, sizeof err)) return fatal("%s", err);
        if (!(rows = grow(rows, &rows_cap, rb)) || !(reply = grow(reply, &reply_cap, pb)))
            return fatal("out of memory for a request of %zu bytes", rb);
        MPI_Recv(rows, (int)rb, MPI_BYTE, 0, TAG_ROWS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (stall) for (;;) pause();                  /* test hook: a rank that stops answering */
        const double t0 = now();
        if (moe_shard_worker_run(w, head, rows, reply, err, sizeof err)) return fatal("%s", err);
        stats.compute_s += now() - t0;
        stats.requests++;
        stats.rows += (long long)(rb / 4 / (size_t)((const moe_shard_head *)head)->n_embd);
        MPI_Send(reply, (int)pb, MPI_BYTE, 0, TAG_REPLY, MPI_COMM_WORLD);
        last = now();
    }
    stats.rss_peak_mb = mem_mb("VmHWM");
    stats.rss_mb = mem_mb("VmRSS");
    MPI_Send(&stats, (int)sizeof stats, MPI_BYTE, 0, TAG_STATS, MPI_COMM_WORLD);
    free(head), free(rows), free(reply);
    return 0;
}

static int follower(int argc, char **argv) {
    status_msg s = {0};
    const char *path = arg_value(argc, argv, "-m", "--model"), *flags = arg_value(argc, argv, "--flags", NULL);
    const char *th = arg_value(argc, argv, "-t", "--threads");
    moe_model *m = NULL;
    moe_shard_worker *w = NULL;
    if (!path) s.rc = MOE_EINVAL, snprintf(s.err, sizeof s.err, "no -m FILE in the command line");
    if (!s.rc) {
        moe_load_params lp = {.flags = flags, .shard = J.rank, .n_shards = J.size};
        s.rc = moe_model_load(path, &lp, &m, s.err, sizeof s.err);
    }
    if (!s.rc && file_identity(path, s.identity, s.err, sizeof s.err)) s.rc = MOE_EIO;
    if (!s.rc) s.rc = moe_shard_worker_new(m, th ? atoi(th) : 0, &w, s.err, sizeof s.err);
    MPI_Send(&s, (int)sizeof s, MPI_BYTE, 0, TAG_STATUS, MPI_COMM_WORLD);
    /* GO, or QUIT (rank 0 failed to start, or another rank did) */
    MPI_Status st;
    char dummy;
    int flag = 0;
    const double t0 = now();
    for (;;) {
        MPI_Iprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
        if (flag) break;
        backoff(t0);
    }
    MPI_Recv(&dummy, 0, MPI_BYTE, 0, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int rc = 1;
    if (st.MPI_TAG == TAG_GO) rc = serve_requests(w);
    else if (st.MPI_TAG == TAG_QUIT) {                 /* answer the STATS rank 0 then waits for */
        stats_msg none = {mem_mb("VmHWM"), mem_mb("VmRSS"), 0, 0, 0};
        MPI_Send(&none, (int)sizeof none, MPI_BYTE, 0, TAG_STATS, MPI_COMM_WORLD);
        rc = s.rc ? 2 : 0;
    } else rc = fatal("unexpected message (tag %d) from rank 0 at start", st.MPI_TAG);
    moe_shard_worker_free(w);
    moe_model_free(m);
    return rc;
}

/* ---- both ------------------------------------------------------------------------------- */

static bool launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") || getenv("PMI_SIZE");
}

int cli_mpi_begin(int argc, char **argv, int *rc) {
    if (!launched_by_mpi()) return 0;
    /* Open MPI polls without yielding unless the node is oversubscribed; a
     * rank then holds its core while the rank it waits for needs it (a
     * decode step 40x slower measured on a loaded 2-core machine). The
     * user's setting wins. */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "moefast: MPI_Init failed\n");
        *rc = 2;
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &J.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &J.size);
    if (J.size == 1) return 0;                           /* one process: nothing is sharded (cli_mpi_end finalizes) */
    J.on = true;
    const char *to = getenv("MOEFAST_MPI_TIMEOUT");
    J.timeout = to && atof(to) > 0 ? atof(to) : 60.0;
    snprintf(J.cmd, sizeof J.cmd, "%s", argc > 1 ? argv[1] : "");
    static const char *const ok[] = {"run", "bench", "serve", "gate", "trace", "chat"};
    bool known = false;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) known |= !strcmp(J.cmd, ok[i]);
    if (!known || J.size > MAX_RANKS || provided < MPI_THREAD_SERIALIZED) {
        if (J.rank == 0) {
            if (!known)
                fprintf(stderr, "moefast: '%s' does not run over MPI (these do: run, bench, serve, gate, trace, chat)\n",
                        J.cmd);
            else if (J.size > MAX_RANKS) fprintf(stderr, "moefast: at most %d MPI ranks\n", MAX_RANKS);
            else fprintf(stderr, "moefast: this MPI library does not support MPI_THREAD_SERIALIZED\n");
        }
        MPI_Finalize();
        *rc = 2;
        return 1;
    }
    if (J.rank == 0) return 0;                           /* rank 0 runs the command */
    *rc = follower(argc, argv);
    MPI_Finalize();
    return 1;
}

bool cli_mpi_built(void) { return true; }

int cli_mpi_end(int rc) {
    if (!launched_by_mpi()) return rc;
    if (!J.on) { MPI_Finalize(); return rc; }
    if (J.failed) {
        fprintf(stderr, "moefast: rank 0: the expert exchange failed; ending every rank\n");
        MPI_Abort(MPI_COMM_WORLD, rc ? rc : 2);
        return rc ? rc : 2;
    }
    if (!J.started)                              /* the command ended before loading: drain the STATUS messages */
        for (int i = 1; i < J.size; i++) {
            status_msg s;
            if (recv_poll(&s, (int)sizeof s, MPI_ANY_SOURCE, TAG_STATUS, now() + J.timeout, NULL) < 0) break;
        }
    /* every rank waits for GO/QUIT or its next request: QUIT, then each one's STATS */
    for (int r = 1; r < J.size; r++) MPI_Send(NULL, 0, MPI_BYTE, r, TAG_QUIT, MPI_COMM_WORLD);
    const double deadline = now() + J.timeout;
    const bool report = !strcmp(J.cmd, "bench") || getenv("MOEFAST_MPI_STATS");
    if (report)
        fprintf(stderr, "mpi: rank 0: %lld exchanges, %.0f bytes sent, %.0f received, waited %.3f s, rss %.1f MB "
                "(peak %.1f)\n", J.exchanges, J.bytes_sent, J.bytes_received, J.wait_s, mem_mb("VmRSS"),
                mem_mb("VmHWM"));
    for (int i = 1; i < J.size; i++) {
        stats_msg s;
        MPI_Status st;
        if (recv_poll(&s, (int)sizeof s, MPI_ANY_SOURCE, TAG_STATS, deadline, &st) != (int)sizeof s) {
            fprintf(stderr, "moefast: rank 0: %d of %d ranks said goodbye within %g s; ending every rank\n", i - 1,
                    J.size - 1, J.timeout);
            MPI_Abort(MPI_COMM_WORLD, 2);
            return 2;
        }
        if (report)
            fprintf(stderr, "mpi: rank %d: %lld requests, %lld rows, compute %.3f s, rss %.1f MB (peak %.1f)\n",
                    st.MPI_SOURCE, s.requests, s.rows, s.compute_s, s.rss_mb, s.rss_peak_mb);
    }
    MPI_Finalize();
    return rc;
}

#endif
