/* toolcheck_scen.c — the scenarios of `moefast toolcheck` and their checks
 * (docs/TOOLCHECK.md). Structural scenarios hold for any model, even one
 * with random weights: a server that constrains calls by the tools'
 * schemas passes them all. Trained ones (the right function for the
 * question, the right city, not calling when nothing fits) need a model
 * that understands the request and are reported apart. */
#include <stdio.h>
#include <string.h>

#include "toolcheck.h"

/* ---- tools: one argument shape each --------------------------------------------- */

#define FN(name, params) "{\"type\":\"function\",\"function\":{\"name\":\"" name "\",\"parameters\":" params "}}"
#define WEATHER FN("get_weather", "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":24}," \
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]}}," \
    "\"required\":[\"city\"]}")
#define NESTED FN("create_event", "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\",\"maxLength\":20}," \
    "\"when\":{\"type\":\"object\",\"properties\":{\"day\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":31}," \
    "\"hour\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":23}},\"required\":[\"day\",\"hour\"]}},\"required\":[\"title\",\"when\"]}")
#define ARR_OBJ FN("add_items", "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":3," \
    "\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\",\"maxLength\":8},\"qty\":{\"type\":\"integer\"," \
    "\"minimum\":1,\"maximum\":9}},\"required\":[\"sku\",\"qty\"]}}},\"required\":[\"items\"]}")
#define BOUNDED FN("set_temp", "{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"number\",\"minimum\":-20,\"maximum\":40}," \
    "\"step\":{\"type\":\"integer\",\"exclusiveMinimum\":0,\"maximum\":5}},\"required\":[\"value\",\"step\"]}")
#define ENUMS FN("set_mode", "{\"type\":\"object\",\"properties\":{\"mode\":{\"enum\":[\"eco\",\"fast\",\"off\"]}," \
    "\"level\":{\"enum\":[1,2,3]},\"on\":{\"type\":\"boolean\"}},\"required\":[\"mode\",\"level\",\"on\"]}")
#define TEXT FN("send_note", "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":40}}," \
    "\"required\":[\"text\"]}")
#define OPTIONAL FN("search", "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\",\"maxLength\":30}," \
    "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":50},\"exact\":{\"type\":\"boolean\"}}}")
#define NOARGS "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"description\":\"The current time\"}}"
#define NULLABLE FN("set_alias", "{\"type\":\"object\",\"properties\":{\"alias\":{\"anyOf\":[{\"type\":\"string\",\"maxLength\":12}," \
    "{\"type\":\"null\"}]}},\"required\":[\"alias\"]}")
#define TAGS FN("tag", "{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"maxItems\":4,\"items\":{\"type\":\"string\"," \
    "\"maxLength\":10}},\"flags\":{\"type\":\"array\",\"maxItems\":3,\"items\":{\"type\":\"boolean\"}}},\"required\":[\"tags\"]}")
#define REFS FN("move", "{\"type\":\"object\",\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"," \
    "\"minimum\":0,\"maximum\":99},\"y\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}},\"required\":[\"x\",\"y\"]}}," \
    "\"properties\":{\"from\":{\"$ref\":\"#/$defs/pt\"},\"to\":{\"$ref\":\"#/$defs/pt\"}},\"required\":[\"from\",\"to\"]}")
#define DEEP FN("configure", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"object\"," \
    "\"properties\":{\"c\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5}}}," \
    "\"required\":[\"c\"]}},\"required\":[\"b\"]}},\"required\":[\"a\"]}")

#define ONE(t) "[" t "]"
#define SET3 "[" WEATHER "," NESTED "," ENUMS "]"
#define ALL "[" WEATHER "," NESTED "," ARR_OBJ "," BOUNDED "," ENUMS "," TEXT "," OPTIONAL "," NOARGS "," NULLABLE "," TAGS "," REFS "," DEEP "]"

#define USER(x) "[{\"role\":\"user\",\"content\":\"" x "\"}]"
#define SYSUSER(s, x) "[{\"role\":\"system\",\"content\":\"" s "\"},{\"role\":\"user\",\"content\":\"" x "\"}]"
#define Q_WEATHER USER("What is the weather in Paris for the next 3 days?")
#define TURN "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[" \
    "{\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]}," \
    "{\"role\":\"tool\",\"tool_call_id\":\"call_a\",\"content\":\"sunny, 21 C\"}"
#define TURN_END TURN "]"
#define TURN2 TURN ",{\"role\":\"assistant\",\"content\":\"It is sunny, 21 C.\"},{\"role\":\"user\",\"content\":\"And in Rome?\"}]"
#define PAR2 "[{\"role\":\"user\",\"content\":\"Weather in Paris and in Rome?\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[" \
    "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}," \
    "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"}}]}," \
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"},{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"rain\"}]"
#define REQ "\"required\""
#define NAMED(n) "{\"type\":\"function\",\"function\":{\"name\":\"" n "\"}}"

/* name, category, trained, stream, expect, name_want, arg_want, tools, choice, parallel, messages, max_tokens, raw_body */
const tc_scen TC_SCENS[] = {
    /* argument shapes: each tool alone, required */
    {"shape-string-enum-int", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(WEATHER), REQ, -1, Q_WEATHER, 200, NULL},
    {"shape-nested-object", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(NESTED), REQ, -1, USER("Plan a meeting on the 3rd at 10."), 200, NULL},
    {"shape-array-of-objects", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(ARR_OBJ), REQ, -1, USER("Add 2 apples and 1 pear."), 200, NULL},
    {"shape-bounded-numbers", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(BOUNDED), REQ, -1, USER("Set 21.5 degrees, step 1."), 200, NULL},
    {"shape-enums-boolean", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(ENUMS), REQ, -1, USER("Eco mode, level 2, on."), 200, NULL},
    {"shape-string-lengths", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(TEXT), REQ, -1, USER("Note: buy milk."), 200, NULL},
    {"shape-optional-fields", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(OPTIONAL), REQ, -1, USER("Search for cats."), 200, NULL},
    {"shape-no-arguments", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(NOARGS), REQ, -1, USER("What time is it?"), 200, NULL},
    {"shape-nullable", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(NULLABLE), REQ, -1, USER("Remove my alias."), 200, NULL},
    {"shape-arrays-of-scalars", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(TAGS), REQ, -1, USER("Tag it red and big."), 200, NULL},
    {"shape-refs-defs", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(REFS), REQ, -1, USER("Move from 1,2 to 3,4."), 200, NULL},
    {"shape-deep-nesting", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(DEEP), REQ, -1, USER("Configure c to 1 and -2."), 200, NULL},
    {"shape-unicode-escapes", "shapes", 0, 0, TC_CALL, NULL, NULL, ONE(TEXT), REQ, -1,
     USER("Note: \\\"Zürich\\\" \\u6771\\u4eac \\ud83d\\ude00 tab\\there \\\\ backslash"), 200, NULL},
    {"shape-many-tools", "shapes", 0, 0, TC_CALL, NULL, NULL, ALL, REQ, -1, Q_WEATHER, 200, NULL},
    /* tool_choice modes */
    {"choice-required-of-3", "choice", 0, 0, TC_CALL, NULL, NULL, SET3, REQ, -1, Q_WEATHER, 200, NULL},
    {"choice-named-nested", "choice", 0, 0, TC_NAMED, "create_event", NULL, SET3, NAMED("create_event"), -1, Q_WEATHER, 200, NULL},
    {"choice-named-enums", "choice", 0, 0, TC_NAMED, "set_mode", NULL, SET3, NAMED("set_mode"), -1, Q_WEATHER, 200, NULL},
    {"choice-named-many", "choice", 0, 0, TC_NAMED, "move", NULL, ALL, NAMED("move"), -1, Q_WEATHER, 200, NULL},
    {"choice-none", "choice", 0, 0, TC_NO_CALL, NULL, NULL, SET3, "\"none\"", -1, Q_WEATHER, 24, NULL},
    {"choice-required-system", "choice", 0, 0, TC_CALL, NULL, NULL, SET3, REQ, -1, SYSUSER("You are a helpful assistant.", "Weather in Oslo?"), 200, NULL},
    {"choice-auto-weather", "choice", 1, 0, TC_NAMED, "get_weather", "Paris", SET3, "\"auto\"", -1, Q_WEATHER, 200, NULL},
    {"choice-auto-default", "choice", 1, 0, TC_NAMED, "get_weather", "Paris", SET3, NULL, -1, Q_WEATHER, 200, NULL},
    /* parallel calls */
    {"parallel-false-one-call", "parallel", 0, 0, TC_ONE_CALL, NULL, NULL, SET3, REQ, 0, USER("Weather in Paris and in Rome?"), 200, NULL},
    {"parallel-true", "parallel", 0, 0, TC_CALL, NULL, NULL, SET3, REQ, 1, USER("Weather in Paris and in Rome?"), 300, NULL},
    {"parallel-false-named", "parallel", 0, 0, TC_ONE_CALL, NULL, NULL, SET3, NAMED("get_weather"), 0, USER("Weather in Paris and in Rome?"), 200, NULL},
    {"parallel-true-trained", "parallel", 1, 0, TC_NAMED, "get_weather", "Rome", ONE(WEATHER), "\"auto\"", 1, USER("Weather in Paris and in Rome?"), 300, NULL},
    /* streaming: the deltas reassembled equal the non-streamed answer */
    {"stream-required", "stream", 0, 1, TC_CALL, NULL, NULL, SET3, REQ, -1, Q_WEATHER, 200, NULL},
    {"stream-named-array", "stream", 0, 1, TC_NAMED, "add_items", NULL, ONE(ARR_OBJ), NAMED("add_items"), -1, USER("Add 2 apples."), 200, NULL},
    {"stream-unicode", "stream", 0, 1, TC_CALL, NULL, NULL, ONE(TEXT), REQ, -1, USER("Note: \\u00e9t\\u00e9 \\u6771\\u4eac"), 200, NULL},
    {"stream-parallel", "stream", 0, 1, TC_CALL, NULL, NULL, SET3, REQ, 1, USER("Weather in Paris and in Rome?"), 300, NULL},
    {"stream-none", "stream", 0, 1, TC_NO_CALL, NULL, NULL, SET3, "\"none\"", -1, Q_WEATHER, 24, NULL},
    {"stream-deep", "stream", 0, 1, TC_CALL, NULL, NULL, ONE(DEEP), REQ, -1, USER("Configure it."), 200, NULL},
    /* multi-turn with tool results */
    {"turn-result-required", "multi-turn", 0, 0, TC_CALL, NULL, NULL, SET3, REQ, -1, TURN_END, 200, NULL},
    {"turn-result-none", "multi-turn", 0, 0, TC_NO_CALL, NULL, NULL, SET3, "\"none\"", -1, TURN_END, 24, NULL},
    {"turn-parallel-results", "multi-turn", 0, 0, TC_CALL, NULL, NULL, SET3, REQ, -1, PAR2, 200, NULL},
    {"turn-next-question", "multi-turn", 0, 1, TC_CALL, NULL, NULL, SET3, REQ, -1, TURN2, 200, NULL},
    {"turn-answer-from-result", "multi-turn", 1, 0, TC_NO_CALL, NULL, NULL, SET3, "\"auto\"", -1, TURN_END, 60, NULL},
    {"turn-next-city", "multi-turn", 1, 0, TC_NAMED, "get_weather", "Rome", SET3, "\"auto\"", -1, TURN2, 200, NULL},
    /* traps: the right answer is not to call */
    {"trap-greeting", "trap", 1, 0, TC_NO_CALL, NULL, NULL, SET3, "\"auto\"", -1, USER("Hi! How are you?"), 60, NULL},
    {"trap-arithmetic", "trap", 1, 0, TC_NO_CALL, NULL, NULL, ONE(WEATHER), "\"auto\"", -1, USER("What is 2 + 2?"), 60, NULL},
    {"trap-unrelated-tool", "trap", 1, 0, TC_NO_CALL, NULL, NULL, ONE(ARR_OBJ), "\"auto\"", -1, USER("Tell me a joke."), 60, NULL},
    /* limits: a call cut by max_tokens */
    {"cut-by-max-tokens", "limits", 0, 0, TC_LENGTH, NULL, NULL, ONE(DEEP), REQ, -1, USER("Configure it."), 3, NULL},
    {"cut-by-max-tokens-stream", "limits", 0, 1, TC_LENGTH, NULL, NULL, ONE(DEEP), REQ, -1, USER("Configure it."), 3, NULL},
    /* bad requests */
    {"bad-named-unknown", "errors", 0, 0, TC_HTTP_400, NULL, NULL, SET3, NAMED("nope"), -1, Q_WEATHER, 16, NULL},
    {"bad-choice-without-tools", "errors", 0, 0, TC_HTTP_400, NULL, NULL, NULL, REQ, -1, Q_WEATHER, 16, NULL},
    {"bad-schema-type", "errors", 0, 0, TC_HTTP_400, NULL, NULL, ONE(FN("f", "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"strng\"}}}")), REQ, -1, Q_WEATHER, 16, NULL},
    {"bad-json-body", "errors", 0, 0, TC_HTTP_400, NULL, NULL, NULL, NULL, -1, NULL, 16, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}"},
    {"bad-role", "errors", 0, 0, TC_HTTP_400, NULL, NULL, NULL, NULL, -1, NULL, 16,
     "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}],\"max_tokens\":4}"},
    {"bad-model", "errors", 0, 0, TC_HTTP_404, NULL, NULL, NULL, NULL, -1, NULL, 16,
     "{\"model\":\"no-such-model-toolcheck\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":4}"},
};
const int TC_N_SCENS = (int)(sizeof TC_SCENS / sizeof TC_SCENS[0]);

/* ---- JSON Schema validation (the subset of the scenarios' tools) ------------------ */

static size_t utf8_len(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool fail(char *why, size_t whylen, const char *path, const char *what) {
    snprintf(why, whylen, "%s: %s", path, what);
    return false;
}

static bool num_ok(json_t *v, json_t *s, const char *path, char *why, size_t whylen) {
    const double d = json_number_value(v);
    json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    json_t *xmn = json_object_get(s, "exclusiveMinimum"), *xmx = json_object_get(s, "exclusiveMaximum");
    if (mn && d < json_number_value(mn)) return fail(why, whylen, path, "below minimum");
    if (mx && d > json_number_value(mx)) return fail(why, whylen, path, "above maximum");
    if (json_is_number(xmn) && d <= json_number_value(xmn)) return fail(why, whylen, path, "not above exclusiveMinimum");
    if (json_is_number(xmx) && d >= json_number_value(xmx)) return fail(why, whylen, path, "not below exclusiveMaximum");
    return true;
}

static bool type_ok(json_t *v, const char *t) {
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return false;
}

static bool members_ok(json_t *v, json_t *s, json_t *root, const char *path, char *why, size_t whylen) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"), *ap = json_object_get(s, "additionalProperties");
    char p[256];
    size_t i;
    json_t *x;
    json_array_foreach(req, i, x)
        if (json_is_string(x) && !json_object_get(v, json_string_value(x))) {
            snprintf(p, sizeof p, "required member '%s' missing", json_string_value(x));
            return fail(why, whylen, path, p);
        }
    const char *k;
    json_object_foreach(v, k, x) {
        json_t *ps = json_object_get(props, k);
        snprintf(p, sizeof p, "%s/%s", path, k);
        if (!ps) {
            /* additionalProperties: absent or false = no other member (as the schema means for a tool) */
            if (json_is_object(ap)) { if (!tc_valid(x, ap, root, p, why, whylen)) return false; continue; }
            if (!json_is_true(ap)) return fail(why, whylen, p, "not a declared property");
            continue;
        }
        if (!tc_valid(x, ps, root, p, why, whylen)) return false;
    }
    return true;
}

bool tc_valid(json_t *v, json_t *s, json_t *root, const char *path, char *why, size_t whylen) {
    if (!json_is_object(s)) return true;
    json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        const char *r = json_string_value(ref);
        json_t *t = !strncmp(r, "#/$defs/", 8) ? json_object_get(json_object_get(root, "$defs"), r + 8)
                  : !strncmp(r, "#/definitions/", 14) ? json_object_get(json_object_get(root, "definitions"), r + 14)
                  : !strcmp(r, "#") ? root : NULL;
        if (!t) return fail(why, whylen, path, "unresolved $ref");
        return tc_valid(v, t, root, path, why, whylen);
    }
    if (json_is_true(json_object_get(s, "nullable")) && json_is_null(v)) return true;
    json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    if (json_is_array(any)) {
        size_t i;
        json_t *alt;
        json_array_foreach(any, i, alt) if (tc_valid(v, alt, root, path, why, whylen)) return true;
        return fail(why, whylen, path, "matches no alternative of anyOf/oneOf");
    }
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (json_is_array(en)) {
        size_t i;
        json_t *e;
        json_array_foreach(en, i, e) if (json_equal(e, v)) return true;
        return fail(why, whylen, path, "not one of the enum values");
    }
    if (cn && !json_equal(cn, v)) return fail(why, whylen, path, "not the const value");
    json_t *ty = json_object_get(s, "type");
    if (json_is_string(ty) && !type_ok(v, json_string_value(ty))) return fail(why, whylen, path, "wrong type");
    if (json_is_array(ty)) {
        bool ok = false;
        size_t i;
        json_t *t;
        json_array_foreach(ty, i, t) ok |= json_is_string(t) && type_ok(v, json_string_value(t));
        if (!ok) return fail(why, whylen, path, "wrong type");
    }
    if (json_is_number(v) && !num_ok(v, s, path, why, whylen)) return false;
    if (json_is_string(v)) {
        const size_t n = utf8_len(json_string_value(v));
        json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
        if (mn && (json_int_t)n < json_integer_value(mn)) return fail(why, whylen, path, "shorter than minLength");
        if (mx && (json_int_t)n > json_integer_value(mx)) return fail(why, whylen, path, "longer than maxLength");
    }
    if (json_is_array(v)) {
        json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems"), *it = json_object_get(s, "items");
        if (mn && (json_int_t)json_array_size(v) < json_integer_value(mn)) return fail(why, whylen, path, "fewer than minItems");
        if (mx && (json_int_t)json_array_size(v) > json_integer_value(mx)) return fail(why, whylen, path, "more than maxItems");
        size_t i;
        json_t *x;
        char p[256];
        json_array_foreach(v, i, x) {
            snprintf(p, sizeof p, "%s/%zu", path, i);
            if (!tc_valid(x, it, root, p, why, whylen)) return false;
        }
    }
    if (json_is_object(v) && !members_ok(v, s, root, path, why, whylen)) return false;
    return true;
}

/* ---- the checks ---------------------------------------------------------------------- */

/* The parameters of the supplied function `name` (*found false: none of
 * that name; NULL with *found: a function without parameters). */
static json_t *tool_params(json_t *tools, const char *name, bool *found) {
    size_t i;
    json_t *t;
    *found = false;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        const char *n = json_string_value(json_object_get(f, "name"));
        if (n && !strcmp(n, name)) { *found = true; return json_object_get(f, "parameters"); }
    }
    return NULL;
}

/* Every call: a supplied function (or the named one), arguments a JSON object valid for its schema. */
static const char *check_calls(const tc_scen *s, json_t *tools, json_t *calls, char *why, size_t whylen) {
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *f = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(f, "name")), *args = json_string_value(json_object_get(f, "arguments"));
        if (!name || !args || !json_is_string(json_object_get(c, "id"))) {
            snprintf(why, whylen, "call %zu lacks id, function.name or function.arguments", i);
            return "unparsed_tool_call";
        }
        bool found;
        json_t *params = tool_params(tools, name, &found);
        if (!found || (s->expect == TC_NAMED && strcmp(name, s->name_want))) {
            snprintf(why, whylen, "call %zu names '%.60s'%s", i, name, found ? " (another was required)" : ", which is not a supplied tool");
            return "wrong_function";
        }
        json_error_t je;
        json_t *a = json_loads(args, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!a || !json_is_object(a)) {
            snprintf(why, whylen, "call %zu's arguments are not a JSON object: %.80s", i, args);
            json_decref(a);
            return "invalid_arguments";
        }
        char w[200];
        /* no parameters: the function takes none, {} */
        const bool ok = params ? tc_valid(a, params, params, "#", w, sizeof w)
                               : (json_object_size(a) == 0 || (snprintf(w, sizeof w, "#: arguments to a function without parameters"), false));
        json_decref(a);
        if (!ok) {
            snprintf(why, whylen, "call %zu (%.40s): %s", i, name, w);
            return "schema_violation";
        }
        if (s->trained && s->arg_want && !strstr(args, s->arg_want)) {
            snprintf(why, whylen, "call %zu's arguments lack '%s'", i, s->arg_want);
            return "wrong_arguments";
        }
    }
    return NULL;
}

const char *tc_check(const tc_scen *s, json_t *tools, const tc_answer *a, char *why, size_t whylen) {
    *why = 0;
    if (s->expect == TC_HTTP_400 || s->expect == TC_HTTP_404) {
        const int want = s->expect == TC_HTTP_400 ? 400 : 404;
        if (a->status != want) { snprintf(why, whylen, "HTTP %d, want %d", a->status, want); return a->status >= 500 ? "error" : "wrong_status"; }
        if (!json_is_object(json_object_get(a->body, "error"))) { snprintf(why, whylen, "no error object"); return "wrong_status"; }
        return NULL;
    }
    if (a->err[0]) { snprintf(why, whylen, "%s", a->err); return "error"; }
    if (a->status != 200) { snprintf(why, whylen, "HTTP %d", a->status); return "error"; }
    const size_t n = json_array_size(a->calls);
    const bool text = a->content && *a->content;
    if (!strcmp(a->finish, "tool_calls") && n == 0) { snprintf(why, whylen, "finish_reason tool_calls without calls"); return "empty_response"; }
    if (s->expect == TC_LENGTH) {
        if (strcmp(a->finish, "length")) { snprintf(why, whylen, "finish_reason '%s', want length (max_tokens %d)", a->finish, s->max_tokens); return "wrong_finish_reason"; }
        /* streamed, the deltas of a cut call were sent before the cut (as OpenAI streams them) */
        return n && !s->stream ? check_calls(s, tools, a->calls, why, whylen) : NULL;
    }
    if (s->expect == TC_NO_CALL) {
        if (n) { snprintf(why, whylen, "%zu calls where none was wanted", n); return "unexpected_call"; }
        if (!a->content) { snprintf(why, whylen, "content null without calls"); return "empty_response"; }
        return NULL;
    }
    if (n == 0) {
        if (!strcmp(a->finish, "length")) { snprintf(why, whylen, "no call within max_tokens %d", s->max_tokens); return "truncated"; }
        if (text && (strstr(a->content, "<tool_call>") || strstr(a->content, "\"arguments\""))) {
            snprintf(why, whylen, "a call left in the text: %.80s", a->content);
            return "unparsed_tool_call";
        }
        snprintf(why, whylen, text ? "answered with text instead of a call" : "no content and no call (finish_reason '%s')", a->finish);
        return text ? "missing_call" : "empty_response";
    }
    if (strcmp(a->finish, "tool_calls")) { snprintf(why, whylen, "finish_reason '%s' with %zu calls", a->finish, n); return "wrong_finish_reason"; }
    if (s->expect == TC_ONE_CALL && n != 1) { snprintf(why, whylen, "%zu calls with parallel_tool_calls false", n); return "too_many_calls"; }
    return check_calls(s, tools, a->calls, why, whylen);
}
