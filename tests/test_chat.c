/* test_chat.c — chat-template recognition and rendering (src/chat.c) on the
 * templates the shared GGUFs carry, plus the errors. */
#include "check.h"
#include "text/chat.h"
#include "gguf/gguf.h"
#include "moefast.h"

static char *template_of(const char *rel) {
    char err[MOE_ERR_LEN];
    const char *path = check_ref(rel);
    if (!path) return NULL;
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (rc != MOE_OK) return NULL;
    gguf_str s = {0};
    rc = gguf_get_str(f, "tokenizer.chat_template", &s, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s: no chat template", rel);
    char *t = rc == MOE_OK ? strndup(s.ptr, (size_t)s.len) : NULL;
    gguf_close(f);
    return t;
}

static const moe_chat_msg CONV[] = {
    {"system", "You are terse."},
    {"user", "Hello!"},
    {"assistant", "Hi."},
    {"user", "Bye"},
};

static void expect_render(const char *tmpl, const char *fmt, const moe_chat_msg *m, size_t n, bool gen, const char *want) {
    char err[MOE_ERR_LEN] = "", *out = NULL;
    int rc = moe_chat_render_tmpl(tmpl, fmt, m, n, gen, &out, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    CHECK_MSG(out && !strcmp(out, want), "rendered:\n%s\nwanted:\n%s", out ? out : "(null)", want);
    free(out);
}

/* GLM-4.5: recognised by [gMASK]<sop> with its <arg_key> tool syntax (a
 * fragment of zai-org's chat_template.jinja); the text wanted is what that
 * template renders under transformers' jinja2 settings (trim_blocks,
 * lstrip_blocks) for the same messages: a tool round trip as serve writes it
 * (the tools' system turn, calls in the assistant content, results as role
 * tool, grouped under one <|observation|>), reasoning kept only after the
 * last user turn. */
static void test_glm45(void) {
    static const char G45[] =
        "[gMASK]<sop>\n{%- if tools -%}\n<|system|>\n# Tools\n...<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
        "{%- if add_generation_prompt -%}\n    <|assistant|>{{- '\\n<think></think>' if (enable_thinking is defined and not enable_thinking) else '' -}}";
    CHECK(moe_chat_detect(G45) && !strcmp(moe_chat_detect(G45), "glm45"));
    CHECK(strstr(moe_chat_formats(), "glm45") != NULL);
    static const moe_chat_msg M[] = {
        {"system", "TOOLS"},
        {"system", "S"},
        {"user", "U"},
        {"assistant", "  <think>old</think>\n\n<tool_call>g\n<arg_key>a</arg_key>\n<arg_value>x y</arg_value>\n</tool_call>"},
        {"tool", "R1"},
        {"tool", "R2"},
        {"user", "U2"},
        {"assistant", "\n<think>\nwhy\n</think>\nA2 "},
        {"assistant", "plain"},
    };
    expect_render(G45, NULL, M, 9, true,
                  "[gMASK]<sop><|system|>\nTOOLS<|system|>\nS<|user|>\nU"
                  "<|assistant|>\n<think></think>\n<tool_call>g\n<arg_key>a</arg_key>\n<arg_value>x y</arg_value>\n</tool_call>"
                  "<|observation|>\n<tool_response>\nR1\n</tool_response>\n<tool_response>\nR2\n</tool_response>"
                  "<|user|>\nU2<|assistant|>\n<think>why</think>\nA2<|assistant|>\n<think></think>\nplain<|assistant|>");
    expect_render(G45, NULL, M + 2, 1, false, "[gMASK]<sop><|user|>\nU");
    /* a result first, and an assistant turn with nothing to say */
    static const moe_chat_msg M2[] = {{"tool", "R"}, {"assistant", " "}};
    expect_render(G45, NULL, M2, 2, false, "[gMASK]<sop><|observation|>\n<tool_response>\nR\n</tool_response><|assistant|>\n<think></think>");
    /* enable_thinking false (the pseudo-role): /nothink after each user
     * message not already ending so, an empty think block opened for the answer */
    static const moe_chat_msg M3[] = {{"enable_thinking", "false"}, {"system", "S"}, {"user", "U"},
                                      {"assistant", "A"}, {"user", "U2 /nothink"}};
    expect_render(G45, NULL, M3, 5, true,
                  "[gMASK]<sop><|system|>\nS<|user|>\nU/nothink<|assistant|>\n<think></think>\nA"
                  "<|user|>\nU2 /nothink<|assistant|>\n<think></think>");
    static const moe_chat_msg M4[] = {{"enable_thinking", "true"}, {"user", "U"}};
    expect_render(G45, NULL, M4, 2, true, "[gMASK]<sop><|user|>\nU<|assistant|>");
    /* GLM-4 without the tool syntax stays glm4 */
    CHECK(!strcmp(moe_chat_detect("[gMASK]<sop>{{ x }}"), "glm4"));
}

static const char CHATML_WANT[] =
    "<|im_start|>system\nYou are terse.<|im_end|>\n"
    "<|im_start|>user\nHello!<|im_end|>\n"
    "<|im_start|>assistant\nHi.<|im_end|>\n"
    "<|im_start|>user\nBye<|im_end|>\n"
    "<|im_start|>assistant\n";

/* Llama 3.x and Mistral: recognised from fragments of the official templates
 * (Llama-3.1-8B-Instruct's, Mistral-Small-3.1-24B-Instruct-2503's); a tool
 * round trip in the form serve writes it (the call as the assistant's
 * content, the result as role tool, Mistral's tool list as the pseudo-role
 * available_tools). Needs no shared files. */
static void test_llama3_mistral(void) {
    static const char L31[] =
        "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}"
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] + '<|eot_id|>' }}"
        "{{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}";
    static const char MS31[] =
        "{{- bos_token }}{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{{- \"[AVAILABLE_TOOLS] [\" }}"
        "{{- '[INST]' + message['content'] + '[/INST]' }}{{- \"[TOOL_CALLS] [\" }}{{- '[TOOL_RESULTS] {\"content\": ' }}";
    CHECK(moe_chat_detect(L31) && !strcmp(moe_chat_detect(L31), "llama3"));
    CHECK(moe_chat_detect(MS31) && !strcmp(moe_chat_detect(MS31), "mistral"));
    CHECK(moe_chat_detect("{{ bos_token }}[INST] {{ m }} [/INST]") && !strcmp(moe_chat_detect("[INST] x [/INST]"), "mistral"));
    /* not recognised: Llama 2 ([INST] with <<SYS>>), a half Llama 3 header, Gemma */
    CHECK(moe_chat_detect("[INST] <<SYS>>\\n{{ s }}\\n<</SYS>>\\n\\n{{ u }} [/INST]") == NULL);
    CHECK(moe_chat_detect("<|start_header_id|>user<|end_header_id|>") == NULL);
    CHECK(moe_chat_detect("<start_of_turn>user\n{{ m }}<end_of_turn>") == NULL);
    char err[MOE_ERR_LEN], *out = (char *)1;
    CHECK_EQ_INT(moe_chat_render_tmpl("[INST] <<SYS>> [/INST]", NULL, CONV, 1, true, &out, err, sizeof err), MOE_EUNSUPPORTED);
    CHECK(out == NULL);
    CHECK_STR_CONTAINS(err, "llama3, mistral");

    expect_render(L31, NULL, CONV, 4, true,
                  "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHi.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    static const moe_chat_msg LT[] = {
        {"user", "Weather in Paris?"},
        {"assistant", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
        {"tool", "sunny"},
    };
    expect_render(L31, NULL, LT, 3, true,
                  "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"
                  "<|start_header_id|>ipython<|end_header_id|>\n\nsunny<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");

    expect_render(MS31, NULL, CONV, 4, true,
                  "[SYSTEM_PROMPT]You are terse.[/SYSTEM_PROMPT][INST]Hello![/INST]Hi.</s>[INST]Bye[/INST]");
    static const moe_chat_msg MT[] = {
        {"system", "Be terse."},
        {"available_tools", " [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}]"},
        {"user", "Weather in Paris?"},
        {"assistant", "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {}, \"id\": \"abcdef123\"}]"},
        {"tool", " {\"content\": sunny, \"call_id\": \"abcdef123\"}"},
    };
    expect_render(MS31, NULL, MT, 5, true,
                  "[SYSTEM_PROMPT]Be terse.[/SYSTEM_PROMPT]"
                  "[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}][/AVAILABLE_TOOLS]"
                  "[INST]Weather in Paris?[/INST]"
                  "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {}, \"id\": \"abcdef123\"}]</s>"
                  "[TOOL_RESULTS] {\"content\": sunny, \"call_id\": \"abcdef123\"}[/TOOL_RESULTS]");
    /* by name, whatever the template */
    expect_render("<|im_start|>", "llama3", CONV + 1, 1, false, "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>");
    expect_render("<|im_start|>", "mistral", CONV + 1, 1, false, "[INST]Hello![/INST]");
}

/* Qwen3's <think> handling, messages as serve writes them (reasoning_content
 * folded into the content as <think>R</think>, calls in the content, results
 * as a user turn); the text wanted is Qwen3's chat_template.jinja (the shared
 * qwen3-vocab.gguf's) rendered by jinja2 for the same conversation:
 * reasoning dropped before the last user query, kept after it (the agent
 * loop), an empty block for a last turn without reasoning. */
/* Kimi-K2: recognised by its assistant header (a fragment of
 * moonshotai/Kimi-K2-Instruct's template); the text wanted is what llama.cpp
 * renders (llama_chat_apply_template, built-in LLM_CHAT_TEMPLATE_KIMI_K2, at
 * dc02e1f83) for the same messages, printed by a driver linked to libllama. */
static void test_kimi_k2(void) {
    static const char K2[] =
        "{%- elif message['role'] == 'assistant' -%}\n    <|im_assistant|>assistant<|im_middle|>\n  {%- else -%}\n"
        "    <|im_system|>tool<|im_middle|>\n  {%- endif -%}";
    CHECK(moe_chat_detect(K2) && !strcmp(moe_chat_detect(K2), "kimi-k2"));
    CHECK(strstr(moe_chat_formats(), "kimi-k2") != NULL);
    CHECK(moe_chat_detect("<|im_assistant|>assistant") == NULL);
    static const char TURNS[] =
        "<|im_system|>system<|im_middle|>You are terse.<|im_end|><|im_user|>user<|im_middle|>Hello!<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>Hi.<|im_end|><|im_user|>user<|im_middle|>Bye<|im_end|>";
    expect_render(K2, NULL, CONV, 4, false, TURNS);
    expect_render(K2, NULL, CONV, 4, true, "<|im_system|>system<|im_middle|>You are terse.<|im_end|><|im_user|>user<|im_middle|>Hello!<|im_end|>"
                                           "<|im_assistant|>assistant<|im_middle|>Hi.<|im_end|><|im_user|>user<|im_middle|>Bye<|im_end|>"
                                           "<|im_assistant|>assistant<|im_middle|>");
    static const moe_chat_msg M[] = {{"user", "Hello!"}, {"tool", "{\"r\":1}"}, {"other", "X"}};
    expect_render(NULL, "kimi-k2", M, 3, true, "<|im_user|>user<|im_middle|>Hello!<|im_end|>"
                                                "<|im_system|>tool<|im_middle|>{\"r\":1}<|im_end|>X<|im_end|>"
                                                "<|im_assistant|>assistant<|im_middle|>");
}

/* Kimi-K2 templates that write a default system turn (moonshotai's
 * Kimi-K2-Instruct-0905, a fragment: its tools turn, the default's lines,
 * its generation prompt; llama.cpp's models/templates/moonshotai-Kimi-K2.jinja,
 * Moonlight's "You are a helpful assistant"): the texts wanted are what
 * jinja2 renders from the whole templates (with and without transformers'
 * trim_blocks / lstrip_blocks, the same) for the same messages; the tools
 * turn and names as serve writes them (pseudo-roles tool_declare, name). */
static void test_kimi_k2_default_system(void) {
    static const char K2I[] =
        "{%- if tools -%}\n  <|im_system|>tool_declare<|im_middle|>\n  # Tools\n  {{ tools | tojson }}<|im_end|>\n{%- endif -%}\n"
        "{%- for message in messages -%}\n  {%- if loop.first and messages[0]['role'] != 'system' -%}\n"
        "    <|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>\n  {%- endif -%}\n"
        "  {%- set role_name =  message.get('name') or  message['role'] -%}\n"
        "{%- if add_generation_prompt -%}\n  <|im_assistant|>assistant<|im_middle|>\n{%- endif -%}";
#define KIMI_SYS "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
    CHECK(moe_chat_detect(K2I) && !strcmp(moe_chat_detect(K2I), "kimi-k2"));
    /* a system message first: none */
    expect_render(K2I, NULL, CONV, 2, true, "<|im_system|>system<|im_middle|>You are terse.<|im_end|>"
                                            "<|im_user|>user<|im_middle|>Hello!<|im_end|><|im_assistant|>assistant<|im_middle|>");
    /* none: the default, also under --chat-format kimi-k2 with this template */
    static const char NOSYS[] = KIMI_SYS "<|im_user|>user<|im_middle|>Hello!<|im_end|><|im_assistant|>assistant<|im_middle|>Hi.<|im_end|>"
                                "<|im_user|>user<|im_middle|>Bye<|im_end|><|im_assistant|>assistant<|im_middle|>";
    expect_render(K2I, NULL, CONV + 1, 3, true, NOSYS);
    expect_render(K2I, "kimi-k2", CONV + 1, 3, true, NOSYS);
    /* a tool result first: the default too; an empty conversation: none (the default is in the messages' loop) */
    static const moe_chat_msg TF[] = {{"tool", "## Return of functions.f:0\n    R"}};
    expect_render(K2I, NULL, TF, 1, true, KIMI_SYS "<|im_system|>tool<|im_middle|>## Return of functions.f:0\n    R<|im_end|>"
                                          "<|im_assistant|>assistant<|im_middle|>");
    expect_render(K2I, NULL, NULL, 0, true, "<|im_assistant|>assistant<|im_middle|>");
    /* the tools turn first, then the default; a named first message: by its role */
    static const moe_chat_msg TU[] = {{"tool_declare", "\n  # Tools\n  [{\"a\": 1}]"}, {"name", "bob"}, {"user", "U"}};
    static const char TOOLS_TURN[] = "<|im_system|>tool_declare<|im_middle|>\n  # Tools\n  [{\"a\": 1}]<|im_end|>";
    char want[512];
    snprintf(want, sizeof want, "%s%s<|im_user|>bob<|im_middle|>U<|im_end|>", TOOLS_TURN, KIMI_SYS);
    expect_render(K2I, NULL, TU, 3, false, want);
    static const moe_chat_msg TS[] = {{"tool_declare", "\n  # Tools\n  [{\"a\": 1}]"}, {"system", "You are terse."}, {"user", "Hello!"}};
    snprintf(want, sizeof want, "%s<|im_system|>system<|im_middle|>You are terse.<|im_end|><|im_user|>user<|im_middle|>Hello!<|im_end|>", TOOLS_TURN);
    expect_render(K2I, NULL, TS, 3, false, want);
    static const moe_chat_msg NS[] = {{"name", "boss"}, {"system", "S"}, {"user", "U"}};
    expect_render(K2I, NULL, NS, 3, true, "<|im_system|>boss<|im_middle|>S<|im_end|><|im_user|>user<|im_middle|>U<|im_end|>"
                                          "<|im_assistant|>assistant<|im_middle|>");
    /* llama.cpp's built-in (no template, or its test template): no default, the pseudo-roles still written */
    expect_render(NULL, "kimi-k2", TU, 3, false, "<|im_system|>tool_declare<|im_middle|>\n  # Tools\n  [{\"a\": 1}]<|im_end|>"
                                                 "<|im_user|>bob<|im_middle|>U<|im_end|>");
    /* Moonlight's sentence, in a quoted literal; a header with template
     * syntax before it is passed over */
    static const char MOON[] =
        "{%- if loop.first and messages[0]['role'] != 'system' -%}\n"
        "    {{ '<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>' }}\n  {%- endif -%}\n"
        "  {%- if message['role'] == 'system' -%}\n    {{ '<|im_system|>system<|im_middle|>' }}\n"
        "  {%- elif message['role'] == 'assistant' -%}\n    {{ '<|im_assistant|>assistant<|im_middle|>' }}\n"
        "  {%- if message['content'] is string -%}\n    {{- message['content'] + '<|im_end|>' -}}";
    static const moe_chat_msg UT[] = {{"user", "Hello!"}, {"tool", "R"}};
    expect_render(MOON, NULL, UT, 2, true, "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>"
                                           "<|im_user|>user<|im_middle|>Hello!<|im_end|><|im_system|>tool<|im_middle|>R<|im_end|>"
                                           "<|im_assistant|>assistant<|im_middle|>");
    static const char LATE[] = "{{ '<|im_system|>system<|im_middle|>' + m }}<|im_end|> != 'system' <|im_system|>system<|im_middle|>D.<|im_end|>"
                               " <|im_assistant|>assistant<|im_middle|>";
    expect_render(LATE, NULL, CONV + 1, 1, false, "<|im_system|>system<|im_middle|>D.<|im_end|><|im_user|>user<|im_middle|>Hello!<|im_end|>");
    /* templates whose header text is not a plain literal, or without the
     * first-message test, or cut short: no default */
    static const char *const NONE[] = {
        "!= 'system' <|im_system|>system<|im_middle|>{{ m }}<|im_end|><|im_assistant|>assistant<|im_middle|>",
        "!= 'system' <|im_system|>system<|im_middle|>Say \"hi\"<|im_end|><|im_assistant|>assistant<|im_middle|>",
        "!= 'system' <|im_system|>system<|im_middle|><|im_end|><|im_assistant|>assistant<|im_middle|>",
        "<|im_system|>system<|im_middle|>You are Kimi.<|im_end|><|im_assistant|>assistant<|im_middle|>",
        "<|im_assistant|>assistant<|im_middle|> != 'system' <|im_system|>system<|im_middle|>You are Kimi.",
    };
    for (size_t i = 0; i < sizeof NONE / sizeof NONE[0]; i++)
        expect_render(NONE[i], NULL, CONV + 1, 1, false, "<|im_user|>user<|im_middle|>Hello!<|im_end|>");
#undef KIMI_SYS
}

static void test_qwen3_think(void) {
    static const moe_chat_msg M[] = {
        {"system", "S"},
        {"user", "Q1"},
        {"assistant", "<think>R1</think>A1"},
        {"user", "Q2"},
        {"assistant", "<think>\nR2\n</think>Let me call.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"},
        {"user", "<tool_response>\nok\n</tool_response>"},
        {"assistant", "<think>\nR3\n</think>\n\nDone."},
        {"assistant", "plain"},
    };
    expect_render("<|im_start|>{% if '</think>' in c %}{% endif %}", NULL, M, 8, true,
                  "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n"
                  "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\nR2\n</think>\n\nLet me call.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
                  "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
                  "<|im_start|>assistant\n<think>\nR3\n</think>\n\nDone.<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\n\n</think>\n\nplain<|im_end|>\n<|im_start|>assistant\n");
    /* plain ChatML keeps the content as given */
    expect_render("<|im_start|>", NULL, M + 2, 1, false, "<|im_start|>assistant\n<think>R1</think>A1<|im_end|>\n");
    CHECK(strstr(moe_chat_formats(), "qwen3") != NULL);
}

int main(void) {
    test_llama3_mistral();
    test_qwen3_think();
    test_kimi_k2();
    test_kimi_k2_default_system();
    char *qwen3 = template_of("vocab/qwen3-vocab.gguf");
    char *synth_q = template_of("oracle/qwen3moe-tiny-q8_0.gguf"); /* the F32 files' templates */
    char *synth_l = template_of("oracle/laguna-tiny-q8_0.gguf");
    if (!qwen3 || !synth_q || !synth_l) {
        free(qwen3); free(synth_q); free(synth_l);
        return check_report("test_chat");
    }

    /* recognition */
    CHECK(moe_chat_detect(qwen3) && !strcmp(moe_chat_detect(qwen3), "qwen3"));
    CHECK(moe_chat_detect(synth_q) && !strcmp(moe_chat_detect(synth_q), "chatml"));
    CHECK(moe_chat_detect(synth_l) && !strcmp(moe_chat_detect(synth_l), "chatml"));
    CHECK(moe_chat_detect("{{ '<user>' + m + '</user><assistant>' }}{{ '</assistant>' }}") &&
          !strcmp(moe_chat_detect("x</assistant>y"), "laguna"));
    CHECK(moe_chat_detect(NULL) == NULL);

    /* ChatML: every shared template renders the same text as its Jinja
     * would for these plain messages (Qwen3: no reasoning content present) */
    expect_render(qwen3, NULL, CONV, 4, true, CHATML_WANT);
    expect_render(synth_q, NULL, CONV, 4, true, CHATML_WANT);
    expect_render(synth_l, NULL, CONV, 4, true, CHATML_WANT);
    expect_render(synth_l, NULL, CONV + 1, 1, false, "<|im_start|>user\nHello!<|im_end|>\n");
    expect_render(synth_l, NULL, NULL, 0, true, "<|im_start|>assistant\n");
    expect_render(synth_l, NULL, NULL, 0, false, "");

    /* Laguna, by name (overrides whatever the template is) */
    expect_render(synth_q, "laguna", CONV, 4, true,
                  "<system>\nYou are terse.\n</system>\n<user>\nHello!\n</user>\n"
                  "<assistant>\nHi.\n</assistant>\n<user>\nBye\n</user>\n<assistant>\n");
    expect_render("x</assistant>y", NULL, CONV + 1, 1, true, "<user>\nHello!\n</user>\n<assistant>\n");
    /* DeepSeek-V3: recognised by its three turn markers, rendered as llama.cpp's built-in */
    static const char DS_TMPL[] = "{{ bos_token }}{% if m == 'user' %}{{ '<｜User｜>' + c }}{% endif %}"
                                  "{{ '<｜Assistant｜>' + c + '<｜end▁of▁sentence｜>' }}";
    CHECK(moe_chat_detect(DS_TMPL) && !strcmp(moe_chat_detect(DS_TMPL), "deepseek3"));
    expect_render(DS_TMPL, NULL, CONV, 4, true,
                  "You are terse.\n\n<｜User｜>Hello!<｜Assistant｜>Hi.<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜>");
    expect_render(synth_q, "deepseek3", CONV + 1, 1, false, "<｜User｜>Hello!");
    /* GLM-4: recognised by its opening tokens, rendered as llama.cpp's chatglm4 */
    CHECK(moe_chat_detect("[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>") &&
          !strcmp(moe_chat_detect("[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>"), "glm4"));
    expect_render("[gMASK]<sop>{{ x }}", NULL, CONV, 4, true,
                  "[gMASK]<sop><|system|>\nYou are terse.<|user|>\nHello!<|assistant|>\nHi.<|user|>\nBye<|assistant|>\n");
    expect_render(synth_q, "glm4", CONV + 1, 1, false, "[gMASK]<sop><|user|>\nHello!");
    CHECK(strstr(moe_chat_formats(), "glm4") != NULL);
    test_glm45();
    /* harmony (gpt-oss): recognised by its headers; the template's system
     * message first (its settings from the pseudo-roles: date, effort,
     * functions), system -> developer instructions ending in a blank line */
#define H_SYS(effort, tools) "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n" \
    "Knowledge cutoff: 2024-06\nCurrent date: 2026-01-31\n\nReasoning: " effort "\n\n" \
    "# Valid channels: analysis, commentary, final. Channel must be included for every message." tools "<|end|>"
    CHECK(moe_chat_detect("{{- '<|start|>' + role + '<|message|>' }}") &&
          !strcmp(moe_chat_detect("<|start|>user<|message|>"), "harmony"));
    static const moe_chat_msg HC[] = {
        {"current_date", "2026-01-31"}, {"system", "You are terse."}, {"user", "Hello!"}, {"assistant", "Hi."}, {"user", "Bye"},
    };
    expect_render(synth_q, "harmony", HC, 5, true,
                  H_SYS("medium", "")
                  "<|start|>developer<|message|># Instructions\n\nYou are terse.\n\n<|end|>"
                  "<|start|>user<|message|>Hello!<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>Hi.<|end|>"
                  "<|start|>user<|message|>Bye<|end|><|start|>assistant");
    static const moe_chat_msg HE[] = {{"reasoning_effort", "high"}, {"current_date", "2026-01-31"}, {"user", "Hello!"}};
    expect_render("<|start|>x<|message|>", NULL, HE, 3, false, H_SYS("high", "") "<|start|>user<|message|>Hello!<|end|>");
    /* no date given: today's, in the template's %Y-%m-%d */
    char *today = NULL, terr[MOE_ERR_LEN];
    CHECK(moe_chat_render_tmpl("<|start|>x<|message|>", NULL, CONV + 1, 1, false, &today, terr, sizeof terr) == MOE_OK);
    const char *cd = today ? strstr(today, "Current date: ") : NULL;
    CHECK(cd && strlen(cd) > 24 && cd[18] == '-' && cd[21] == '-' && cd[24] == '\n' && !strncmp(cd + 14, "20", 2));
    free(today);
    /* an agent loop's history in serve's pseudo-roles: the developer message
     * as given, the analysis before the call, the call with its recipient in
     * the commentary channel, the result from functions.NAME (the harmony
     * cookbook's rendering); "functions" adds the system message's tools line */
    static const moe_chat_msg HL[] = {
        {"current_date", "2026-01-31"},
        {"functions", ""},
        {"developer", "# Tools\n\n## functions\n\nnamespace functions {\n\n} // namespace functions"},
        {"user", "Weather?"},
        {"analysis", "Need the tool."},
        {"to=functions.get_weather", "{\"city\": \"Paris\"}"},
        {"functions.get_weather", "sunny"},
        {"commentary", "Checking."},
        {"assistant", "Sunny."},
    };
    expect_render("<|start|>x<|message|>", NULL, HL, 9, true,
                  H_SYS("medium", "\nCalls to these tools must go to the commentary channel: 'functions'.")
                  "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n} // namespace functions<|end|>"
                  "<|start|>user<|message|>Weather?<|end|>"
                  "<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>"
                  "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>"
                  "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|>"
                  "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>Sunny.<|end|><|start|>assistant");
#undef H_SYS
    /* an unknown template works once a format is named */
    expect_render("[INST]", "chatml", CONV + 1, 1, true, "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");

    /* errors */
    char err[MOE_ERR_LEN], *out = (char *)1;
    CHECK_EQ_INT(moe_chat_render_tmpl("<start_of_turn>{{ m }}", NULL, CONV, 1, true, &out, err, sizeof err), MOE_EUNSUPPORTED);
    CHECK(out == NULL);
    CHECK_STR_CONTAINS(err, "chatml, laguna");
    CHECK_STR_CONTAINS(err, "--chat-format");
    CHECK_EQ_INT(moe_chat_render_tmpl(NULL, NULL, CONV, 1, true, &out, err, sizeof err), MOE_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err, "no tokenizer.chat_template");
    CHECK_EQ_INT(moe_chat_render_tmpl(qwen3, "vicuna", CONV, 1, true, &out, err, sizeof err), MOE_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err, "vicuna");
    CHECK_STR_CONTAINS(err, "chatml, laguna");
    moe_chat_msg bad[] = {{"us\ner", "x"}, {"user", NULL}, {"", "x"}, {NULL, "x"}};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(moe_chat_render_tmpl(qwen3, NULL, bad + i, 1, true, &out, err, sizeof err), MOE_EINVAL);
        CHECK_STR_CONTAINS(err, "message 0");
    }
    CHECK_EQ_INT(moe_chat_render_tmpl(qwen3, NULL, NULL, 2, true, &out, err, sizeof err), MOE_EINVAL);

    /* the public wrapper on a vocabulary-only load */
    const char *path = check_ref("vocab/qwen3-vocab.gguf");
    moe_model *m = NULL;
    moe_load_params lp = {.vocab_only = true};
    int rc = moe_model_load(path, &lp, &m, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (rc == MOE_OK) {
        out = NULL;
        CHECK_EQ_INT(moe_chat_render(m, NULL, CONV, 4, true, &out, err, sizeof err), MOE_OK);
        CHECK(out && !strcmp(out, CHATML_WANT));
        free(out);
        moe_model_free(m);
    }
    free(qwen3); free(synth_q); free(synth_l);
    return check_report("test_chat");
}
