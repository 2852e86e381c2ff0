/* sample_table.c: prints the sampling settings table (src/sample/settings.c) as JSON for
 * tests/py/test_settings_table.py: each row's names, flag, type, an out-of-range value
 * (text and JSON), the one message every surface must give for it, and its default as
 * sample_params_json_write writes it (what GET /props shows). */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "base/json.h"
#include "sample/sample.h"
#include "../unit/sample_examples.h"

static const char *const type_names[] = {"float", "int", "int64", "seed", "breakers", "bias",
                                         "chain"};

int main(void)
{
    struct json_value *rows = json_new_array(), *dflt = json_new_object();
    struct sample_params d;
    sample_params_default(&d);
    if (!rows || !dflt || sample_params_json_write(&d, dflt, SAMPLE_JSON_ALL, NULL) != KN_OK)
        return 1;
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        char text[128], json[128];
        sample_example_bad(s, text, json, sizeof text);
        struct sample_params p;
        sample_params_default(&p);
        struct kn_err err = {0};
        if (sample_setting_parse(s, text, &p, &err) == KN_OK) {
            fprintf(stderr, "sample_table: %s accepts its bad value %s\n", s->name, text);
            return 1;
        }
        struct json_value *o = json_new_object(), *al = json_new_array();
        for (int a = 0; a < 2 && s->alias[a]; a++)
            if (json_array_push(al, json_new_string(s->alias[a]), NULL) != KN_OK)
                return 1;
        char shortf[2] = {s->short_flag, 0};
        if (json_object_set(o, "name", json_new_string(s->name), NULL) != KN_OK ||
            json_object_set(o, "key", json_new_string(s->key), NULL) != KN_OK ||
            json_object_set(o, "aliases", al, NULL) != KN_OK ||
            json_object_set(o, "flag", json_new_string(s->flag), NULL) != KN_OK ||
            json_object_set(o, "short", json_new_string(shortf), NULL) != KN_OK ||
            json_object_set(o, "type", json_new_string(type_names[s->type]), NULL) != KN_OK ||
            json_object_set(o, "always", json_new_bool(s->always), NULL) != KN_OK ||
            json_object_set(o, "bad_text", json_new_string(text), NULL) != KN_OK ||
            json_object_set(o, "bad_json", json_new_string(json), NULL) != KN_OK ||
            json_object_set(o, "message", json_new_string(err.msg), NULL) != KN_OK ||
            json_object_set(o, "default", json_object_take(dflt, s->key), NULL) != KN_OK ||
            json_array_push(rows, o, NULL) != KN_OK)
            return 1;
    }
    char *out = NULL;
    if (json_write(rows, JSON_PRETTY, &out, NULL, NULL) != KN_OK)
        return 1;
    puts(out);
    free(out);
    json_free(rows);
    json_free(dflt);
    return 0;
}
