/* cli_grammar.c: the grammar flags run and chat share (--grammar, --grammar-file,
 * --json-schema, --json-schema-file). */
#include "cli.h"

#include "base/base.h"
#include "base/json.h"
#include "grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

int cli_grammar(const char *grammar, const char *grammar_file, const char *json_schema,
                const char *json_schema_file, char **gbnf, struct json_value **rf,
                struct grammar **g, struct kn_err *err)
{
    const struct {
        const char *grammar, *grammar_file, *json_schema, *json_schema_file;
    } opts = {grammar, grammar_file, json_schema, json_schema_file}, *o = &opts;
    *gbnf = NULL;
    *rf = NULL;
    *g = NULL;
    int given = (o->grammar != NULL) + (o->grammar_file != NULL) + (o->json_schema != NULL) +
                (o->json_schema_file != NULL);
    if (given == 0)
        return KN_OK;
    if (given > 1)
        return kn_fail(err, KN_E_ARG, "give one of --grammar, --grammar-file, --json-schema and --json-schema-file");
    enum kn_status st;
    char *text = NULL;
    size_t len = 0;
    const char *file = o->grammar_file ? o->grammar_file : o->json_schema_file;
    const char *flag = o->grammar ? "--grammar" : o->grammar_file ? "--grammar-file"
                       : o->json_schema ? "--json-schema" : "--json-schema-file";
    if (file) {
        st = kn_read_file(file, 16u << 20, &text, &len, err);
        if (st != KN_OK)
            return st;
    } else {
        const char *src = o->grammar ? o->grammar : o->json_schema;
        if (!(text = kn_strdup(src, err)))
            return KN_E_NOMEM;
        len = strlen(src);
    }
    if (o->json_schema || o->json_schema_file) {
        struct json_value *schema = NULL;
        st = json_parse(text, len, &JSON_INPUT_LIMITS, &schema, err);
        free(text);
        text = NULL;
        if (st != KN_OK) {
            kn_err_prefix(err, file ? file : "--json-schema");
            return st;
        }
        /* {"type": "json_schema", "json_schema": {"schema": S}}; a set takes its value,
         * freeing it on failure. */
        struct json_value *js = json_new_object();
        *rf = json_new_object();
        if (!js || !*rf) {
            json_free(js);
            json_free(schema);
            json_free(*rf);
            *rf = NULL;
            return kn_fail(err, KN_E_NOMEM, "out of memory");
        }
        bool ok = json_object_set(*rf, "type", json_new_string("json_schema"), err) == KN_OK;
        if (!ok)
            json_free(schema);
        else
            ok = json_object_set(js, "schema", schema, err) == KN_OK; /* frees schema if not */
        if (!ok)
            json_free(js);
        else
            ok = json_object_set(*rf, "json_schema", js, err) == KN_OK; /* frees js if not */
        if (!ok) {
            json_free(*rf);
            *rf = NULL;
            return KN_E_NOMEM;
        }
        st = grammar_from_response_format(*rf, gbnf, err);
        if (st != KN_OK) {
            kn_err_prefix(err, flag);
            json_free(*rf);
            *rf = NULL;
            return st;
        }
    } else {
        if (!json_utf8_valid(text, len) || strlen(text) != len) {
            free(text);
            return kn_fail(err, KN_E_ARG, "%s: the grammar is not UTF-8 text", file ? file : flag);
        }
        *gbnf = text;
    }
    st = grammar_parse(*gbnf, strlen(*gbnf), NULL, g, err);
    if (st != KN_OK) {
        kn_err_prefix(err, file ? file : flag);
        free(*gbnf);
        json_free(*rf);
        *gbnf = NULL;
        *rf = NULL;
    }
    return st;
}

