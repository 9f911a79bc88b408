/* cmd_quantize.c — `moefast quantize IN OUT TYPE [--type-experts TYPE]`. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "moefast.h"

static const char QUANT_HELP[] =
    "usage: moefast quantize IN OUT TYPE [--type-experts TYPE]\n"
    "\n"
    "Re-encodes the weight matrices of IN to TYPE (F32, F16, BF16, Q8_0, Q4_0, Q4_1,\n"
    "Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q3_K, Q2_K, IQ4_XS, NVFP4, ...) and writes OUT\n"
    "atomically. Routed and shared expert matrices get\n"
    "--type-experts (default TYPE). Norms, the router and biases are copied\n"
    "unchanged; all metadata is carried over and general.file_type updated.\n"
    "\n"
    "TYPE Q2_K, Q3_K_M, Q4_K_M, Q5_K_M or IQ4_XS without --type-experts is\n"
    "llama-quantize's mix of that name: each tensor's type chosen as llama.cpp\n"
    "chooses it (docs/QUANT_MIXES.md; e.g. attn_v / ffn_down in Q6_K in some\n"
    "layers, output Q6_K, Q5_0 / Q5_1 / Q4_0 / IQ4_NL / Q8_0 where a row is not a\n"
    "multiple of 256). Q2_K or IQ4_XS for every matrix: add --type-experts Q2_K.\n";

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL}, *te = NULL;
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(QUANT_HELP, stdout); return 0; }
        if (!strcmp(a, "--type-experts")) {
            if (i + 1 >= argc) return cli_fail("quantize", "--type-experts needs a value");
            te = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            return cli_fail("quantize", "unknown option '%s' (see moefast quantize --help)", a);
        } else if (np < 3) {
            pos[np++] = a;
        } else {
            return cli_fail("quantize", "too many arguments (usage: quantize IN OUT TYPE [--type-experts TYPE])");
        }
    }
    if (np < 3) return cli_fail("quantize", "usage: quantize IN OUT TYPE [--type-experts TYPE]");
    char err[MOE_ERR_LEN];
    if (moe_quantize_file(pos[0], pos[1], pos[2], te, err, sizeof err) != 0)
        return cli_fail("quantize", "%s", err);
    struct stat st;
    if (stat(pos[1], &st) == 0) printf("wrote %s (%lld bytes)\n", pos[1], (long long)st.st_size);
    return 0;
}
