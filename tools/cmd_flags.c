/* cmd_flags.c — `moefast flags`: the optimisation flag registry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "moefast.h"

int cmd_flags(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: moefast flags\n  lists the optimisation flags; select them with --flags=SPEC or MOEFAST_FLAGS\n");
            return 0;
        }
        return cli_fail("flags", "unexpected argument '%s' (usage: moefast flags)", argv[i]);
    }
    int n = moe_flag_count();
    printf("%-16s %-7s %s\n", "flag", "default", "description");
    for (int i = 0; i < n; i++) {
        const char *name, *desc;
        bool on, test_only;
        if (!moe_flag_describe(i, &name, &desc, &on, &test_only)) continue;
        printf("%-16s %-7s %s%s\n", name, on ? "on" : "off", desc, test_only ? " [test-only]" : "");
    }
    printf("\nSpec (--flags=SPEC on model-loading commands, or MOEFAST_FLAGS when --flags is absent):\n"
           "  none            every flag off: the plain reference path\n"
           "  default         the default set (flags marked on above)\n"
           "  all             every flag that is neither test-only nor a NUMERICS flag\n"
           "  +name,-name     toggle flags on top of the default set, or of a set named\n"
           "                  earlier in the spec (\"none,+simd\")\n"
           "Test-only flags change results or timing on purpose: they exist to prove that\n"
           "the gate, bisect and the benchmarks can fail. NUMERICS flags select another\n"
           "arithmetic (its own golden traces; every exactness guarantee holds within it).\n"
           "See docs/EXACTNESS.md.\n");
    const char *env = getenv("MOEFAST_FLAGS");
    if (env && *env) printf("\nMOEFAST_FLAGS is set: \"%s\"\n", env);
    return 0;
}
