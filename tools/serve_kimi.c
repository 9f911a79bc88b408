/* serve_kimi.c — Kimi-K2's tool turns (docs/SERVE.md, "Tool calls"), as
 * Kimi-K2-Instruct-0905's chat_template.jinja (moonshotai's) renders them,
 * under jinja2 with or without transformers' trim_blocks/lstrip_blocks:
 *   the tools first, in a turn of their own:
 *     <|im_system|>tool_declare<|im_middle|>\n  # Tools\n  TOOLS<|im_end|>
 *     (TOOLS the `tools` array, tojson: ", " and ": "; the newline and the
 *     two spaces are the template's own text between its tags);
 *   an assistant message with calls: its content, then
 *     <|tool_calls_section_begin|> and per call <|tool_call_begin|>ID
 *     <|tool_call_argument_begin|>ARGS<|tool_call_end|>, then
 *     <|tool_calls_section_end|> (ID the call's id as given, ARGS the
 *     arguments string as given, an object as tojson);
 *   a tool result: ## Return of TOOL_CALL_ID\n    CONTENT (four spaces: the
 *     template's indentation, again between tags);
 *   every turn's header <|im_user|> / <|im_assistant|> / <|im_system|> (for
 *     every other role) + NAME + <|im_middle|>, NAME the message's `name`
 *     when it has a non-empty one, else its role.
 * chat.c's kimi-k2 renderer writes the role headers, the tools turn (its
 * pseudo-role tool_declare, content "\n  # Tools\n  TOOLS"), a message's name
 * (the pseudo-role name before it) and, when the model's template writes it,
 * the template's default system turn (after the tools, when the first message
 * is not a system one; docs/SERVE.md, "Tool calls"). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static int keep(char ***owned, size_t *n_owned, tbuf *b, api_err *e) {
    char **no = b->oom ? NULL : realloc(*owned, (*n_owned + 1) * sizeof *no);
    if (!no) { free(b->p); return api_fail(e, 500, NULL, NULL, "out of memory"); }
    *owned = no;
    no[(*n_owned)++] = b->p ? b->p : strdup("");
    return no[*n_owned - 1] ? 0 : api_fail(e, 500, NULL, NULL, "out of memory");
}

static void tb_json(tbuf *b, json_t *v) {                  /* tojson: ", " and ": " */
    char *d = json_dumps(v, JSON_ENCODE_ANY);
    if (d) tb_add(b, d); else b->oom = true;
    free(d);
}

/* The calls of assistant message i after its content. */
static int calls_text(tbuf *b, json_t *tc, size_t i, api_err *e) {
    tb_add(b, "<|tool_calls_section_begin|>");
    for (size_t c = 0; c < json_array_size(tc); c++) {
        json_t *call = json_array_get(tc, c), *fn = json_object_get(call, "function"), *id = json_object_get(call, "id");
        json_t *nm = json_object_get(fn, "name"), *ar = json_object_get(fn, "arguments");
        if (!json_is_string(id) || !json_is_string(nm) || !(json_is_string(ar) || json_is_object(ar)))
            return api_fail(e, 400, "messages", "invalid_value",
                            "'messages[%zu].tool_calls[%zu]' must be {\"id\": string, \"type\": \"function\", \"function\": {\"name\": string, \"arguments\": string}}", i, c);
        tb_add(b, "<|tool_call_begin|>");
        tb_add(b, json_string_value(id));
        tb_add(b, "<|tool_call_argument_begin|>");
        if (json_is_string(ar)) tb_add(b, json_string_value(ar));
        else tb_json(b, ar);
        tb_add(b, "<|tool_call_end|>");
    }
    tb_add(b, "<|tool_calls_section_end|>");
    return 0;
}

int kimi_messages(json_t *ms, const moe_chat_msg *msgs, size_t n, json_t *tools, moe_chat_msg **out, size_t *n_out,
                  char ***owned, size_t *n_owned, api_err *e) {
    moe_chat_msg *o = realloc(*out, (2 * n + 1) * sizeof *o);   /* the tools, a name before each message */
    if (!o) return api_fail(e, 500, NULL, NULL, "out of memory");
    *out = o;
    size_t k = 0;
    if (tools) {
        tbuf b = {0};
        tb_add(&b, "\n  # Tools\n  ");
        tb_json(&b, tools);
        if (keep(owned, n_owned, &b, e)) return -1;
        o[k++] = (moe_chat_msg){"tool_declare", (*owned)[*n_owned - 1]};
    }
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(ms, i), *tc = json_object_get(m, "tool_calls"), *nm = json_object_get(m, "name");
        const char *r = msgs[i].role;
        if (nm && !json_is_null(nm) && !json_is_string(nm))
            return api_fail(e, 400, "messages", "invalid_type", "'messages[%zu].name' must be a string", i);
        const bool named = json_string_length(nm) > 0;
        const bool calls = !strcmp(r, "assistant") && tc && !json_is_null(tc);
        if (calls && !json_is_array(tc)) return api_fail(e, 400, "messages", "invalid_type", "'messages[%zu].tool_calls' must be an array", i);
        const bool tool = !strcmp(r, "tool");
        if (tool && !json_is_string(json_object_get(m, "tool_call_id")))
            return api_fail(e, 400, "messages", "missing_required_parameter", "'messages[%zu].tool_call_id' is required for role 'tool'", i);
        /* the template tests `message.get('tool_calls')`: an empty list is none */
        if (named) o[k++] = (moe_chat_msg){"name", json_string_value(nm)};
        if (!tool && !(calls && json_array_size(tc))) { o[k++] = msgs[i]; continue; }
        tbuf b = {0};
        tb_add(&b, "");
        if (tool) {
            tb_add(&b, "## Return of ");
            tb_add(&b, json_string_value(json_object_get(m, "tool_call_id")));
            tb_add(&b, "\n    ");
        }
        tb_add(&b, msgs[i].content);
        if (calls && json_array_size(tc) && calls_text(&b, tc, i, e)) { free(b.p); return -1; }
        if (keep(owned, n_owned, &b, e)) return -1;
        o[k++] = (moe_chat_msg){r, (*owned)[*n_owned - 1]};
    }
    *n_out = k;
    return 0;
}
