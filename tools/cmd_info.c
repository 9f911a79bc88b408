/* cmd_info.c — `moefast info FILE`: architecture, hyperparameters (and the
 * defaults used for absent keys), metadata, tensor table, bytes per token. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "moefast.h"

int cmd_info(int argc, char **argv) {
    const char *C = "info", *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: moefast info FILE\n");
            return 0;
        }
        if (!strcmp(argv[i], "-m") && i + 1 < argc) { path = argv[++i]; continue; }
        if (argv[i][0] == '-') return cli_fail(C, "unknown argument '%s'", argv[i]);
        if (path) return cli_fail(C, "only one FILE, got '%s' and '%s'", path, argv[i]);
        path = argv[i];
    }
    if (!path) return cli_fail(C, "usage: moefast info FILE");
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    int rc = moe_model_load(path, NULL, &m, err, sizeof err);
    if (rc == MOE_EUNSUPPORTED && strstr(err, "general.architecture")) {
        /* Not an architecture we run: still describe the file. */
        char err2[MOE_ERR_LEN];
        moe_load_params lp = {.vocab_only = true};
        if (moe_model_load(path, &lp, &m, err2, sizeof err2) == MOE_OK) {
            fprintf(stderr, "moefast info: note: %s\n", err);
            rc = MOE_OK;
        }
    }
    if (rc) return cli_fail(C, "%s", err);
    moe_model_print_info(m, stdout);
    moe_model_free(m);
    return 0;
}
