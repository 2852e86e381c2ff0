/* test_model_chat.c: the built-in chat-template renderers against the real templates.
 * The expected strings were produced by rendering each Jinja template with jinja2 (the
 * engine Hugging Face uses; trim_blocks and lstrip_blocks on, bos_token stripped from the
 * front because Kinetic's tokenizer adds BOS) for three conversations; tests/py renders
 * them live as well. */
#include "check.h"

#include "base/base.h"
#include "chat/chat.h"
#include "gguf/gguf.h"
#include "token/tok.h"

#include <stdio.h>

#include <stdlib.h>
#include <string.h>

struct expect {
    const char *file;  /* under tests/data: templates/X.jinja or tokenizers/... */
    const char *conv;  /* single, system, multi */
    const char *text;
};

static const struct expect cases[] = {
    {"templates/Qwen-Qwen2.5-7B-Instruct.jinja", "single", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"},
    {"templates/Qwen-Qwen2.5-7B-Instruct.jinja", "system", "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"templates/Qwen-Qwen2.5-7B-Instruct.jinja", "multi", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\nB<|im_end|>\n<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n"},
    {"templates/Qwen-Qwen3-0.6B.jinja", "single", "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"},
    {"templates/Qwen-Qwen3-0.6B.jinja", "system", "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"templates/Qwen-Qwen3-0.6B.jinja", "multi", "<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\nB<|im_end|>\n<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n"},
    {"templates/meta-llama-Llama-3.1-8B-Instruct.jinja", "single", "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"templates/meta-llama-Llama-3.1-8B-Instruct.jinja", "system", "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"templates/meta-llama-Llama-3.1-8B-Instruct.jinja", "multi", "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nB<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nC<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"tokenizers/llama3/tokenizer_config.json", "single", "<|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"tokenizers/llama3/tokenizer_config.json", "system", "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"tokenizers/llama3/tokenizer_config.json", "multi", "<|start_header_id|>user<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nB<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nC<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"tokenizers/gemma3/tokenizer_config.json", "single", "<start_of_turn>user\nHello there<end_of_turn>\n<start_of_turn>model\n"},
    {"tokenizers/gemma3/tokenizer_config.json", "system", "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\n"},
    {"tokenizers/gemma3/tokenizer_config.json", "multi", "<start_of_turn>user\nA<end_of_turn>\n<start_of_turn>model\nB<end_of_turn>\n<start_of_turn>user\nC<end_of_turn>\n<start_of_turn>model\n"},
    {"templates/microsoft-Phi-3.5-mini-instruct.jinja", "single", "<|user|>\nHello there<|end|>\n<|assistant|>\n"},
    {"templates/microsoft-Phi-3.5-mini-instruct.jinja", "system", "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"},
    {"templates/microsoft-Phi-3.5-mini-instruct.jinja", "multi", "<|user|>\nA<|end|>\n<|assistant|>\nB<|end|>\n<|user|>\nC<|end|>\n<|assistant|>\n"},
    {"templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", "single", "[INST]Hello there[/INST]"},
    {"templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", "system", "[INST]You are terse.\n\nHi[/INST]"},
    {"templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", "multi", "[INST]A[/INST]B</s>[INST]C[/INST]"},
};

static const struct chat_message conv_single[] = {{"user", "Hello there"}};
static const struct chat_message conv_system[] = {{"system", "You are terse."}, {"user", "Hi"}};
static const struct chat_message conv_multi[] = {{"user", "A"}, {"assistant", "B"}, {"user", "C"}};

static void test_against_jinja(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", check_data_dir(), cases[i].file);
        char *src = NULL;
        size_t len = 0;
        struct kn_err err = {0};
        CHECKF(kn_read_file(path, 1 << 24, &src, &len, &err) == KN_OK, "%s", err.msg);
        if (!src)
            continue;
        struct chat_template t;
        CHECKF(chat_template_detect(src, len, &t), "%s not recognised", cases[i].file);
        t.bos = "<s>";
        t.eos = "</s>";
        const struct chat_message *msgs = conv_single;
        size_t n = 1;
        if (strcmp(cases[i].conv, "system") == 0) {
            msgs = conv_system;
            n = 2;
        } else if (strcmp(cases[i].conv, "multi") == 0) {
            msgs = conv_multi;
            n = 3;
        }
        struct chat_prompt p;
        CHECKF(chat_render(&t, msgs, n, true, &p, &err) == KN_OK, "%s", err.msg);
        CHECKF(p.text && strcmp(p.text, cases[i].text) == 0, "%s %s (%s):\n got  [%s]\n want [%s]",
               cases[i].file, cases[i].conv, chat_format_name(t.format), p.text ? p.text : "(null)",
               cases[i].text);
        /* The segments tile the text. */
        size_t off = 0;
        for (size_t s = 0; s < p.n_segs; s++) {
            CHECK(p.segs[s].off == off);
            off += p.segs[s].len;
        }
        CHECK(off == p.len);
        chat_prompt_free(&p);
        free(src);
    }
}

/* Message content never becomes template text, even when it looks like a marker. */
static void test_segments(void)
{
    struct chat_template t;
    CHECK(chat_template_detect("{{ '<|im_start|>' }}", 19, &t));
    CHECK(t.format == CHAT_FORMAT_CHATML);
    struct chat_message m[] = {{"user", "x<|im_end|>y"}};
    struct chat_prompt p;
    struct kn_err err = {0};
    CHECK(chat_render(&t, m, 1, true, &p, &err) == KN_OK);
    CHECK_STR(p.text, "<|im_start|>user\nx<|im_end|>y<|im_end|>\n<|im_start|>assistant\n");
    CHECK_EQ_INT(p.n_segs, 3);
    if (p.n_segs == 3) {
        CHECK(p.segs[0].special && !p.segs[1].special && p.segs[2].special);
        CHECK_EQ_INT(p.segs[1].len, strlen("x<|im_end|>y"));
    }
    chat_prompt_free(&p);
}

static void test_llama2_and_raw(void)
{
    struct chat_template t;
    const char *src = "{{ bos_token + '[INST] ' + '<<SYS>>\\n' }}";
    CHECK(chat_template_detect(src, strlen(src), &t));
    CHECK(t.format == CHAT_FORMAT_LLAMA2);
    t.bos = "<s>";
    t.eos = "</s>";
    struct chat_message m[] = {{"system", "Sys"}, {"user", " A "}, {"assistant", "B"}, {"user", "C"}};
    struct chat_prompt p;
    struct kn_err err = {0};
    CHECK(chat_render(&t, m, 4, true, &p, &err) == KN_OK);
    /* Meta's llama-2-chat format: BOS (added by the tokenizer) [INST] <<SYS>>...; the
     * template strips system block + content as one string. */
    CHECK_STR(p.text, "[INST] <<SYS>>\nSys\n<</SYS>>\n\n A [/INST] B </s><s>[INST] C [/INST]");
    chat_prompt_free(&p);

    memset(&t, 0, sizeof t);
    t.format = CHAT_FORMAT_RAW;
    CHECK(chat_render(&t, m, 2, true, &p, &err) == KN_OK);
    CHECK_STR(p.text, "Sys\n\n A ");
    chat_prompt_free(&p);

    CHECK(!chat_template_detect("{{ messages }}", 14, &t));
    CHECK(t.format == CHAT_FORMAT_RAW);
    struct chat_message bad[] = {{"user", "a"}, {"system", "b"}};
    CHECK(chat_render(&t, bad, 2, true, &p, &err) == KN_E_ARG);
}

static bool has_gemma(const char *text, void *ctx)
{
    (void)ctx;
    return strcmp(text, "<start_of_turn>") == 0 || strcmp(text, "<end_of_turn>") == 0;
}

static bool has_none(const char *text, void *ctx)
{
    (void)text;
    (void)ctx;
    return false;
}

static void test_vocab_fallback(void)
{
    struct chat_template t;
    CHECK(chat_template_from_vocab(has_gemma, NULL, &t));
    CHECK(t.format == CHAT_FORMAT_GEMMA);
    CHECK(!chat_template_from_vocab(has_none, NULL, &t));
    CHECK(t.format == CHAT_FORMAT_RAW);
    enum chat_format f;
    CHECK(chat_format_from_name("phi3", &f) && f == CHAT_FORMAT_PHI3);
    CHECK(!chat_format_from_name("nope", &f));
}

/* The reasoning markers run, chat and serve share. */
static void test_think_markers(void)
{
    CHECK(chat_prompt_opens_think("<|im_start|>assistant\n<think>\n", 30, "<think>"));
    CHECK(chat_prompt_opens_think("<think>", 7, "<think>"));
    CHECK(chat_prompt_opens_think("x [THINK] \n\n", 12, "[THINK]"));
    CHECK(!chat_prompt_opens_think("<think>x", 8, "<think>"));
    CHECK(!chat_prompt_opens_think("</think>\n", 9, "<think>"));
    CHECK(!chat_prompt_opens_think("think>", 6, "<think>"));
    CHECK(!chat_prompt_opens_think("", 0, "<think>"));
    CHECK(!chat_prompt_opens_think("  \n", 3, "<think>"));

    /* A vocabulary without reasoning tokens: no family pair, the conventional one. */
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf", check_data_dir());
    struct gguf_file *g = NULL;
    struct tok *tk = NULL;
    struct kn_err err = {0};
    CHECKF(gguf_open(&g, path, &err) == KN_OK, "%s", err.msg);
    if (!g)
        return;
    CHECKF(tok_load(&tk, g, &err) == KN_OK, "%s", err.msg);
    gguf_close(g);
    if (!tk)
        return;
    const char *o = NULL, *c = NULL;
    CHECK(!chat_think_markers(tk, &o, &c));
    CHECK_STR(o, "<think>");
    CHECK_STR(c, "</think>");
    tok_free(tk);
}

int main(void)
{
    test_against_jinja();
    test_segments();
    test_llama2_and_raw();
    test_vocab_fallback();
    test_think_markers();
    CHECK_DONE();
}
