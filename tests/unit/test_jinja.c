/* test_jinja.c: the Jinja engine's API: rendering, error kinds with line and column,
 * raise_exception messages, limits, the injected clock, the chat context builder and
 * template selection from tokenizer_config.json. Byte-exactness against jinja2 itself is
 * checked by tests/py/test_jinja_hf.py and test_jinja_features.py. */
#include "check.h"
#include "jinja/jinja.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Renders src with a JSON context; returns the output (malloc'd) or NULL with diag set. */
static char *render(const char *src, const char *ctx_json, const struct jinja_options *opts,
                    struct jinja_diag *diag, enum kn_status *st_out)
{
    struct kn_err err = {0};
    struct jinja_template *t = NULL;
    struct json_value *ctx = NULL;
    enum kn_status st = jinja_parse(&t, src, strlen(src), opts ? &opts->limits : NULL, diag, &err);
    char *out = NULL;
    if (!st && ctx_json)
        st = json_parse(ctx_json, strlen(ctx_json), NULL, &ctx, &err);
    if (!st)
        st = jinja_render(t, ctx, opts, &out, NULL, diag, &err);
    if (st_out)
        *st_out = st;
    if (st && st != KN_E_LIMIT && st != KN_E_NOMEM)
        CHECKF(strstr(err.msg, "line") != NULL, "error without a line: %s", err.msg);
    jinja_free(t);
    json_free(ctx);
    return out;
}

static void expect(const char *src, const char *ctx, const char *want)
{
    struct jinja_diag d;
    char *got = render(src, ctx, NULL, &d, NULL);
    CHECKF(got && strcmp(got, want) == 0, "%s: got \"%s\" want \"%s\" (%s)", src,
           got ? got : "(error)", want, got ? "" : d.message);
    free(got);
}

static void expect_error(const char *src, const char *ctx, enum jinja_error_kind kind, int line,
                         int col, const char *msg_part)
{
    struct jinja_diag d;
    enum kn_status st;
    char *got = render(src, ctx, NULL, &d, &st);
    CHECKF(!got, "%s: rendered \"%s\", expected an error", src, got ? got : "");
    free(got);
    CHECKF(d.kind == kind, "%s: error kind %d, want %d (%s)", src, d.kind, kind, d.message);
    if (line)
        CHECKF(d.line == line && d.column == col, "%s: at %d:%d, want %d:%d", src, d.line,
               d.column, line, col);
    if (msg_part)
        CHECKF(strstr(d.message, msg_part) != NULL, "%s: message \"%s\" lacks \"%s\"", src,
               d.message, msg_part);
}

static void test_basics(void)
{
    expect("Hello {{ name }}!", "{\"name\": \"W\\u00f6rld\"}", "Hello W\xc3\xb6rld!");
    expect("{% for m in messages %}{{ m.role }}:{{ m['content'] }};{% endfor %}",
           "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}",
           "user:hi;assistant:yo;");
    expect("{{ x }}|{{ 1.0 }}|{{ 7 / 2 }}|{{ [1, 'a', none] }}", "{\"x\": 1e2}", "100.0|1.0|3.5|[1, 'a', None]");
    expect("  {% if true %}\n  x\n  {% endif %}\n", NULL, "  x\n");
    expect("{{ v | tojson }}", "{\"v\": {\"a\": [1, 2.5, null, true, \"\\u00e9\\n\"]}}",
           "{\"a\": [1, 2.5, null, true, \"\xc3\xa9\\n\"]}");
    expect("", NULL, "");
}

static void test_errors(void)
{
    /* syntax errors name the line and column of the offending token */
    expect_error("line1\n  {{ 1 + }}", NULL, JINJA_ERR_SYNTAX, 2, 10, "unexpected");
    expect_error("{% if x %}\nno end", NULL, JINJA_ERR_SYNTAX, 2, 7, "endif");
    expect_error("a\nb {{ x | nosuch }}", NULL, JINJA_ERR_SYNTAX, 2, 10, "nosuch");
    expect_error("{# open", NULL, JINJA_ERR_SYNTAX, 1, 1, "comment");
    expect_error("ok {{ \"\xe3\" }}", NULL, JINJA_ERR_SYNTAX, 1, 8, "UTF-8");
    /* raise_exception: the message is exactly the template's */
    expect_error("{{ 'x' }}\n  {{ raise_exception('Roles must alternate ' ~ 2) }}", NULL,
                 JINJA_ERR_RAISED, 2, 6, "Roles must alternate 2");
    struct jinja_diag d;
    char *got = render("{{ raise_exception('Only user and assistant roles are supported!') }}",
                       NULL, NULL, &d, NULL);
    CHECK(!got);
    CHECK_STR(d.message, "Only user and assistant roles are supported!");
    /* undefined: attribute of undefined fails, printing undefined does not */
    expect_error("{{ x.y }}", NULL, JINJA_ERR_UNDEFINED, 1, 5, "'x' is undefined");
    expect_error("{{ d.a.b }}", "{\"d\": {}}", JINJA_ERR_UNDEFINED, 1, 7, "no attribute 'a'");
    expect("[{{ x }}]", NULL, "[]");
    /* the immutable sandbox refuses mutating methods */
    expect_error("{% set _ = l.append(1) %}", "{\"l\": []}", JINJA_ERR_SECURITY, 1, 13, "unsafe");
    expect_error("{{ 'a' + 1 }}", NULL, JINJA_ERR_TYPE, 1, 8, "concatenate");
    expect_error("{{ 2 ** 64 }}", NULL, JINJA_ERR_UNSUPPORTED, 0, 0, "64 bits");
    /* printing a generator or a method would show an address: refused, not guessed */
    expect_error("{{ l | map('upper') }}", "{\"l\": []}", JINJA_ERR_TYPE, 0, 0, "generator");
    expect_error("{{ l | map('upper') | trim }}", "{\"l\": [\"a\"]}", JINJA_ERR_TYPE, 0, 0, "generator");
    expect_error("{{ 'x' ~ s.upper }}", "{\"s\": \"a\"}", JINJA_ERR_TYPE, 0, 0, "address");
}

static void test_limits(void)
{
    struct jinja_options o = {0};
    struct jinja_diag d;
    enum kn_status st;
    o.limits.max_iterations = 100;
    char *got = render("{% for i in range(50) %}{% for j in range(50) %}{% endfor %}{% endfor %}",
                       NULL, &o, &d, &st);
    CHECK(!got && st == KN_E_LIMIT && d.kind == JINJA_ERR_LIMIT);
    /* linear work inside loops counts too ('in' over a long list, 100000 x 100000) */
    memset(&o, 0, sizeof o);
    o.limits.max_work = 10000u * 64;
    got = render("{% set big = range(100000) | list %}{% for i in range(100000) %}"
                 "{% if -1 in big %}x{% endif %}{% endfor %}", NULL, &o, &d, &st);
    CHECK(!got && st == KN_E_LIMIT);
    /* sorting is n log n: a long reversed range sorts within the default limits */
    got = render("{{ (range(100000) | list | sort(reverse=true))[:3] }}", NULL, NULL, &d, &st);
    CHECK(got && strcmp(got, "[99999, 99998, 99997]") == 0);
    free(got);
    memset(&o, 0, sizeof o);
    o.limits.max_output = 1000;
    got = render("{% for i in range(1000) %}xx{% endfor %}", NULL, &o, &d, &st);
    CHECK(!got && st == KN_E_LIMIT);
    memset(&o, 0, sizeof o);
    o.limits.max_depth = 32;
    got = render("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", NULL, &o, &d, &st);
    CHECK(!got && st == KN_E_LIMIT);
    /* deep nesting at parse time is an error, not a stack overflow */
    size_t n = 100000;
    char *deep = malloc(2 * n + 16);
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < n; i++)
        strcat(deep + 3 + i, "(");
    got = render(deep, NULL, NULL, &d, &st);
    CHECK(!got && d.kind == JINJA_ERR_SYNTAX);
    free(deep);
    memset(&o, 0, sizeof o);
    o.limits.max_source = 10;
    got = render("{{ 'more than ten bytes' }}", NULL, &o, &d, &st);
    CHECK(!got && st == KN_E_LIMIT);
    memset(&o, 0, sizeof o);
    o.limits.max_memory = 1 << 20;
    got = render("{% set ns = namespace(s='x') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 NULL, &o, &d, &st);
    CHECK(!got && st == KN_E_LIMIT);
}

/* CPU time of this process: what a template costs, whatever else the machine runs. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Hostile templates (issue 44): each makes work grow with the length of a string or list
 * the template itself builds, inside a loop or in one operation that is quadratic or
 * worse. Before every scan was charged to the work budget these spun for minutes to
 * hours; now each must be refused with the budget error in well under a second. */
static void test_hostile(void)
{
#define BIG "{% set s = 'ab' * 500000 %}{% set t = 'ab' * 499999 ~ 'ac' %}" \
            "{% set l = range(100000)|list %}"
#define LOOP(body) BIG "{% for i in range(100000) %}" body "{% endfor %}"
    static const char *const hostile[] = {
        LOOP("{% if 'zz' in s %}{% endif %}"),
        LOOP("{% if s|length > 1 %}{% endif %}"),
        LOOP("{% if s == t %}{% endif %}"),
        LOOP("{% if s < t %}{% endif %}"),
        LOOP("{% if s.count('a') %}{% endif %}"),
        LOOP("{% if s.replace('zz', 'y') %}{% endif %}"),
        LOOP("{% if s.split('zz') %}{% endif %}"),
        LOOP("{% if s.rsplit('zz', 1) %}{% endif %}"),
        LOOP("{% if s.find('zz') %}{% endif %}"),
        LOOP("{% if s.rfind('zz') %}{% endif %}"),
        LOOP("{% if s.startswith('b') %}{% endif %}"),
        LOOP("{% if s.endswith('b') %}{% endif %}"),
        LOOP("{% if s[1:] %}{% endif %}"),
        LOOP("{% if s[400000] %}{% endif %}"),
        LOOP("{% if s.strip() %}{% endif %}"),
        LOOP("{% if s|trim %}{% endif %}"),
        LOOP("{% if s.upper() %}{% endif %}"),
        LOOP("{% if s.isalpha() %}{% endif %}"),
        LOOP("{% if s.partition('zz') %}{% endif %}"),
        LOOP("{% if s.rpartition('zz') %}{% endif %}"),
        LOOP("{% if s.splitlines() %}{% endif %}"),
        LOOP("{% if s|wordcount %}{% endif %}"),
        LOOP("{% if s.center(10) %}{% endif %}"),
        LOOP("{% if s.removeprefix('a') %}{% endif %}"),
        LOOP("{% if '%s' % s %}{% endif %}"),
        LOOP("{% if [s, s]|join %}{% endif %}"),
        LOOP("{% if s ~ 'x' %}{% endif %}"),
        LOOP("{% if t in [s] * 100 %}{% endif %}"),
        LOOP("{% if l.count(-1) %}{% endif %}"),
        LOOP("{% if l[1:] %}{% endif %}"),
        LOOP("{% if l|reverse|list %}{% endif %}"),
        /* string concatenation in a loop (quadratic copying) */
        "{% set ns = namespace(x='') %}{% set s = 'ab' * 50000 %}{% for i in range(100000) %}"
        "{% set ns.x = ns.x ~ s[:10] %}{% endfor %}",
        /* one operation, quadratic or worse: backward search, strip with many chars, equality
         * of lists that share their rows, building a dict, unique, exponential recursion */
        "{{ ('a' * 1000000).rsplit('a' * 500000 ~ 'b') }}",
        "{{ ('a' * 1000000).rfind('a' * 500000 ~ 'b') }}",
        "{{ ('a' * 1000000).strip('b' * 1000000 ~ 'a') }}",
        "{% set p = range(1000)|list %}{% set q = range(1000)|list %}{% set a = [[p] * 1000] * 1000 %}"
        "{% set b = [[q] * 1000] * 1000 %}{{ a == b }}",
        "{% set p = range(1000)|list %}{% set q = range(1000)|list %}{% set a = [[p] * 1000] * 1000 %}"
        "{% set b = [[q] * 1000] * 1000 %}{{ b in [a] }}",
        "{{ dict(range(100000)|batch(2))|length }}",
        "{{ range(100000)|unique|list|length }}",
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
    };
#undef LOOP
#undef BIG
    double slowest = 0;
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        /* ASan's memmem checks the whole rest of the haystack on each call, so a million
         * matches cost it minutes, not the engine's budget: that case runs unsanitized */
        if (CHECK_SANITIZED && strstr(hostile[i], "count('a')"))
            continue;
        struct jinja_diag d;
        enum kn_status st;
        double t0 = cpu_seconds();
        char *got = render(hostile[i], NULL, NULL, &d, &st);
        double dt = cpu_seconds() - t0;
        /* copying lists fills the working memory (a value is 16 bytes) before the budget */
        CHECKF(!got && st == KN_E_LIMIT && d.kind == JINJA_ERR_LIMIT &&
                   (strstr(d.message, "work budget") != NULL ||
                    (strstr(hostile[i], "l[1:]") && strstr(d.message, "working memory")) ||
                    (strstr(hostile[i], "reverse") && strstr(d.message, "working memory"))),
               "hostile template %zu: %s (%s)", i, got ? "rendered" : "failed otherwise",
               got ? "" : d.message);
        CHECKF(dt < 1.0, "hostile template %zu took %.2f s of CPU to be refused", i, dt);
        slowest = dt > slowest ? dt : slowest;
        free(got);
    }
    printf("%zu hostile templates refused, the slowest in %.3f s of CPU\n",
           sizeof hostile / sizeof hostile[0], slowest);
    /* the budget is a limit like the others: a smaller one refuses sooner */
    struct jinja_options o = {0};
    struct jinja_diag d;
    enum kn_status st;
    o.limits.max_work = 1000;
    char *got = render("{{ 'x' * 2000 }}", NULL, &o, &d, &st);
    CHECK(!got && st == KN_E_LIMIT && strstr(d.message, "work budget of 1000 units"));
    free(got);
}

/* A long conversation through a real template stays well inside the budget: 400
 * messages of 4 KB (1.6 MB of text) render with the default limits. */
static void test_long_conversation(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/qwen3/tokenizer_config.json", check_data_dir());
    struct kn_err err = {0};
    struct json_value *cfg = NULL, *msgs = json_new_array(), *ctx = NULL;
    CHECKF(!json_parse_file(path, NULL, &cfg, &err), "%s: %s", path, err.msg);
    size_t len;
    const char *src = jinja_pick_template(json_get(cfg, "chat_template"), NULL, &len);
    CHECK(src != NULL && msgs != NULL);
    char *content = malloc(4097);
    for (int i = 0; i < 4096; i++)
        content[i] = "abc <tool_call> </think>\n"[i % 25];
    content[4096] = 0;
    for (int i = 0; i < 400; i++) {
        struct json_value *m = json_new_object();
        CHECK(!json_object_set(m, "role", json_new_string(i % 2 ? "assistant" : "user"), &err));
        CHECK(!json_object_set(m, "content", json_new_string(content), &err));
        CHECK(!json_array_push(msgs, m, &err));
    }
    CHECK(!jinja_chat_context(msgs, NULL, NULL, true, NULL, NULL, NULL, &ctx, &err));
    struct jinja_template *t = NULL;
    struct jinja_diag d;
    char *out = NULL;
    CHECK(!jinja_parse(&t, src, len, NULL, &d, &err));
    double t0 = kn_now();
    CHECKF(!jinja_render(t, ctx, NULL, &out, NULL, &d, &err), "long conversation: %s", err.msg);
    CHECKF(out && strlen(out) > 400 * 1000, "long conversation rendered %zu bytes",
           out ? strlen(out) : 0);
    printf("long conversation: %zu bytes in %.3f s\n", out ? strlen(out) : 0, kn_now() - t0);
    free(out);
    free(content);
    jinja_free(t);
    json_free(ctx);
    json_free(msgs);
    json_free(cfg);
}

static void test_time(void)
{
    struct jinja_options o = {0};
    o.fixed_time = true;
    o.now_unix = 1764374400; /* 2025-11-29 00:00:00 UTC */
    struct jinja_diag d;
    char *got = render("{{ strftime_now('%Y-%m-%d %d %B %Y') }}", NULL, &o, &d, NULL);
    CHECK(got && strcmp(got, "2025-11-29 29 November 2025") == 0);
    free(got);
}

static void test_chat_context(void)
{
    struct kn_err err = {0};
    struct json_value *msgs, *tools, *kw, *ctx;
    const char *m = "[{\"role\": \"user\", \"content\": \"hi\"}]";
    CHECK(!json_parse(m, strlen(m), NULL, &msgs, &err));
    const char *tj = "[{\"type\": \"function\"}]";
    CHECK(!json_parse(tj, strlen(tj), NULL, &tools, &err));
    const char *kj = "{\"enable_thinking\": false, \"bos_token\": \"<B>\"}";
    CHECK(!json_parse(kj, strlen(kj), NULL, &kw, &err));
    CHECK(!jinja_chat_context(msgs, tools, NULL, true, "<s>", "</s>", kw, &ctx, &err));
    char *s = NULL;
    CHECK(!json_write(ctx, JSON_COMPACT, &s, NULL, &err));
    CHECK_STR(s, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\"}],"
                 "\"documents\":null,\"add_generation_prompt\":true,\"eos_token\":\"</s>\","
                 "\"enable_thinking\":false,\"bos_token\":\"<B>\"}");
    free(s);
    /* the context renders: tools is none when absent, kwargs are top-level */
    struct jinja_template *t;
    struct jinja_diag d;
    const char *src = "{{ bos_token }}{{ tools | length }}{{ enable_thinking }}{{ documents is none }}"
                      "{% if add_generation_prompt %}>{% endif %}";
    CHECK(!jinja_parse(&t, src, strlen(src), NULL, &d, &err));
    char *out = NULL;
    CHECK(!jinja_render(t, ctx, NULL, &out, NULL, &d, &err));
    CHECK(out && strcmp(out, "<B>1FalseTrue>") == 0);
    free(out);
    jinja_free(t);
    json_free(ctx);
    CHECK(jinja_chat_context(tools + 0, NULL, NULL, false, NULL, NULL, msgs, &ctx, &err) == KN_E_ARG);
    json_free(msgs);
    json_free(tools);
    json_free(kw);
}

static void test_pick(void)
{
    struct kn_err err = {0};
    struct json_value *v;
    const char *j = "{\"a\": \"T\", \"b\": [{\"name\": \"default\", \"template\": \"D\"},"
                    " {\"name\": \"tool_use\", \"template\": \"TU\"}]}";
    CHECK(!json_parse(j, strlen(j), NULL, &v, &err));
    size_t len = 0;
    const char *s = jinja_pick_template(json_get(v, "a"), NULL, &len);
    CHECK(s && strcmp(s, "T") == 0 && len == 1);
    s = jinja_pick_template(json_get(v, "b"), NULL, &len);
    CHECK(s && strcmp(s, "D") == 0);
    s = jinja_pick_template(json_get(v, "b"), "tool_use", &len);
    CHECK(s && strcmp(s, "TU") == 0 && len == 2);
    CHECK(!jinja_pick_template(json_get(v, "b"), "rag", &len));
    CHECK(!jinja_pick_template(json_get(v, "c"), NULL, &len));
    json_free(v);
}

/* The shared tokenizer configs' templates parse and render a simple conversation. */
static void test_shared_templates(void)
{
    const char *fams[] = {"gemma3", "llama3", "qwen3"};
    const char *want_prefix[] = {"<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
                                 "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
                                 "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"};
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tokenizers/%s/tokenizer_config.json", check_data_dir(), fams[i]);
        struct kn_err err = {0};
        struct json_value *cfg = NULL;
        if (json_parse_file(path, NULL, &cfg, &err)) {
            CHECKF(0, "%s: %s", path, err.msg);
            continue;
        }
        size_t len;
        const char *src = jinja_pick_template(json_get(cfg, "chat_template"), NULL, &len);
        CHECK(src != NULL);
        struct json_value *msgs, *ctx;
        const char *m = "[{\"role\": \"user\", \"content\": \"Hi\"}]";
        CHECK(!json_parse(m, strlen(m), NULL, &msgs, &err));
        const char *bos = i == 0 ? "<bos>" : i == 1 ? "<|begin_of_text|>" : NULL;
        CHECK(!jinja_chat_context(msgs, NULL, NULL, true, bos, NULL, NULL, &ctx, &err));
        struct jinja_template *t;
        struct jinja_diag d;
        char *out = NULL;
        CHECK(!jinja_parse(&t, src, len, NULL, &d, &err));
        CHECKF(!jinja_render(t, ctx, NULL, &out, NULL, &d, &err), "%s: %s", fams[i], err.msg);
        CHECKF(out && strncmp(out, want_prefix[i], strlen(want_prefix[i])) == 0, "%s: %s",
               fams[i], out ? out : "(null)");
        free(out);
        jinja_free(t);
        json_free(ctx);
        json_free(msgs);
        json_free(cfg);
    }
}

/* Renders with marks; returns the marks as a string of '1'/'0' (malloc'd). */
static char *marks_of(const char *src, const char *ctx_json, const struct jinja_options *o,
                      char **text)
{
    struct kn_err err = {0};
    struct jinja_template *t = NULL;
    struct json_value *ctx = NULL;
    char *out = NULL, *ms = NULL;
    uint8_t *marks = NULL;
    size_t len = 0;
    enum kn_status st = jinja_parse(&t, src, strlen(src), NULL, NULL, &err);
    if (!st)
        st = json_parse(ctx_json, strlen(ctx_json), NULL, &ctx, &err);
    if (!st)
        st = jinja_render_marked(t, ctx, o, &out, &marks, &len, NULL, &err);
    CHECKF(st == KN_OK, "%s: %s", src, err.msg);
    if (!st) {
        ms = malloc(len + 1);
        for (size_t i = 0; i < len; i++)
            ms[i] = marks[i] ? '1' : '0';
        ms[len] = 0;
        /* The text is the unmarked render's, byte for byte. */
        char *plain = NULL;
        CHECK(jinja_render(t, ctx, o, &plain, NULL, NULL, &err) == KN_OK && strcmp(plain, out) == 0);
        free(plain);
    }
    jinja_free(t);
    json_free(ctx);
    free(marks);
    if (text)
        *text = out;
    else
        free(out);
    return ms;
}

static void expect_marks(const char *src, const char *ctx, const struct jinja_options *o,
                         const char *want_text, const char *want)
{
    char *text = NULL;
    char *got = marks_of(src, ctx, o, &text);
    CHECKF(text && strcmp(text, want_text) == 0, "%s: text \"%s\"", src, text ? text : "");
    CHECKF(got && strcmp(got, want) == 0, "%s: marks %s, want %s", src, got ? got : "-", want);
    free(got);
    free(text);
}

/* jinja_render_marked: which bytes are the template's own text. */
static void test_marks(void)
{
    const char *ctx = "{\"x\": \"ab\", \"bos_token\": \"<s>\", \"messages\": [{\"role\": \"user\", "
                      "\"content\": \"hi\"}, {\"role\": \"im_end\", \"content\": \"\"}]}";
    /* literal text, a variable, concatenation with + and ~ */
    expect_marks("A{{ x }}B", ctx, NULL, "AabB", "1001");
    expect_marks("{{ '<' + x + '>' }}", ctx, NULL, "<ab>", "1001");
    expect_marks("{{ '<' ~ x ~ 1 ~ '>' }}", ctx, NULL, "<ab1>", "10001");
    /* any other operation on context text marks the whole result as context */
    expect_marks("{{ ('<' + x) | upper }}{{ '<T>' | upper }}", ctx, NULL, "<AB<T>", "000000");
    /* strip and trim keep the marks of what they keep */
    expect_marks("{{ (' <' + x + '> ') | trim }}", ctx, NULL, "<ab>", "1001");
    expect_marks("{{ ('<' ~ x ~ '>\\n').rstrip() }}{{ x.strip() }}", ctx, NULL, "<ab>ab", "100100");
    /* so do join (filter and method) */
    expect_marks("{{ ['<a>', x] | join('|') }}{{ '-'.join([x, '<b>']) }}", ctx, NULL, "<a>|abab-<b>",
                 "1111000" "01" "111");
    /* set, macros, call blocks and set blocks keep each byte's mark */
    expect_marks("{% set y = '[' + x %}{{ y }}", ctx, NULL, "[ab", "100");
    expect_marks("{% macro m(v) %}<{{ v }}>{% endmacro %}{{ m(x) }}", ctx, NULL, "<ab>", "1001");
    expect_marks("{% set b %}<{{ x }}>{% endset %}{{ b }}", ctx, NULL, "<ab>", "1001");
    /* trusted variables and standard roles (when asked for) */
    const char *tv[] = {"bos_token"};
    struct jinja_options o = {.trusted_vars = tv, .n_trusted_vars = 1, .trust_roles = true};
    expect_marks("{{ bos_token }}{{ x }}", ctx, NULL, "<s>ab", "00000");
    expect_marks("{{ bos_token }}{{ x }}", ctx, &o, "<s>ab", "11100");
    expect_marks("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}", ctx, &o,
                 "<|user|>hi<|im_end|>", "1111111100" "11" "000000" "11");
}

int main(void)
{
    test_basics();
    test_errors();
    test_limits();
    test_hostile();
    test_long_conversation();
    test_time();
    test_chat_context();
    test_pick();
    test_shared_templates();
    test_marks();
    CHECK_DONE();
}
