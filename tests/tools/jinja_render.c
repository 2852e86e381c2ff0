/* jinja_render: renders a Jinja template file with a JSON context file, for tests that
 * compare Kinetic's renderer with Python's jinja2.
 *
 *   jinja_render TEMPLATE CONTEXT.json [--time UNIX_SECONDS] [--name NAME] [--marks FILE]
 *
 * TEMPLATE is a .jinja file, or a tokenizer_config.json (its "chat_template", a string or a
 * list of {name, template}; --name picks one, default "default"). The rendered text goes to
 * stdout, byte for byte. On failure, exit status 1 and stderr has one line
 * "error KIND LINE:COLUMN" then the message (for raise_exception, exactly the template's).
 * --marks FILE renders with jinja_render_marked as the chat renderer does (bos_token and
 * eos_token trusted, standard roles trusted) and writes one byte per output byte to FILE:
 * '1' for template text, '0' for context text. */
#include "jinja/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_name(enum jinja_error_kind k)
{
    switch (k) {
    case JINJA_ERR_SYNTAX: return "syntax";
    case JINJA_ERR_RAISED: return "raised";
    case JINJA_ERR_UNDEFINED: return "undefined";
    case JINJA_ERR_TYPE: return "type";
    case JINJA_ERR_SECURITY: return "security";
    case JINJA_ERR_LIMIT: return "limit";
    case JINJA_ERR_UNSUPPORTED: return "unsupported";
    default: return "other";
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: jinja_render TEMPLATE CONTEXT.json [--time UNIX] [--name NAME]\n");
        return 2;
    }
    struct jinja_options opts = {0};
    const char *name = NULL, *marks_path = NULL;
    static const char *const trusted[] = {"bos_token", "eos_token"};
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--time") == 0) {
            opts.fixed_time = true;
            opts.now_unix = strtoll(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--name") == 0) {
            name = argv[i + 1];
        } else if (strcmp(argv[i], "--marks") == 0) {
            marks_path = argv[i + 1];
            opts.trusted_vars = trusted;
            opts.n_trusted_vars = 2;
            opts.trust_roles = true;
        }
    }
    struct kn_err err = {0};
    char *src = NULL;
    size_t len = 0;
    struct json_value *cfg = NULL, *ctx = NULL;
    if (kn_read_file(argv[1], 64u << 20, &src, &len, &err)) {
        fprintf(stderr, "error io 0:0\n%s\n", err.msg);
        return 2;
    }
    const char *tsrc = src;
    size_t tlen = len;
    size_t nlen = strlen(argv[1]);
    if (nlen >= 5 && strcmp(argv[1] + nlen - 5, ".json") == 0) {
        if (json_parse(src, len, NULL, &cfg, &err)) {
            fprintf(stderr, "error io 0:0\n%s\n", err.msg);
            return 2;
        }
        tsrc = jinja_pick_template(json_get(cfg, "chat_template"), name, &tlen);
        if (!tsrc) {
            fprintf(stderr, "error io 0:0\nno chat_template in %s\n", argv[1]);
            return 2;
        }
    }
    if (json_parse_file(argv[2], NULL, &ctx, &err)) {
        fprintf(stderr, "error io 0:0\n%s\n", err.msg);
        return 2;
    }
    struct jinja_template *t = NULL;
    struct jinja_diag diag;
    int rc = 0;
    if (jinja_parse(&t, tsrc, tlen, NULL, &diag, &err)) {
        fprintf(stderr, "error %s %d:%d\n%s\n", kind_name(diag.kind), diag.line, diag.column,
                diag.kind == JINJA_ERR_NONE ? err.msg : diag.message);
        rc = 1;
    } else {
        char *out = NULL;
        uint8_t *marks = NULL;
        size_t olen = 0;
        enum kn_status st = marks_path
                                ? jinja_render_marked(t, ctx, &opts, &out, &marks, &olen, &diag, &err)
                                : jinja_render(t, ctx, &opts, &out, &olen, &diag, &err);
        if (st) {
            fprintf(stderr, "error %s %d:%d\n%s\n", kind_name(diag.kind), diag.line, diag.column,
                    diag.kind == JINJA_ERR_NONE ? err.msg : diag.message);
            rc = 1;
        } else {
            fwrite(out, 1, olen, stdout);
            free(out);
            if (marks_path) {
                FILE *f = fopen(marks_path, "wb");
                for (size_t i = 0; f && i < olen; i++)
                    fputc(marks[i] ? '1' : '0', f);
                if (!f || fclose(f) != 0)
                    rc = 2;
            }
            free(marks);
        }
    }
    jinja_free(t);
    json_free(ctx);
    json_free(cfg);
    free(src);
    return rc;
}
