/* toolcheck.h — `moefast toolcheck` (docs/TOOLCHECK.md): a deterministic
 * conformance runner for tool calls against an OpenAI-compatible endpoint.
 * cmd_toolcheck.c runs the scenarios over HTTP (libcurl) and writes the
 * results; toolcheck_scen.c holds the scenarios and the checks. */
#ifndef MOE_TOOLCHECK_H
#define MOE_TOOLCHECK_H

#include <jansson.h>
#include <stdbool.h>

/* What a scenario expects of the answer. */
enum {
    TC_CALL,        /* one or more calls, each to a supplied function, arguments valid */
    TC_ONE_CALL,    /* exactly one such call (parallel_tool_calls false) */
    TC_NAMED,       /* calls to `name` only */
    TC_NO_CALL,     /* text, no call */
    TC_LENGTH,      /* cut by max_tokens: finish_reason length, no partial call */
    TC_HTTP_400,    /* a bad request: 400 with an error object */
    TC_HTTP_404,
};

typedef struct tc_scen {
    const char *name, *category;
    bool trained;           /* only a trained model can pass (the right function, the right city) */
    bool stream;            /* streamed, and compared with the non-streamed answer */
    int expect;
    const char *name_want;  /* TC_NAMED, and trained scenarios' right function */
    const char *arg_want;   /* trained: a substring the arguments must contain */
    const char *tools;      /* JSON array text, or NULL */
    const char *choice;     /* tool_choice JSON text, or NULL */
    int parallel;           /* -1 absent, 0 false, 1 true */
    const char *messages;   /* JSON array text */
    int max_tokens;
    const char *raw_body;   /* TC_HTTP_*: the body sent as is (NULL: built) */
} tc_scen;

extern const tc_scen TC_SCENS[];
extern const int TC_N_SCENS;

/* The answer reassembled (a stream's deltas joined as the SDKs do). */
typedef struct tc_answer {
    int status;
    json_t *body;           /* the parsed response (non-streamed), or NULL */
    char *content;          /* NULL: null / absent */
    json_t *calls;          /* [{id, type, function: {name, arguments}}] (owned) */
    char finish[32];
    char err[200];          /* transport or parse error */
} tc_answer;

/* Checks an answer against the scenario: NULL when it passes, else the
 * failure class, with detail written to why. */
const char *tc_check(const tc_scen *s, json_t *tools, const tc_answer *a, char *why, size_t whylen);
/* Validates v against the JSON Schema subset tools use (detail to why). */
bool tc_valid(json_t *v, json_t *schema, json_t *root, const char *path, char *why, size_t whylen);

#endif
