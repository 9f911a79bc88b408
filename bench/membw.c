/* membw.c — the read bandwidth, measured in a process of its own (prints,
 * never asserts): `membw [THREADS]` prints GB/s on one line.
 *
 * bench/serve.sh runs it before and after each load level, while the server
 * waits between levels: the server's own probe reads the machine once, at
 * start, and this VM's bandwidth changes state within minutes, so one reading
 * cannot stand for every level (the same reason `bench` measures around each
 * decode window; docs/MEASUREMENT.md). In another process, not the server's:
 * a probe's unmapped buffer hands its pages to whatever the process touches
 * next, and those pages slowed the steps after it ("The probe must not hand
 * its pages back"). */
#include <stdio.h>
#include <stdlib.h>

#include "moefast/lab.h"

int main(int argc, char **argv) {
    char *end = NULL;
    const long t = argc > 1 ? strtol(argv[1], &end, 10) : 2;
    if (argc > 2 || (argc > 1 && (*end || end == argv[1] || t < 1 || t > 1024))) {
        fprintf(stderr, "usage: membw [THREADS (1..1024, default 2)]\n");
        return 2;
    }
    moe_membw *p = moe_membw_new((int)t);
    if (!p) {
        fprintf(stderr, "membw: out of memory for the probe's buffer\n");
        return 1;
    }
    const double gbs = moe_membw_measure(p);
    moe_membw_free(p);
    if (!(gbs > 0)) {
        fprintf(stderr, "membw: the measurement failed\n");
        return 1;
    }
    printf("%.3f\n", gbs);
    return 0;
}
