/* response_format.c: the grammar an OpenAI response_format asks for (see grammar.h). One
 * place turns a response_format into GBNF, so the server, kinetic run and verify-receipt
 * (which checks a receipt's grammar against its response_format) cannot disagree. */
#include "grammar.h"

#include "../base/json.h"

#include <stdlib.h>
#include <string.h>

static enum kn_status schema_gbnf(const struct json_value *schema, const char *where, char **out,
                                  struct kn_err *err)
{
    if (!json_is(schema, JSON_OBJECT) && !json_is(schema, JSON_BOOL))
        return kn_fail(err, KN_E_ARG, "response_format: %s must be a JSON Schema object", where);
    char *text;
    size_t len;
    enum kn_status st = json_write(schema, JSON_COMPACT, &text, &len, err);
    if (st != KN_OK)
        return st;
    st = grammar_from_json_schema(text, len, out, err);
    free(text);
    return st;
}

enum kn_status grammar_from_response_format(const struct json_value *rf, char **out,
                                            struct kn_err *err)
{
    *out = NULL;
    if (!rf || json_is(rf, JSON_NULL))
        return KN_OK;
    const char *type = json_str(json_get(rf, "type"));
    if (!json_is(rf, JSON_OBJECT) || !type)
        return kn_fail(err, KN_E_ARG,
                       "response_format must be an object with a \"type\": \"text\", "
                       "\"json_object\" or \"json_schema\"");
    if (strcmp(type, "text") == 0)
        return KN_OK;
    if (strcmp(type, "json_object") == 0) {
        /* llama.cpp's extension: a "schema" member constrains the object further. */
        const struct json_value *schema = json_get(rf, "schema");
        if (schema && !json_is(schema, JSON_NULL))
            return schema_gbnf(schema, "schema", out, err);
        *out = kn_strdup(grammar_json_object_gbnf(), err);
        return *out ? KN_OK : KN_E_NOMEM;
    }
    if (strcmp(type, "json_schema") == 0) {
        const struct json_value *js = json_get(rf, "json_schema");
        if (!json_is(js, JSON_OBJECT))
            return kn_fail(err, KN_E_ARG,
                           "response_format: type \"json_schema\" needs a \"json_schema\" object "
                           "with a \"schema\": {\"type\": \"json_schema\", \"json_schema\": "
                           "{\"schema\": {...}}}");
        const struct json_value *schema = json_get(js, "schema");
        if (!schema)
            return kn_fail(err, KN_E_ARG, "response_format: json_schema.schema is missing");
        return schema_gbnf(schema, "json_schema.schema", out, err);
    }
    return kn_fail(err, KN_E_ARG,
                   "response_format: unknown type \"%s\" (text, json_object or json_schema)", type);
}
