/* chat.h — chat-template rendering over a template string (src/chat.c), so
 * the renderer can be tested without a model. moe_chat_render (public) is a
 * thin wrapper over moe_chat_render_tmpl with the model's template. */
#ifndef MOE_CHAT_H
#define MOE_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include "moefast.h"

/* Known format names, comma-separated ("chatml, laguna, harmony"), for messages. */
const char *moe_chat_formats(void);
/* The format recognised in a tokenizer.chat_template, or NULL. */
const char *moe_chat_detect(const char *tmpl);
/* Renders msgs with `format` or, when format is NULL, the one recognised in
 * tmpl (which may then not be NULL). Same contract as moe_chat_render. */
int moe_chat_render_tmpl(const char *tmpl, const char *format, const moe_chat_msg *msgs, size_t n,
                         bool add_generation_prompt, char **out, char *err, size_t errlen);

#endif
