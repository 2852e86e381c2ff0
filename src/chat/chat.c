/* chat.c: the built-in chat-template renderers (see chat.h). Each renderer writes what
 * the family's reference Jinja template writes for plain text messages; the tests render
 * the real templates with jinja2 and compare. */
#include "chat.h"

#include "../gguf/gguf.h"
#include "../text/text.h"
#include "../token/tok.h"

#include <stdlib.h>
#include <string.h>

static const char *const format_names[CHAT_FORMAT_COUNT] = {
    "raw", "chatml", "llama3", "llama2", "mistral", "gemma", "phi3", "plain",
};

const char *chat_format_name(enum chat_format f)
{
    return (unsigned)f < CHAT_FORMAT_COUNT ? format_names[f] : "unknown";
}

bool chat_format_from_name(const char *name, enum chat_format *out)
{
    for (int i = 0; i < CHAT_FORMAT_COUNT; i++)
        if (strcmp(name, format_names[i]) == 0) {
            *out = (enum chat_format)i;
            return true;
        }
    return false;
}

static bool contains(const char *s, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    if (n > len)
        return false;
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(s + i, needle, n) == 0)
            return true;
    return false;
}

static void template_init(struct chat_template *t, enum chat_format f)
{
    memset(t, 0, sizeof *t);
    t->format = f;
    t->bos = "";
    t->eos = "";
}

bool chat_template_detect(const char *src, size_t len, struct chat_template *out)
{
    template_init(out, CHAT_FORMAT_RAW);
    if (!src || !len)
        return false;
    if (contains(src, len, "<|im_start|>")) {
        out->format = CHAT_FORMAT_CHATML;
        out->default_system = contains(src, len, "You are Qwen, created by Alibaba Cloud");
        out->open_think = contains(src, len, "'<|im_start|>assistant\\n<think>\\n'");
    } else if (contains(src, len, "<|start_header_id|>")) {
        out->format = CHAT_FORMAT_LLAMA3;
        out->llama3_date_header = contains(src, len, "Cutting Knowledge Date");
    } else if (contains(src, len, "<start_of_turn>")) {
        out->format = CHAT_FORMAT_GEMMA;
    } else if (contains(src, len, "<|assistant|>") && contains(src, len, "<|end|>")) {
        out->format = CHAT_FORMAT_PHI3;
    } else if (contains(src, len, "[INST]")) {
        out->format = contains(src, len, "<<SYS>>") ? CHAT_FORMAT_LLAMA2 : CHAT_FORMAT_MISTRAL;
        out->mistral_spaces = contains(src, len, "'[INST] '") || contains(src, len, "\"[INST] \"");
    }
    return out->format != CHAT_FORMAT_RAW;
}

bool chat_template_from_vocab(bool (*has_token)(const char *text, void *ctx), void *ctx,
                              struct chat_template *out)
{
    template_init(out, CHAT_FORMAT_RAW);
    if (has_token("<|im_start|>", ctx) && has_token("<|im_end|>", ctx))
        out->format = CHAT_FORMAT_CHATML;
    else if (has_token("<|start_header_id|>", ctx) && has_token("<|eot_id|>", ctx))
        out->format = CHAT_FORMAT_LLAMA3;
    else if (has_token("<start_of_turn>", ctx) && has_token("<end_of_turn>", ctx))
        out->format = CHAT_FORMAT_GEMMA;
    else if (has_token("<|user|>", ctx) && has_token("<|end|>", ctx) && has_token("<|assistant|>", ctx))
        out->format = CHAT_FORMAT_PHI3;
    return out->format != CHAT_FORMAT_RAW;
}

/* ================================================================ output buffer */

static bool put(struct chat_prompt *p, const char *s, size_t n, bool special)
{
    if (n == 0)
        return true;
    if (p->len + n + 1 > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + n + 1) {
            if (cap > SIZE_MAX / 2)
                return false;
            cap *= 2;
        }
        char *t = realloc(p->text, cap);
        if (!t)
            return false;
        p->text = t;
        p->cap = cap;
    }
    /* Merge with the previous segment when the kind is the same. */
    if (p->n_segs && p->segs[p->n_segs - 1].special == special) {
        p->segs[p->n_segs - 1].len += n;
    } else {
        if (p->n_segs == p->segs_cap) {
            size_t cap = p->segs_cap ? p->segs_cap * 2 : 16;
            struct chat_segment *s2 = realloc(p->segs, cap * sizeof *s2);
            if (!s2)
                return false;
            p->segs = s2;
            p->segs_cap = cap;
        }
        p->segs[p->n_segs++] = (struct chat_segment){p->len, n, special};
    }
    memcpy(p->text + p->len, s, n);
    p->len += n;
    p->text[p->len] = 0;
    return true;
}

static bool mark(struct chat_prompt *p, const char *s)
{
    return put(p, s, strlen(s), true);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Message content, optionally without leading and/or trailing whitespace (Jinja's
 * trim / Python's strip). */
static bool text2(struct chat_prompt *p, const char *s, bool lead, bool trail)
{
    size_t n = strlen(s);
    while (lead && n && is_space(*s)) {
        s++;
        n--;
    }
    while (trail && n && is_space(s[n - 1]))
        n--;
    return put(p, s, n, false);
}

static bool text(struct chat_prompt *p, const char *s, bool strip)
{
    return text2(p, s, strip, strip);
}

void chat_prompt_free(struct chat_prompt *p)
{
    free(p->text);
    free(p->segs);
    memset(p, 0, sizeof *p);
}

/* ================================================================ renderers */

#define OK(x)                                                                                      \
    do {                                                                                           \
        if (!(x))                                                                                  \
            goto nomem;                                                                            \
    } while (0)

static bool is_role(const struct chat_message *m, const char *r)
{
    return strcmp(m->role, r) == 0;
}

enum kn_status chat_render(const struct chat_template *t, const struct chat_message *msgs,
                           size_t n_msgs, bool add_generation_prompt, struct chat_prompt *out,
                           struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    /* One optional system message, first; then user/assistant turns. The plain format
     * writes every turn with its role, so it takes system and tool turns anywhere. */
    const char *system = NULL;
    size_t first = 0;
    if (n_msgs && is_role(&msgs[0], "system") && t->format != CHAT_FORMAT_PLAIN) {
        system = msgs[0].content;
        first = 1;
    }
    for (size_t i = first; i < n_msgs; i++) {
        if (t->format == CHAT_FORMAT_PLAIN && (is_role(&msgs[i], "system") || is_role(&msgs[i], "tool")))
            continue;
        if (!is_role(&msgs[i], "user") && !is_role(&msgs[i], "assistant"))
            return kn_fail(err, KN_E_ARG, "message %zu has role '%s'; the %s template takes one leading "
                           "system message, then user and assistant messages", i, msgs[i].role,
                           chat_format_name(t->format));
    }
    /* text is never NULL, even for an empty render. */
    OK(out->text = calloc(1, 16));
    out->cap = 16;

    switch (t->format) {
    case CHAT_FORMAT_RAW:
        if (system && *system) {
            OK(text(out, system, false));
            OK(text(out, "\n\n", false));
        }
        for (size_t i = first; i < n_msgs; i++)
            OK(text(out, msgs[i].content, false));
        break;

    case CHAT_FORMAT_PLAIN:
        /* "Role: text\n" per turn (text stripped, so an answer generated after
         * "Assistant:" with its leading space renders the same as it was prompted), then
         * "Assistant:" for the model to go on from. */
        for (size_t i = 0; i < n_msgs; i++) {
            OK(mark(out, is_role(&msgs[i], "system") ? "System:" : is_role(&msgs[i], "user") ? "User:"
                         : is_role(&msgs[i], "tool") ? "Tool:" : "Assistant:"));
            const char *c = msgs[i].content;
            while (*c && is_space(*c))
                c++;
            if (*c) { /* the space is the text's: it tokenizes with the first word, as
                       * the model wrote it after "Assistant:" (Warm Start reuses it) */
                OK(put(out, " ", 1, false));
                OK(text(out, c, true));
            }
            OK(mark(out, "\n"));
        }
        if (add_generation_prompt)
            OK(mark(out, "Assistant:"));
        break;

    case CHAT_FORMAT_CHATML:
        if (system || t->default_system) {
            OK(mark(out, "<|im_start|>system\n"));
            OK(text(out, system ? system : "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", false));
            OK(mark(out, "<|im_end|>\n"));
        }
        for (size_t i = first; i < n_msgs; i++) {
            OK(mark(out, "<|im_start|>"));
            OK(mark(out, msgs[i].role));
            OK(mark(out, "\n"));
            OK(text(out, msgs[i].content, false));
            OK(mark(out, "<|im_end|>\n"));
        }
        if (add_generation_prompt)
            OK(mark(out, t->open_think ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n"));
        break;

    case CHAT_FORMAT_LLAMA3:
        if (t->llama3_date_header) {
            /* Llama 3.1+ templates always open with a system turn carrying dates; the
             * date is the templates' own fixed fallback, so the prompt never depends
             * on the day it runs. */
            OK(mark(out, "<|start_header_id|>system<|end_header_id|>\n\n"));
            OK(mark(out, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"));
            if (system)
                OK(text(out, system, true));
            OK(mark(out, "<|eot_id|>"));
        } else if (system) {
            OK(mark(out, "<|start_header_id|>system<|end_header_id|>\n\n"));
            OK(text(out, system, true));
            OK(mark(out, "<|eot_id|>"));
        }
        for (size_t i = first; i < n_msgs; i++) {
            OK(mark(out, "<|start_header_id|>"));
            OK(mark(out, msgs[i].role));
            OK(mark(out, "<|end_header_id|>\n\n"));
            OK(text(out, msgs[i].content, true));
            OK(mark(out, "<|eot_id|>"));
        }
        if (add_generation_prompt)
            OK(mark(out, "<|start_header_id|>assistant<|end_header_id|>\n\n"));
        break;

    case CHAT_FORMAT_LLAMA2:
    case CHAT_FORMAT_MISTRAL: {
        bool l2 = t->format == CHAT_FORMAT_LLAMA2;
        bool sp = l2 || t->mistral_spaces;
        /* Index of the last user message: Mistral puts the system text there. */
        size_t last_user = n_msgs;
        for (size_t i = first; i < n_msgs; i++)
            if (is_role(&msgs[i], "user"))
                last_user = i;
        bool first_user = true;
        for (size_t i = first; i < n_msgs; i++) {
            if (is_role(&msgs[i], "user")) {
                /* Llama 2 opens every turn after the first with BOS; Mistral does not. */
                if (!first_user && l2)
                    OK(mark(out, t->bos));
                OK(mark(out, sp ? "[INST] " : "[INST]"));
                bool sys_here = false;
                if (l2 && first_user && system) {
                    /* Llama 2 strips the whole "<<SYS>>...<</SYS>>\n\n" + content, so
                     * the content keeps its leading whitespace. */
                    OK(mark(out, "<<SYS>>\n"));
                    OK(text(out, system, false));
                    OK(mark(out, "\n<</SYS>>\n\n"));
                    sys_here = true;
                } else if (!l2 && i == last_user && system) {
                    OK(text(out, system, false));
                    OK(mark(out, "\n\n"));
                }
                OK(text2(out, msgs[i].content, l2 && !sys_here, l2));
                OK(mark(out, sp ? " [/INST]" : "[/INST]"));
                first_user = false;
            } else {
                if (l2)
                    OK(mark(out, " "));
                OK(text(out, msgs[i].content, l2));
                if (l2)
                    OK(mark(out, " "));
                OK(mark(out, t->eos));
            }
        }
        break;
    }

    case CHAT_FORMAT_GEMMA: {
        bool first_turn = true;
        for (size_t i = first; i < n_msgs; i++) {
            OK(mark(out, "<start_of_turn>"));
            OK(mark(out, is_role(&msgs[i], "assistant") ? "model" : msgs[i].role));
            OK(mark(out, "\n"));
            if (first_turn && system) {
                /* Gemma 3's template prefixes the first user turn with the system text. */
                OK(text(out, system, false));
                OK(text(out, "\n\n", false));
            }
            OK(text(out, msgs[i].content, true));
            OK(mark(out, "<end_of_turn>\n"));
            first_turn = false;
        }
        if (add_generation_prompt)
            OK(mark(out, "<start_of_turn>model\n"));
        break;
    }

    case CHAT_FORMAT_PHI3:
        if (system && *system) {
            OK(mark(out, "<|system|>\n"));
            OK(text(out, system, false));
            OK(mark(out, "<|end|>\n"));
        }
        for (size_t i = first; i < n_msgs; i++) {
            OK(mark(out, is_role(&msgs[i], "user") ? "<|user|>\n" : "<|assistant|>\n"));
            OK(text(out, msgs[i].content, false));
            OK(mark(out, "<|end|>\n"));
        }
        if (add_generation_prompt)
            OK(mark(out, "<|assistant|>\n"));
        break;

    default:
        chat_prompt_free(out);
        return kn_fail(err, KN_E_INTERNAL, "unknown chat format %d", (int)t->format);
    }
    return KN_OK;

nomem:
    chat_prompt_free(out);
    return kn_fail(err, KN_E_NOMEM, "out of memory rendering the chat prompt");
}

/* ================================================================ choosing for a model */

static bool vocab_has(const char *text, void *ctx)
{
    return tok_find((const struct tok *)ctx, text, strlen(text)) != TOK_NULL;
}

/* The text of special token id as a NUL-terminated copy in buf ("" if none). */
static const char *special_text(const struct tok *t, int32_t id, char *buf, size_t cap)
{
    size_t len = 0;
    const char *s = id == TOK_NULL ? NULL : tok_text(t, id, &len);
    if (!s || len >= cap)
        len = 0;
    if (len)
        memcpy(buf, s, len);
    buf[len] = 0;
    return buf;
}

enum chat_choice chat_template_for_model(struct chat_template *tmpl, const enum chat_format *forced,
                                         const struct gguf_file *g, const struct tok *tk,
                                         char *bos_buf, char *eos_buf, size_t cap)
{
    enum chat_choice how;
    struct gguf_str src = {0};
    memset(tmpl, 0, sizeof *tmpl);
    tmpl->format = CHAT_FORMAT_RAW;
    if (forced) {
        tmpl->format = *forced;
        how = CHAT_CHOICE_FORCED;
    } else if (!gguf_get_str(g, "tokenizer.chat_template", &src)) {
        how = CHAT_CHOICE_NONE;
    } else if (chat_template_detect(src.data, src.len, tmpl)) {
        how = CHAT_CHOICE_TEMPLATE;
    } else if (chat_template_from_vocab(vocab_has, (void *)tk, tmpl)) {
        how = CHAT_CHOICE_VOCAB;
    } else {
        memset(tmpl, 0, sizeof *tmpl);
        tmpl->format = CHAT_FORMAT_RAW;
        how = CHAT_CHOICE_UNKNOWN;
    }
    const struct tok_special *sp = tok_specials(tk);
    tmpl->bos = special_text(tk, sp->bos, bos_buf, cap);
    tmpl->eos = special_text(tk, sp->eos, eos_buf, cap);
    return how;
}

/* ---------------------------------------------------------------- reasoning markers */

static const char *const think_markers[][2] = {
    {"<think>", "</think>"},                         /* DeepSeek-R1, Qwen3, QwQ */
    {"<|START_THINKING|>", "<|END_THINKING|>"},      /* Command R7B */
    {"[THINK]", "[/THINK]"},                         /* Magistral */
    {"<seed:think>", "</seed:think>"},               /* Seed-OSS */
};

bool chat_think_markers(const struct tok *tk, const char **open, const char **close)
{
    /* gpt-oss's harmony vocabulary: the split by message headers (text.h) */
    if (tok_find(tk, "<|channel|>", 11) >= 0 && tok_find(tk, "<|message|>", 11) >= 0) {
        *open = TEXT_HARMONY_OPEN;
        *close = TEXT_HARMONY_CLOSE;
        return true;
    }
    for (size_t i = 0; i < sizeof think_markers / sizeof think_markers[0]; i++) {
        const char *o = think_markers[i][0], *c = think_markers[i][1];
        if (tok_find(tk, o, strlen(o)) >= 0 && tok_find(tk, c, strlen(c)) >= 0) {
            *open = o;
            *close = c;
            return true;
        }
    }
    *open = think_markers[0][0];
    *close = think_markers[0][1];
    return false;
}

bool chat_prompt_opens_think(const char *text, size_t len, const char *open)
{
    size_t ol = strlen(open);
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
        len--;
    return len >= ol && memcmp(text + len - ol, open, ol) == 0;
}
