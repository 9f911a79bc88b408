/* serve_reason.c — a thinking model's reasoning returned apart from its
 * answer (docs/SERVE.md, "Reasoning"): `<think>R</think>C` (Qwen3,
 * DeepSeek-R1, GLM-4.5) becomes reasoning_content R and content C, as
 * llama.cpp's server (--reasoning-format deepseek) and DeepSeek's API give
 * them.
 *
 * Only the presentation changes: the generated text (and so the tokens) is
 * the same whatever the format; the split is a function of the text so far,
 * so a stream's pieces, joined, are exactly the non-streamed answer's: a tail
 * that may still become a marker, and whitespace that may still be trimmed,
 * are held back until the text decides them. */
#include <string.h>

#include "serve.h"

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

static bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Whether t[0..n) is a prefix of lit (n may be 0). */
static bool prefix_of(const char *t, size_t n, const char *lit) {
    return n <= strlen(lit) && !memcmp(t, lit, n);
}

void reason_split(const char *t, size_t n, bool open_at_start, bool final, reason_span *o) {
    size_t p = 0;
    *o = (reason_span){0};
    if (!open_at_start) {
        while (p < n && space(t[p])) p++;
        if (!final && prefix_of(t + p, n - p, OPEN) && n - p < sizeof OPEN - 1) {
            o->held = true;                        /* may still open a think block */
            return;
        }
        if (n - p < sizeof OPEN - 1 || memcmp(t + p, OPEN, sizeof OPEN - 1)) {
            o->c_to = n;                           /* no reasoning: all of it is content */
            return;
        }
        p += sizeof OPEN - 1;
    }
    o->has = true;
    while (p < n && space(t[p])) p++;
    o->r_from = o->r_to = p;
    const char *close = memmem(t + p, n - p, CLOSE, sizeof CLOSE - 1);
    size_t end = close ? (size_t)(close - t) : n;
    if (!close && !final)                          /* a tail that may become </think> */
        for (size_t h = sizeof CLOSE - 2; h > 0; h--)
            if (h <= n - p && !memcmp(t + n - h, CLOSE, h)) { end = n - h; break; }
    while (end > p && space(t[end - 1])) end--;    /* trailing space: trimmed, or held until text follows */
    o->r_to = end;
    o->open = !close;
    if (!close) { o->c_from = o->c_to = n; return; }
    o->close_end = (size_t)(close - t) + sizeof CLOSE - 1;
    size_t c = o->close_end;
    while (c < n && space(t[c])) c++;
    o->c_from = c;
    o->c_to = n;
}

/* gpt-oss (harmony): the answer's text has its control tokens spelled (the
 * engine writes them for harmony chats), so the channels show:
 * <|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>final<|message|>C.
 * R is the analysis message's body as written (not trimmed), C what follows
 * the final channel's header; the headers between are neither. An answer
 * that does not open a channel is all content. */
static const char H_ANALYSIS[] = "<|channel|>analysis<|message|>", H_FINAL[] = "<|channel|>final<|message|>", H_END[] = "<|end|>";

static void harmony_split(const char *t, size_t n, bool final, reason_span *o) {
    const size_t la = sizeof H_ANALYSIS - 1, lf = sizeof H_FINAL - 1, le = sizeof H_END - 1;
    *o = (reason_span){0};
    if (!final && ((n < la && prefix_of(t, n, H_ANALYSIS)) || (n < lf && prefix_of(t, n, H_FINAL)))) { o->held = true; return; }
    size_t from = 0;
    if (n >= la && !memcmp(t, H_ANALYSIS, la)) {
        o->has = true;
        o->r_from = la;
        const char *end = memmem(t + la, n - la, H_END, le);
        size_t e = end ? (size_t)(end - t) : n;
        if (!end && !final)                        /* a tail that may become <|end|> */
            for (size_t h = le - 1; h > 0; h--)
                if (h <= n - la && !memcmp(t + n - h, H_END, h)) { e = n - h; break; }
        o->r_to = e;
        o->open = !end;
        o->c_from = o->c_to = n;
        if (!end) return;
        o->close_end = e + le;
        const char *f = memmem(t + o->close_end, n - o->close_end, H_FINAL, lf);
        if (!f) return;                            /* a header (or a call's) so far: not content */
        from = (size_t)(f - t) + lf;
    } else if (n >= lf && !memcmp(t, H_FINAL, lf))
        from = lf;
    o->c_from = from;
    o->c_to = n;
}

void reason_split_req(const srv_req *r, const char *t, size_t n, bool final, reason_span *o) {
    if (r->harmony) harmony_split(t, n, final, o);
    else reason_split(t, n, r->think_open, final, o);
}

bool reason_harmony(const srv *s) {
    const char *f = s->chat_format, *t = moe_model_chat_template(s->m);
    if (f) return !strcmp(f, "harmony");
    /* as chat.c recognises it: the earlier families' markers first */
    return t && !strstr(t, "<|im_start|>") && !strstr(t, "</assistant>") && !strstr(t, "[gMASK]<sop>") &&
           !strstr(t, "<\xef\xbd\x9cUser\xef\xbd\x9c>") && strstr(t, "<|start|>") && strstr(t, "<|message|>");
}

bool reason_prompt_open(const char *prompt) {
    size_t n = strlen(prompt);
    while (n > 0 && space(prompt[n - 1])) n--;
    return n >= sizeof OPEN - 1 && !memcmp(prompt + n - (sizeof OPEN - 1), OPEN, sizeof OPEN - 1);
}

bool reason_qwen3(const srv *s) {
    const char *f = s->chat_format, *t = moe_model_chat_template(s->m);
    if (f) return !strcmp(f, "qwen3");
    return t && strstr(t, "<|im_start|>") && strstr(t, "</think>");
}

bool reason_glm45(const srv *s) {
    const char *f = s->chat_format, *t = moe_model_chat_template(s->m);
    if (f) return !strcmp(f, "glm45");
    return t && strstr(t, "[gMASK]<sop>") && strstr(t, "<arg_key>");
}

bool reason_history_folds(const srv *s) { return reason_qwen3(s) || reason_glm45(s); }

const char *reason_visible(const char *content) {
    const char *last = NULL;
    for (const char *p = content; (p = strstr(p, CLOSE)); p += sizeof CLOSE - 1) last = p;
    if (!last) return content;
    for (content = last + sizeof CLOSE - 1; *content == '\n'; content++) {}
    return content;
}
