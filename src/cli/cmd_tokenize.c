/* cmd_tokenize.c: `kinetic tokenize MODEL [TEXT]`: shows how a model's tokenizer splits
 * text (like llama-tokenize), decodes ids back to text, and has a batch mode for scripts
 * and tests (one hex-encoded text per line in, one line of ids out). */
#include "cli.h"
#include "base/base.h"
#include "gguf/gguf.h"
#include "token/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *usage =
    "MODEL.gguf [TEXT] [-f FILE|-]\n"
    "\n"
    "Prints the tokens of TEXT (or of FILE, '-' for stdin) as 'id -> 'piece''.\n"
    "Control-token texts (e.g. <|im_start|>) become control tokens unless --no-parse-special.";

static int hexdigit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Prints bytes, escaping what would break a line or a terminal. */
static void print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\\')
            fputs("\\\\", stdout);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

static int tokenize_print(const struct tok *t, const char *text, size_t len, bool add_special,
                          bool parse_special, bool ids_only)
{
    struct kn_err err = {0};
    size_t n = 0;
    int32_t *ids = NULL;
    if (tok_encode_alloc(t, text, len, add_special, parse_special, &ids, &n, &err) != KN_OK) {
        fprintf(stderr, "kinetic tokenize: %s\n", err.msg);
        return 1;
    }
    if (ids_only) {
        for (size_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    } else {
        for (size_t i = 0; i < n; i++) {
            size_t pl;
            const char *p = tok_piece(t, ids[i], true, &pl);
            printf("%6d -> '", ids[i]);
            print_escaped(p, pl);
            fputs("'\n", stdout);
        }
    }
    free(ids);
    return 0;
}

/* Batch mode: each line of in is one text in hex ("" for the empty text); prints one line
 * of space-separated ids per text. */
static int batch(const struct tok *t, FILE *in, bool add_special, bool parse_special)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int rc = 0;
    while (rc == 0 && (got = getline(&line, &cap, in)) >= 0) {
        size_t l = (size_t)got;
        while (l > 0 && (line[l - 1] == '\n' || line[l - 1] == '\r'))
            l--;
        if (l % 2) {
            fprintf(stderr, "kinetic tokenize: --hex-lines: odd-length hex line\n");
            rc = 1;
            break;
        }
        for (size_t i = 0; i < l / 2; i++) {
            int hi = hexdigit(line[2 * i]), lo = hexdigit(line[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                fprintf(stderr, "kinetic tokenize: --hex-lines: not hex: '%.*s'\n", 2, line + 2 * i);
                rc = 1;
                break;
            }
            line[i] = (char)(hi * 16 + lo);
        }
        if (rc == 0)
            rc = tokenize_print(t, line, l / 2, add_special, parse_special, true);
    }
    free(line);
    return rc;
}

/* Decodes the space-separated ids in list through the streaming decoder into *out
 * (malloc'd). Returns 0, or 2 for a bad list. */
static int decode_to(const struct tok *t, const char *list, bool special, char **out, size_t *out_len)
{
    size_t max_ids = strlen(list) / 2 + 1, n = 0;
    int32_t *ids = malloc(max_ids * sizeof *ids);
    if (!ids)
        return 1;
    for (const char *p = list; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            if (strchr(" ,[]\r\n\t", *p)) {
                p++;
                continue;
            }
            fprintf(stderr, "kinetic tokenize: --decode wants token ids, not '%s'\n", p);
            free(ids);
            return 2;
        }
        if (v < 0 || v >= tok_n_vocab(t)) {
            fprintf(stderr, "kinetic tokenize: token id %ld is outside the vocabulary (0..%d)\n", v,
                    tok_n_vocab(t) - 1);
            free(ids);
            return 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    /* Stream the pieces, as generation does, so the tests cover the streaming decoder.
     * Every piece is at most tok_max_piece bytes, plus at most 3 held back. */
    struct tok_stream s;
    tok_stream_init(&s, t, special);
    size_t cap = n * tok_max_piece(t) + 8, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        free(ids);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t m;
        tok_stream_push(&s, ids[i], buf + len, &m);
        len += m;
    }
    size_t m;
    tok_stream_flush(&s, buf + len, &m);
    len += m;
    free(ids);
    *out = buf;
    *out_len = len;
    return 0;
}

static int decode(const struct tok *t, const char *list, bool special, bool hex_lines)
{
    if (!hex_lines) {
        char *text;
        size_t len;
        int rc = decode_to(t, list, special, &text, &len);
        if (rc == 0) {
            fwrite(text, 1, len, stdout);
            free(text);
        }
        return rc;
    }
    /* Batch: each line of stdin is a list of ids; prints each text in hex. */
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, stdin) >= 0) {
        char *text;
        size_t len;
        rc = decode_to(t, line, special, &text, &len);
        if (rc == 0) {
            for (size_t i = 0; i < len; i++)
                printf("%02x", (unsigned char)text[i]);
            putchar('\n');
            free(text);
        }
    }
    free(line);
    return rc;
}

static void print_id(const char *name, const struct tok *t, int32_t id)
{
    if (id == TOK_NULL) {
        printf("%-9s none\n", name);
        return;
    }
    size_t l;
    const char *s = tok_text(t, id, &l);
    printf("%-9s %d '", name, id);
    print_escaped(s, l);
    fputs("'\n", stdout);
}

/* Describes the tokenizer: family, pre-tokenizer, special ids, end-of-generation ids. */
static void print_info(const struct tok *t)
{
    const struct tok_special *sp = tok_specials(t);
    printf("model     %s\n", tok_model(t) == TOK_MODEL_SPM   ? "llama (SentencePiece-style)"
                             : tok_model(t) == TOK_MODEL_BPE ? "gpt2 (byte-level BPE)"
                                                             : "bert (WordPiece)");
    printf("pre       %s\n", tok_pre_name(t));
    printf("vocab     %d\n", tok_n_vocab(t));
    print_id("bos", t, sp->bos);
    print_id("eos", t, sp->eos);
    print_id("eot", t, sp->eot);
    print_id("eom", t, sp->eom);
    print_id("unk", t, sp->unk);
    print_id("pad", t, sp->pad);
    print_id("sep", t, sp->sep);
    printf("add_bos   %s\nadd_eos   %s\nadd_space_prefix %s\n", sp->add_bos ? "true" : "false",
           sp->add_eos ? "true" : "false", sp->add_space_prefix ? "true" : "false");
    int32_t eog[TOK_MAX_EOG];
    int n = tok_eog_ids(t, eog);
    printf("eog      ");
    for (int i = 0; i < n; i++)
        printf(" %d", eog[i]);
    putchar('\n');
}

int cmd_tokenize(int argc, char **argv)
{
    bool ids_only = false, no_parse_special = false, no_bos = false, hex_lines = false;
    bool show_special = false, info = false;
    const char *file = NULL, *decode_ids = NULL;
    const char *pos[2] = {NULL, NULL}; /* MODEL.gguf, TEXT */
    const struct cli_opt opts[] = {
        {"model", 'm', CLI_POS, &pos[0], "MODEL.gguf", "the model file (instead of the first argument)", NULL, NULL},
        {"prompt", 'p', CLI_POS, &pos[1], "TEXT", "the text (instead of the second argument)", NULL, NULL},
        {"file", 'f', CLI_STR, &file, "FILE", "read the text from FILE ('-' for stdin)", NULL, NULL},
        {"ids-only", 0, CLI_FLAG, &ids_only, NULL, "print only the ids, space-separated", NULL, NULL},
        {"no-parse-special", 0, CLI_FLAG, &no_parse_special, NULL,
         "treat control-token texts as plain text", NULL, NULL},
        {"no-bos", 0, CLI_FLAG, &no_bos, NULL, "do not add the BOS/EOS tokens the model asks for",
         NULL, NULL},
        {"hex-lines", 0, CLI_FLAG, &hex_lines, NULL,
         "batch: each input line is one hex-encoded text; one line of ids per text", NULL, NULL},
        {"decode", 0, CLI_STR, &decode_ids, "IDS",
         "print the text of token ids ('1 2 3'); with --hex-lines, '-': one id list per stdin "
         "line, each text printed in hex", NULL, NULL},
        {"special", 0, CLI_FLAG, &show_special, NULL, "with --decode: render control tokens", NULL, NULL},
        {"info", 0, CLI_FLAG, &info, NULL,
         "describe the tokenizer: family, pre-tokenizer, special and end-of-generation ids", NULL, NULL},
        CLI_OPT_END,
    };
    int n_pos = 0;
    int rc = cli_parse("tokenize", usage, argc, argv, opts, pos, 2, &n_pos);
    if (rc)
        return rc == 1 ? 0 : rc;
    if (n_pos < 1) {
        fprintf(stderr, "kinetic tokenize: give a model file; see 'kinetic tokenize --help'\n");
        return 2;
    }
    if (!decode_ids && !hex_lines && !info && (n_pos == 2) == (file != NULL)) {
        fprintf(stderr, "kinetic tokenize: give either TEXT or -f FILE\n");
        return 2;
    }

    struct kn_err err = {0};
    struct gguf_file *g = NULL;
    struct tok *t = NULL;
    if (gguf_open(&g, pos[0], &err) != KN_OK) {
        fprintf(stderr, "kinetic tokenize: %s\n", err.msg);
        return 1;
    }
    if (tok_load(&t, g, &err) != KN_OK) {
        fprintf(stderr, "kinetic tokenize: %s: %s\n", pos[0], err.msg);
        gguf_close(g);
        return 1;
    }
    gguf_close(g);

    if (info) {
        print_info(t);
        rc = 0;
    } else if (decode_ids) {
        rc = decode(t, decode_ids, show_special, hex_lines);
    } else if (hex_lines) {
        FILE *in = stdin;
        if (file && strcmp(file, "-") != 0) {
            int fd = kn_open_regular(file, &err);
            if (fd < 0 || !(in = fdopen(fd, "rb"))) {
                if (fd >= 0)
                    close(fd);
                fprintf(stderr, "kinetic tokenize: -f %s\n", fd < 0 ? err.msg : file);
                tok_free(t);
                return 1;
            }
        }
        rc = batch(t, in, !no_bos, !no_parse_special);
        if (in != stdin)
            fclose(in);
    } else if (file) {
        char *text = NULL;
        size_t len = 0;
        if (cli_read_prompt(file, &text, &len, &err) != KN_OK) {
            fprintf(stderr, "kinetic tokenize: %s\n", err.msg);
            tok_free(t);
            return 1;
        }
        rc = tokenize_print(t, text ? text : "", len, !no_bos, !no_parse_special, ids_only);
        free(text);
    } else {
        rc = tokenize_print(t, pos[1], strlen(pos[1]), !no_bos, !no_parse_special, ids_only);
    }
    tok_free(t);
    return rc;
}
