/* gen_templates.c — the tool-aware chat templates `moefast gen --chat-template`
 * writes beside the plain ChatML and Qwen3 ones in gen.c, with the special
 * tokens each family's vocabulary needs (declared CONTROL by gen_vocab.c), so
 * random-weight models can be served with tools in every family serve knows
 * (tests/cli_serve_tools.sh, tests/cli_toolcheck.sh).
 *
 * llama3-tools: modelled on Llama-3.1-8B-Instruct's template with
 *   tools_in_user_message (tools as indented JSON in the first user turn, the
 *   "Environment: ipython" / date system preamble when tools are given, one
 *   call per turn as {"name", "parameters"}, results as ipython turns), the
 *   date fixed to the template's default and no BOS (gen's vocabularies do
 *   not add one); without tools it is llama.cpp's built-in llama3 form.
 * mistral-tools: modelled on Mistral-Small-3.1-24B-Instruct-2503's (v7
 *   markers, [AVAILABLE_TOOLS] before the last user turn, [TOOL_CALLS] with
 *   the last 9 characters of each id, [TOOL_RESULTS] with call_id), without
 *   its default system message and parallel-call instructions; tools as
 *   JSON (tojson), where Small 3.1 writes string values unescaped.
 * deepseek3-tools: DeepSeek-V3's turn markers and tool-call tokens in the
 *   vocabulary; the template renders plain turns (serve lists the tools).
 * glm4-tools: modelled on GLM-4.5's (zai-org's chat_template.jinja; 4.6's is
 *   the same): the tools system turn, <|observation|> tool results, calls as
 *   <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n...
 *   </tool_call> (string values raw, others tojson; arguments must be a
 *   mapping, as in the original), enable_thinking=false as the original
 *   (/nothink after user messages, an empty think block opened), without
 *   its reasoning-content handling; GLM-4.5's special tokens in its id order from
 *   <|endoftext|>, bos [gMASK], eos <|endoftext|>.
 * kimi-k2-tools: modelled on Kimi-K2-Instruct-0905's (moonshotai's
 *   chat_template.jinja; renders the same text but for what is left out): the
 *   tool_declare turn, a message's name in place of its role, calls as
 *   <|tool_calls_section_begin|><|tool_call_begin|>ID<|tool_call_argument_begin|>
 *   ARGS<|tool_call_end|>...<|tool_calls_section_end|> with the calls' own
 *   ids, results as "## Return of ID\n    C" (the template's whitespace kept),
 *   its default system turn (<|im_system|>system<|im_middle|>You are Kimi, an
 *   AI assistant created by Moonshot AI.<|im_end|> after the tools turn when
 *   the first message is not a system one, written by the same lines), without
 *   its image parts; Kimi-K2's special tokens, bos [BOS], eos [EOS]
 *   (<|im_end|> ends a turn). */
#include <stddef.h>
#include <stdint.h>

/* Shared with gen.c. */
typedef struct gen_template {
    const char *name, *text;
    const char *const *special;     /* the vocabulary's special tokens, in id order */
    int n_special, bos, eos;        /* bos/eos: indexes into special */
} gen_template;
const gen_template *moe_gen_template(int64_t i);

#define US "\xe2\x96\x81"                                   /* ▁ */
#define DS(x) "<\xef\xbd\x9c" x "\xef\xbd\x9c>"             /* <｜x｜> */

static const char LLAMA3_TOOLS[] =
    "{%- if messages[0].role == 'system' %}{%- set system_message = messages[0].content | trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{%- if tools %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\nEnvironment: ipython\\n"
    "Cutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n' + system_message + '<|eot_id|>' }}"
    "{%- set first = messages[0].content | trim %}{%- set messages = messages[1:] %}"
    "{{- '<|start_header_id|>user<|end_header_id|>\\n\\nGiven the following functions, please respond with a JSON "
    "for a function call with its proper arguments that best answers the given prompt.\\n\\n' }}"
    "{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}"
    "{{- 'Do not use variables.\\n\\n' }}"
    "{%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}{{- first + '<|eot_id|>' }}"
    "{%- elif system_message %}{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system_message + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}"
    "{%- elif message.tool_calls %}{%- set tc = message.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{\"name\": \"' + tc.name + '\", \"parameters\": ' }}"
    "{%- if tc.arguments is string %}{{- tc.arguments }}{%- else %}{{- tc.arguments | tojson }}{%- endif %}"
    "{{- '}<|eot_id|>' }}"
    "{%- else %}{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

static const char MISTRAL_TOOLS[] =
    "{%- if messages[0].role == 'system' %}{%- set system_message = messages[0].content %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- if system_message is defined %}{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{%- endif %}"
    "{%- set user_messages = loop_messages | selectattr('role', 'equalto', 'user') | list %}"
    "{%- for message in loop_messages %}"
    "{%- if message.role == 'user' %}"
    "{%- if tools and message == user_messages[-1] %}{{- '[AVAILABLE_TOOLS] [' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}"
    "{{- '][/AVAILABLE_TOOLS]' }}{%- endif %}"
    "{{- '[INST]' + message.content + '[/INST]' }}"
    "{%- elif message.tool_calls %}{{- '[TOOL_CALLS] [' }}"
    "{%- for tc in message.tool_calls %}{{- '{\"name\": \"' + tc.function.name + '\", \"arguments\": ' }}"
    "{%- if tc.function.arguments is string %}{{- tc.function.arguments }}{%- else %}{{- tc.function.arguments | tojson }}{%- endif %}"
    "{{- ', \"id\": \"' + tc.id[-9:] + '\"}' }}{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}"
    "{{- ']</s>' }}"
    "{%- elif message.role == 'assistant' %}{{- message.content + '</s>' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '[TOOL_RESULTS] {\"content\": ' + message.content | string + ', \"call_id\": \"' + message.tool_call_id[-9:] + '\"}[/TOOL_RESULTS]' }}"
    "{%- endif %}{%- endfor %}";

static const char DEEPSEEK3_TOOLS[] =
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{- message.content + '\\n\\n' }}"
    "{%- elif message.role == 'user' %}{{- '" DS("User") "' + message.content }}"
    "{%- elif message.role == 'assistant' %}{{- '" DS("Assistant") "' + message.content + '" DS("end" US "of" US "sentence") "' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '" DS("Assistant") "' }}{%- endif %}";

static const char GLM4_TOOLS[] =
    "[gMASK]<sop>"
    "{%- if tools %}{{- '<|system|>\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{{- '\\n' }}{%- endfor %}"
    "{{- '</tools>\\n\\nFor each function call, output the function name and arguments within the following XML format:\\n"
    "<tool_call>{function-name}\\n<arg_key>{arg-key-1}</arg_key>\\n<arg_value>{arg-value-1}</arg_value>\\n"
    "<arg_key>{arg-key-2}</arg_key>\\n<arg_value>{arg-value-2}</arg_value>\\n...\\n</tool_call>' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' or m.role == 'system' %}{{- '<|' + m.role + '|>\\n' + m.content }}"
    "{{- '/nothink' if (m.role == 'user' and enable_thinking is defined and not enable_thinking"
    " and not m.content.endswith('/nothink')) else '' }}"
    "{%- elif m.role == 'assistant' %}{{- '<|assistant|>\\n<think></think>' }}"
    "{%- if m.content and m.content.strip() %}{{- '\\n' + m.content.strip() }}{%- endif %}"
    "{%- for tc in m.tool_calls or [] %}{%- if tc.function %}{%- set tc = tc.function %}{%- endif %}"
    "{{- '\\n<tool_call>' + tc.name + '\\n' }}"
    "{%- for k, v in tc.arguments.items() %}{{- '<arg_key>' + k + '</arg_key>\\n<arg_value>' }}"
    "{%- if v is string %}{{- v }}{%- else %}{{- v | tojson }}{%- endif %}{{- '</arg_value>\\n' }}{%- endfor %}"
    "{{- '</tool_call>' }}{%- endfor %}"
    "{%- elif m.role == 'tool' %}{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|observation|>' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|assistant|>' }}"
    "{{- '\\n<think></think>' if (enable_thinking is defined and not enable_thinking) else '' }}{%- endif %}";

static const char KIMI_K2_TOOLS[] =
    "{%- if tools -%}<|im_system|>tool_declare<|im_middle|>\n  # Tools\n  {{ tools | tojson }}<|im_end|>{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if loop.first and messages[0]['role'] != 'system' -%}"
    "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>{%- endif -%}"
    "{%- set role_name = message.get('name') or message['role'] -%}"
    "{%- if message['role'] == 'user' -%}<|im_user|>{{ role_name }}<|im_middle|>"
    "{%- elif message['role'] == 'assistant' -%}<|im_assistant|>{{ role_name }}<|im_middle|>"
    "{%- else -%}<|im_system|>{{ role_name }}<|im_middle|>{%- endif -%}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') -%}"
    "{%- if message['content'] -%}{{ message['content'] }}{%- endif -%}<|tool_calls_section_begin|>"
    "{%- for tool_call in message['tool_calls'] -%}<|tool_call_begin|>{{ tool_call['id'] }}<|tool_call_argument_begin|>"
    "{%- if tool_call['function']['arguments'] is string -%}{{ tool_call['function']['arguments'] }}"
    "{%- else -%}{{ tool_call['function']['arguments'] | tojson }}{%- endif -%}<|tool_call_end|>"
    "{%- endfor -%}<|tool_calls_section_end|>"
    "{%- elif message['role'] == 'tool' -%}## Return of {{ message.tool_call_id }}\n    {{ message['content'] }}"
    "{%- elif message['content'] is string -%}{{ message['content'] }}"
    "{%- endif -%}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}";

static const char *const SP_LLAMA3[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                        "<|python_tag|>", "<|eom_id|>", "<|eot_id|>"};
static const char *const SP_MISTRAL[] = {"<s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                                         "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[SYSTEM_PROMPT]",
                                         "[/SYSTEM_PROMPT]", "</s>"};
static const char *const SP_DS3[] = {
    DS("begin" US "of" US "sentence"), DS("User"), DS("Assistant"),
    DS("tool" US "calls" US "begin"), DS("tool" US "calls" US "end"), DS("tool" US "call" US "begin"),
    DS("tool" US "call" US "end"), DS("tool" US "sep"), DS("tool" US "outputs" US "begin"),
    DS("tool" US "outputs" US "end"), DS("tool" US "output" US "begin"), DS("tool" US "output" US "end"),
    DS("end" US "of" US "sentence")};
static const char *const SP_GLM4[] = {
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
static const char *const SP_KIMI[] = {
    "[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
    "<|tool_call_end|>"};

#define N(a) (int)(sizeof a / sizeof a[0])
/* indexes 2.. of gen's chat_template choices (0 chatml and 1 qwen3-tools are gen.c's) */
static const gen_template TEMPLATES[] = {
    {"llama3-tools", LLAMA3_TOOLS, SP_LLAMA3, N(SP_LLAMA3), 0, 5},
    {"mistral-tools", MISTRAL_TOOLS, SP_MISTRAL, N(SP_MISTRAL), 0, 10},
    {"deepseek3-tools", DEEPSEEK3_TOOLS, SP_DS3, N(SP_DS3), 0, 12},
    {"glm4-tools", GLM4_TOOLS, SP_GLM4, N(SP_GLM4), 2, 0},
    {"kimi-k2-tools", KIMI_K2_TOOLS, SP_KIMI, N(SP_KIMI), 0, 1},
};

const gen_template *moe_gen_template(int64_t i) {
    return i >= 2 && i - 2 < N(TEMPLATES) ? &TEMPLATES[i - 2] : NULL;
}
