/* cmd_synth.c: kinetic synth, random-weight models with real shapes (src/synth). */
#include "cli.h"
#include "base/base.h"
#include "base/progress.h"
#include "synth/synth.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "[--arch ARCH] (--preset NAME | --dims SPEC) [--type TYPE] [--vocab FILE.gguf] [--seed S] -o OUT.gguf";

static void print_details(void)
{
    printf("\n"
           "Writes a model with random weights (N(0, 0.02)-like, norms 1.0) and real shapes, for\n"
           "tests and benchmarks. It writes noise. The same arguments give the same bytes on\n"
           "every machine, whatever --threads is. Its progress goes to standard error (a bar\n"
           "on a terminal, a line at each quarter elsewhere).\n"
           "\n"
           "architectures: " SYNTH_ARCH_LIST " (default: the preset's, or llama)\n"
           "presets:\n  ");
    /* one preset per line: the list separates them with "), " */
    for (const char *p = synth_preset_list(); *p; p++) {
        if (p[0] == ')' && p[1] == ',') {
            printf(")\n ");
            p++;
            continue;
        }
        putchar(*p);
    }
    printf("\n"
           "types: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q3_k, q4_k, q5_k, q6_k, mxfp4\n"
           "  (every matrix in that type; rows that are not whole blocks fall back as llama.cpp\n"
           "  does: q2/q3_k, iq4_xs->iq4_nl, q4_k->q5_0, q5_k->q5_1, q6_k->q8_0, else f16), and\n"
           "  llama.cpp's mixes as llama-quantize lays them out: q2_k, q3_k_s, q3_k_m, q3_k_l,\n"
           "  q4_k_m, q5_k_m, iq4_nl, iq4_xs (output q6_K; attn_v, ffn_down, attn_output with\n"
           "  more bits by llama.cpp's per-layer rules), mxfp4_moe (experts mxfp4, else q8_0).\n"
           "  Norms and biases stay f32. Default: q8_0.\n"
           "\n"
           "--dims SPEC: comma-separated key=value pairs, applied over the preset if one is given:\n"
           "  dim=N layers=N heads=N ffn=N vocab=N (required without a preset)\n"
           "  kv_heads=N (default heads) head_dim=N (default dim/heads) ctx=N (default 2048)\n"
           "  rope_base=X (default 10000) eps=X (default 1e-5, gemma2/3 1e-6) window=N (gemma2/3\n"
           "  sliding window, default 4096 / 512) tied=0|1 (1: no output.weight, the embedding is\n"
           "  reused) attn_softcap=X final_softcap=X (gemma2's soft-caps, default 50 and 30)\n"
           "  rot=N (phi3: rotated dims per head, default head_dim) rope_orig_ctx=N (phi3:\n"
           "  LongRoPE's original context; writes the long and short factors)\n"
           "  embd_scale=X residual_scale=X attn_scale=X logit_scale=X (granite; default\n"
           "  Granite 3.3 2B's 12, 0.22, 0.015625 and 8)\n"
           "  gemma3 needs layers >= 6 (every sixth layer is the global-attention one)\n"
           "  experts=N experts_used=N expert_ffn=N (qwen3moe: experts per layer, per token, and\n"
           "  an expert's width; tiny has 16, 4 and 256)\n"
           "  lfm2: attn=2:5:8 (its attention layers; default every third from layer 2, the rest\n"
           "  are short-convolution layers) conv_l=N (conv length, default 3)\n"
           "  e.g. --arch llama --dims dim=512,layers=4,heads=8,kv_heads=2,ffn=1408,vocab=4096\n"
           "\n"
           "--vocab FILE.gguf copies every tokenizer.* key from a vocabulary GGUF and takes the\n"
           "vocabulary size from it. Without it: a built-in SentencePiece-style vocabulary (<unk>,\n"
           "<s>, </s>, 256 byte tokens, then text pieces) of the model's vocab size (at least 448).\n");
}

int cmd_synth(int argc, char **argv)
{
    const char *arch_s = NULL, *preset = NULL, *dims = NULL, *type_s = "q8_0", *vocab = NULL;
    const char *out = NULL, *name = NULL;
    int64_t seed = 0, threads = 0;
    const struct cli_opt opts[] = {
        {"arch", 0, CLI_STR, &arch_s, "ARCH", SYNTH_ARCH_LIST, NULL, NULL},
        {"preset", 0, CLI_STR, &preset, "NAME", "shape preset (see below)", NULL, NULL},
        {"dims", 0, CLI_STR, &dims, "SPEC", "explicit dimensions (see below)", NULL, NULL},
        {"type", 't', CLI_STR, &type_s, "TYPE", "weight type (default q8_0)", NULL, NULL},
        {"vocab", 0, CLI_STR, &vocab, "FILE", "copy the vocabulary of this GGUF", NULL, NULL},
        {"seed", 's', CLI_INT, &seed, "S", "random seed (default 0)", NULL, NULL},
        {"threads", 0, CLI_INT, &threads, "N", "threads (default: all CPUs)", NULL, NULL},
        {"name", 0, CLI_STR, &name, "TEXT", "general.name (default: kinetic-synth PRESET)", NULL, NULL},
        {"output", 'o', CLI_STR, &out, "OUT", "the GGUF file to write", NULL, NULL},
        CLI_OPT_END,
    };
    const char *pos[1];
    int n_pos;
    int rc = cli_parse("synth", usage, argc, argv, opts, pos, 0, &n_pos);
    if (rc == 1) {
        print_details();
        return 0;
    }
    if (rc)
        return rc;

    struct kn_err err = {0};
    struct synth_params p = {0};
    enum synth_arch arch = SYNTH_ARCH_COUNT;
    if (!out) {
        fprintf(stderr, "kinetic synth: -o OUT.gguf is required; see 'kinetic synth --help'\n");
        return 2;
    }
    if (!preset && !dims) {
        fprintf(stderr, "kinetic synth: give --preset NAME or --dims SPEC; see 'kinetic synth --help'\n");
        return 2;
    }
    if (seed < 0 || threads < 0 || threads > 1024) {
        fprintf(stderr, "kinetic synth: --seed and --threads must be non-negative (threads <= 1024)\n");
        return 2;
    }
    if ((arch_s && synth_parse_arch(arch_s, &arch, &err) != KN_OK) ||
        synth_parse_ftype(type_s, &p.ftype, &err) != KN_OK ||
        (preset && synth_preset(preset, &arch, &p.dims, &err) != KN_OK) ||
        (dims && synth_parse_dims(dims, &p.dims, &err) != KN_OK)) {
        fprintf(stderr, "kinetic synth: %s\n", err.msg);
        return 2;
    }
    p.arch = arch == SYNTH_ARCH_COUNT ? SYNTH_LLAMA : arch;
    if (vocab && !p.dims.n_vocab)
        p.dims.n_vocab = 1; /* a placeholder: the vocabulary file sets the size */
    if (synth_check_dims(p.arch, &p.dims, &err) != KN_OK) {
        fprintf(stderr, "kinetic synth: %s\n", err.msg);
        return 2;
    }
    char default_name[96];
    snprintf(default_name, sizeof default_name, "kinetic-synth %s %s", preset ? preset : "custom",
             synth_arch_name(p.arch));
    p.name = name ? name : default_name;
    p.vocab_path = vocab;
    p.seed = (uint64_t)seed;
    p.threads = (int)threads;
    p.progress = kn_progress_mode_for(stderr);

    double t0 = kn_now();
    enum kn_status st = synth_write(&p, out, &err);
    if (st != KN_OK) {
        fprintf(stderr, "kinetic synth: %s\n", err.msg);
        return st == KN_E_ARG ? 2 : 1;
    }
    fprintf(stderr, "kinetic synth: wrote %s (%s %s, %.1f s)\n", out, synth_arch_name(p.arch),
            synth_ftype_name(p.ftype), kn_now() - t0);
    return 0;
}
