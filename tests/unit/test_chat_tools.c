/* test_chat_tools.c: the tool-call syntaxes (chat_tools.c): calls found in answers of
 * each family, with content kept outside them; broken calls are dropped from content (no
 * partial markup), text before them stays; a stream holds
 * back from the first marker (and a tail that may become one); the syntax a template
 * shows; the call schema names the tools. */
#include "check.h"
#include "chat/chat.h"
#include "base/json.h"

#include <string.h>

static void expect(enum chat_tool_syntax syn, const char *text, int n, const char *name0,
                   const char *args0, const char *content)
{
    struct chat_tool_calls tc;
    struct kn_err err = {0};
    CHECKF(chat_tool_calls_parse(syn, text, strlen(text), &tc, &err) == KN_OK, "%s", err.msg);
    CHECKF(tc.n == n, "%s: %d calls, want %d in %s", chat_tool_syntax_name(syn), tc.n, n, text);
    if (n > 0 && tc.n > 0) {
        CHECKF(strcmp(tc.call[0].name, name0) == 0, "name %s", tc.call[0].name);
        CHECKF(strcmp(tc.call[0].arguments, args0) == 0, "arguments %s", tc.call[0].arguments);
    }
    if (content)
        CHECKF(tc.content && strcmp(tc.content, content) == 0, "content '%s', want '%s'",
               tc.content ? tc.content : "(null)", content);
    else
        CHECKF(tc.content == NULL, "content '%s', want none", tc.content);
    chat_tool_calls_free(&tc);
}

int main(void)
{
    /* Hermes / Qwen */
    expect(CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>",
           1, "f", "{\"x\":1}", NULL);
    expect(CHAT_TOOLS_HERMES, "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
           "</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"a\": \"}\"}}\n</tool_call>",
           2, "f", "{}", "Let me check.\n");
    expect(CHAT_TOOLS_HERMES, "no call here", 0, NULL, NULL, "no call here");
    expect(CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}\n", 0, NULL,
           NULL, NULL); /* cut short: no partial markup in content */
    expect(CHAT_TOOLS_HERMES, "Checking.\n<tool_call>\n{\"name\": \"f\", \"argu", 0, NULL, NULL,
           "Checking.\n"); /* the text before a cut call stays */
    expect(CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"f\", \"argu", 1, "f", "{}", NULL); /* a second, cut */
    expect(CHAT_TOOLS_HERMES, "<tool_call>{\"arguments\": {}}</tool_call>", 0, NULL, NULL,
           NULL); /* no name */
    /* string arguments are passed on as their text */
    expect(CHAT_TOOLS_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\":2}\"}</tool_call>",
           1, "f", "{\"q\":2}", NULL);
    /* Llama 3.x: a bare JSON answer, or after <|python_tag|>; parameters */
    expect(CHAT_TOOLS_LLAMA3, " {\"name\": \"get\", \"parameters\": {\"city\": \"Oslo\"}}", 1, "get",
           "{\"city\":\"Oslo\"}", NULL);
    expect(CHAT_TOOLS_LLAMA3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
           "\"parameters\": {}}", 2, "a", "{}", NULL);
    expect(CHAT_TOOLS_LLAMA3, "It is {sunny}.", 0, NULL, NULL, "It is {sunny}.");
    /* Mistral */
    expect(CHAT_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"k\": [1, 2]}}, "
           "{\"name\": \"g\", \"arguments\": {}}]", 2, "f", "{\"k\":[1,2]}", NULL);
    /* functionary v3.2 and v3.1 */
    expect(CHAT_TOOLS_FUNCTIONARY, ">>>all\nSure.>>>f\n{\"x\": true}", 1, "f", "{\"x\":true}", "Sure.");
    expect(CHAT_TOOLS_FUNCTIONARY, "<function=g>{\"y\": null}</function>", 1, "g", "{\"y\":null}", NULL);
    expect(CHAT_TOOLS_FUNCTIONARY_V31, "<function=g>{\"y\": 1}</function>", 1, "g", "{\"y\":1}", NULL);
    /* v3.2's prompt wrote the first ">>>": the answer opens with the recipient line */
    expect(CHAT_TOOLS_FUNCTIONARY, "f\n{\"x\": 1}>>>g\n{}", 2, "f", "{\"x\":1}", NULL);
    expect(CHAT_TOOLS_FUNCTIONARY, "all\nHello.", 0, NULL, NULL, "Hello.");
    expect(CHAT_TOOLS_FUNCTIONARY, "all\nLet me see.>>>f\n{}", 1, "f", "{}", "Let me see.");
    expect(CHAT_TOOLS_FUNCTIONARY, "Plain words.", 0, NULL, NULL, "Plain words.");
    expect(CHAT_TOOLS_FUNCTIONARY_V31, "f\n{\"x\": 1}", 0, NULL, NULL, "f\n{\"x\": 1}");
    /* gpt-oss's harmony: the recipient in the channel part (as the model writes it) or in
     * the role part (as the template renders history); the header is no content */
    expect(CHAT_TOOLS_HARMONY, "<|start|>assistant<|channel|>commentary to=functions.get_weather "
           "<|constrain|>json<|message|>{\"city\": \"Oslo\"}<|call|>", 1, "get_weather",
           "{\"city\":\"Oslo\"}", NULL);
    expect(CHAT_TOOLS_HARMONY, "Let me look.<|start|>assistant to=functions.f<|channel|>commentary json"
           "<|message|>{}", 1, "f", "{}", "Let me look.");
    expect(CHAT_TOOLS_HARMONY, "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{\"x\": [1]}"
           "<|start|>assistant<|channel|>commentary to=functions.b <|constrain|>json<|message|>{}", 2, "a",
           "{\"x\":[1]}", NULL);
    expect(CHAT_TOOLS_HARMONY, "The weather is fine.", 0, NULL, NULL, "The weather is fine.");
    expect(CHAT_TOOLS_HARMONY, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\":", 0,
           NULL, NULL, NULL); /* cut short */

    /* a stream holds back from the marker and from a tail that may become one */
    const char *t = "Hello <tool_call>\n{";
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_HERMES, t, strlen(t)), 6);
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_HERMES, "Hi <tool", 8), 3);
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_HERMES, "Hi there", 8), 8);
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_LLAMA3, " {\"na", 5), 0);
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_LLAMA3, "Sunny <|py", 10), 6);
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_MISTRAL, "ok [TOOL", 8), 3);

    /* the syntax of a template */
    struct chat_renderer cr;
    memset(&cr, 0, sizeof cr);
    cr.engine = CHAT_ENGINE_JINJA;
    char qwen[] = "{% for tool in tools %}{{ tool | tojson }}{% endfor %}<tool_call>";
    char mistral[] = "[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS][TOOL_CALLS]";
    char llama[] = "<|start_header_id|>ipython<|end_header_id|><|python_tag|>";
    char func[] = ">>>all\n";
    cr.src = qwen;
    CHECK_EQ_INT(chat_tool_syntax_of(&cr), CHAT_TOOLS_HERMES);
    cr.src = mistral;
    CHECK_EQ_INT(chat_tool_syntax_of(&cr), CHAT_TOOLS_MISTRAL);
    cr.src = llama;
    CHECK_EQ_INT(chat_tool_syntax_of(&cr), CHAT_TOOLS_LLAMA3);
    cr.src = func;
    CHECK_EQ_INT(chat_tool_syntax_of(&cr), CHAT_TOOLS_FUNCTIONARY);
    char func31[] = "{{ '<function=' + tool_call['function']['name'] + '>' }}";
    cr.src = func31;
    CHECK_EQ_INT(chat_tool_syntax_of(&cr), CHAT_TOOLS_FUNCTIONARY_V31);
    /* v3.2: nothing while the answer may open with a call's recipient line */
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_FUNCTIONARY, "get_wea", 7), 0);
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_FUNCTIONARY, "get_weather\n{", 13), 0);
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_FUNCTIONARY, "all\nHi >>", 9), 7);
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_FUNCTIONARY_V31, "get_wea", 7), 7);
    char harmony[] = "{{- \"<|start|>assistant to=\" }}{{- \"functions.\" + tool_call.name + \"<|channel|>commentary \" }}";
    cr.src = harmony;
    CHECK_EQ_INT(chat_tool_syntax_of(&cr), CHAT_TOOLS_HARMONY);
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_HARMONY, "Sure.<|start|>assistant", 23), 5);
    CHECK_EQ_INT(chat_tool_calls_safe_end(CHAT_TOOLS_HARMONY, "Sure.<|cha", 10), 5);

    /* forced calls: each syntax's frame, as its parser reads it back */
    struct kn_err err = {0};
    struct chat_tool_frame fr;
    chat_tool_call_frame(CHAT_TOOLS_MISTRAL, true, &fr);
    CHECK(strcmp(fr.sep, ",") == 0 && fr.name_json);
    chat_tool_call_frame(CHAT_TOOLS_HERMES, false, &fr);
    CHECK(fr.sep == NULL);
    chat_tool_call_frame(CHAT_TOOLS_HARMONY, true, &fr);
    CHECK(fr.sep == NULL && !fr.name_json); /* <|call|> ends the turn: one call */
    CHECK(chat_tool_name_ok(&fr, "get_weather-2") && !chat_tool_name_ok(&fr, "get weather") &&
          !chat_tool_name_ok(&fr, "a<b") && !chat_tool_name_ok(&fr, ""));
    for (int syn = 0; syn < CHAT_TOOLS_COUNT; syn++) {
        chat_tool_call_frame((enum chat_tool_syntax)syn, true, &fr);
        char text[512];
        const char *name = fr.name_json ? "\"f\"" : "f";
        int k = snprintf(text, sizeof text, "%s%s%s%s{\"x\": 1}%s", fr.open, fr.call_open, name,
                         fr.call_mid, fr.call_close);
        if (fr.sep)
            k += snprintf(text + k, sizeof text - (size_t)k, "%s%s%s%s{\"y\": 2}%s", fr.sep,
                          fr.call_open, fr.name_json ? "\"g\"" : "g",
                          fr.call_mid, fr.call_close);
        snprintf(text + k, sizeof text - (size_t)k, "%s", fr.close);
        struct chat_tool_calls c;
        CHECK(chat_tool_calls_parse((enum chat_tool_syntax)syn, text, strlen(text), &c, &err) == KN_OK);
        CHECKF(c.n == (fr.sep ? 2 : 1) && strcmp(c.call[0].name, "f") == 0 &&
                   strcmp(c.call[0].arguments, "{\"x\":1}") == 0 && c.content == NULL,
               "%s: %s: %d calls", chat_tool_syntax_name((enum chat_tool_syntax)syn), text, c.n);
        if (fr.sep && c.n == 2)
            CHECK(strcmp(c.call[1].name, "g") == 0 && strcmp(c.call[1].arguments, "{\"y\":2}") == 0);
        chat_tool_calls_free(&c);
    }
    CHECK_DONE();
}
