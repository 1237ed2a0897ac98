/* The GPU memory a job needs (estimate.h); the formulas and their sources
 * are in docs/design/estimate.md. Parts are computed in double, which is
 * exact for the sizes of real models and cannot overflow for hostile ones,
 * and refused past 2^60 bytes. */
#include "estimate.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_PART_BYTES 1152921504606846976.0 /* 2^60 */

/* Reference shapes for a model given by its size alone: published
 * config.json files of llama-style models. */
static const struct reference {
    const char *name;
    struct estimate_shape shape;
} references[] = {
    /* Qwen2-0.5B */
    { "Qwen2-0.5B", { 24, 896, 14, 2, 64, 4864, 151936, 32768, true } },
    /* Llama-3.2-1B */
    { "Llama-3.2-1B", { 16, 2048, 32, 8, 64, 8192, 128256, 131072, true } },
    /* Llama-3.2-3B */
    { "Llama-3.2-3B", { 28, 3072, 24, 8, 128, 8192, 128256, 131072, true } },
    /* Llama-2-7b-hf */
    { "Llama-2-7B", { 32, 4096, 32, 32, 128, 11008, 32000, 4096, false } },
    /* Llama-2-13b-hf */
    { "Llama-2-13B", { 40, 5120, 40, 40, 128, 13824, 32000, 4096, false } },
    /* CodeLlama-34b-hf */
    { "CodeLlama-34B", { 48, 8192, 64, 8, 128, 22016, 32000, 16384, false } },
    /* LLaMA-65B (the QLoRA paper's largest model) */
    { "LLaMA-65B", { 80, 8192, 64, 64, 128, 22016, 32000, 2048, false } },
    /* Llama-2-70b-hf */
    { "Llama-2-70B", { 80, 8192, 64, 8, 128, 28672, 32000, 4096, false } },
    /* Llama-3.1-405B */
    { "Llama-3.1-405B", { 126, 16384, 128, 8, 128, 53248, 128256, 131072, false } },
};

int estimate_parse_size(const char *text, int64_t *parameters, struct sl_error *err)
{
    static const char usage[] =
        "model must be a size like 7B, 13b, 1.5B or 350M (from 1M to 100T parameters) or a "
        "config.json";
    int64_t whole = 0, fraction = 0, scale = 1000;
    int digits = 0, decimals = 0;
    const char *p = text;

    if (!p)
        return sl_fail(err, SL_E_INVALID, "invalid_field", "%s", usage);
    for (; isdigit((unsigned char)*p) && digits < 7; p++, digits++)
        whole = whole * 10 + (*p - '0');
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p) && decimals < 3; p++, decimals++, scale /= 10)
            fraction = fraction * 10 + (*p - '0');
    int64_t unit = *p == 'M' || *p == 'm'   ? 1000000LL
                   : *p == 'B' || *p == 'b' ? 1000000000LL
                   : *p == 'T' || *p == 't' ? 1000000000000LL
                                            : 0;
    if (digits == 0 || unit == 0 || p[1] != '\0')
        return sl_fail(err, SL_E_INVALID, "invalid_field", "%s", usage);
    /* whole < 10^7 and unit <= 10^12: no overflow before the bound check */
    double value = (double)whole * (double)unit + (double)fraction * (double)(unit / 1000) * scale;
    if (value < ESTIMATE_MIN_PARAMETERS || value > ESTIMATE_MAX_PARAMETERS)
        return sl_fail(err, SL_E_INVALID, "invalid_field", "%s", usage);
    *parameters = (int64_t)value;
    return 0;
}

int64_t estimate_parameters(const struct estimate_shape *s)
{
    int64_t h = s->hidden, d = s->head_dim;
    int64_t attention = h * d * (2 * s->heads + 2 * s->kv_heads);
    int64_t mlp = 3 * h * s->intermediate;

    return s->vocab * h * (s->tied_embeddings ? 1 : 2) + s->layers * (attention + mlp + 2 * h) + h;
}

static void parameter_formula(struct estimate_model *m)
{
    const struct estimate_shape *s = &m->shape;
    snprintf(m->parameter_formula, sizeof(m->parameter_formula),
             "llama-style decoder: P = V·h·%d + L·(h·d·(2·n_q + 2·n_kv) + 3·h·i + 2·h) + h"
             " with V=%" PRId64 " h=%" PRId64 " L=%" PRId64 " d=%" PRId64 " n_q=%" PRId64
             " n_kv=%" PRId64 " i=%" PRId64 " = %" PRId64,
             s->tied_embeddings ? 1 : 2, s->vocab, s->hidden, s->layers, s->head_dim, s->heads,
             s->kv_heads, s->intermediate, estimate_parameters(s));
}

int estimate_model_from_size(const char *text, struct estimate_model *m, struct sl_error *err)
{
    int64_t p;
    size_t best = 0;
    double best_distance = 1e300;

    if (estimate_parse_size(text, &p, err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(references) / sizeof(references[0]); i++) {
        /* the nearest by ratio, max(p/ref, ref/p), as |log(p/ref)| would */
        double ratio = (double)p / (double)estimate_parameters(&references[i].shape);
        double d = ratio >= 1 ? ratio : 1 / ratio;
        if (d < best_distance) {
            best_distance = d;
            best = i;
        }
    }
    *m = (struct estimate_model){ .parameters = p, .shape = references[best].shape };
    snprintf(m->source, sizeof(m->source),
             "%s as given; layers, heads and widths (for the KV cache, activations and "
             "adapters) like %s; a config.json gives the model's own",
             text, references[best].name);
    snprintf(m->parameter_formula, sizeof(m->parameter_formula), "P = %" PRId64 " as given", p);
    return 0;
}

/* config[name]: an integer from min to max, or fallback when absent and
 * fallback >= 0. */
static int config_int(json_t *config, const char *name, int64_t min, int64_t max, int64_t fallback,
                      int64_t *out, struct sl_error *err)
{
    json_t *v = json_object_get(config, name);

    if (!v && fallback >= 0) {
        *out = fallback;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "config.json needs %s: an integer from %" PRId64 " to %" PRId64, name, min,
                       max);
    *out = json_integer_value(v);
    return 0;
}

int estimate_model_from_config(json_t *config, struct estimate_model *m, struct sl_error *err)
{
    struct estimate_shape s = { 0 };
    json_t *tied = json_object_get(config, "tie_word_embeddings");

    if (!json_is_object(config))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "config must be the JSON object of a Hugging Face config.json");
    if (config_int(config, "hidden_size", 1, 1 << 17, -1, &s.hidden, err) < 0 ||
        config_int(config, "num_hidden_layers", 1, 1024, -1, &s.layers, err) < 0 ||
        config_int(config, "num_attention_heads", 1, 4096, -1, &s.heads, err) < 0 ||
        config_int(config, "num_key_value_heads", 1, s.heads, s.heads, &s.kv_heads, err) < 0 ||
        config_int(config, "intermediate_size", 1, 1 << 20, -1, &s.intermediate, err) < 0 ||
        config_int(config, "vocab_size", 1, 1 << 23, -1, &s.vocab, err) < 0 ||
        config_int(config, "max_position_embeddings", 1, 1 << 24, 0, &s.max_positions, err) < 0)
        return -1;
    if (s.heads % s.kv_heads)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "config.json's num_attention_heads (%" PRId64
                       ") must be a multiple of num_key_value_heads (%" PRId64 ")",
                       s.heads, s.kv_heads);
    if (json_object_get(config, "head_dim") && !json_is_null(json_object_get(config, "head_dim"))) {
        if (config_int(config, "head_dim", 1, 4096, -1, &s.head_dim, err) < 0)
            return -1;
    } else if (s.hidden % s.heads) {
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "config.json's hidden_size (%" PRId64
                       ") must be a multiple of num_attention_heads (%" PRId64
                       "), or give head_dim",
                       s.hidden, s.heads);
    } else {
        s.head_dim = s.hidden / s.heads;
    }
    if (tied && !json_is_boolean(tied))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "config.json's tie_word_embeddings must be true or false");
    s.tied_embeddings = json_is_true(tied);
    *m = (struct estimate_model){ .shape = s };
    m->parameters = estimate_parameters(&s);
    if (m->parameters > ESTIMATE_MAX_PARAMETERS)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "config.json describes %" PRId64
                       " parameters: more than the 100T an estimate is made for",
                       m->parameters);
    parameter_formula(m);
    snprintf(m->source, sizeof(m->source), "config.json (counted as a llama-style decoder)");
    return 0;
}

static const struct {
    const char *name;
    enum estimate_precision p;
} precisions[] = {
    { "fp32", ESTIMATE_FP32 }, { "float32", ESTIMATE_FP32 },  { "bf16", ESTIMATE_BF16 },
    { "fp16", ESTIMATE_FP16 }, { "bfloat16", ESTIMATE_BF16 }, { "float16", ESTIMATE_FP16 },
    { "int8", ESTIMATE_INT8 }, { "int4", ESTIMATE_INT4 },
};

static const struct {
    const char *name;
    enum estimate_job j;
} jobs[] = {
    { "inference", ESTIMATE_INFERENCE }, { "infer", ESTIMATE_INFERENCE },
    { "full", ESTIMATE_FULL },           { "finetune", ESTIMATE_FULL },
    { "full-finetune", ESTIMATE_FULL },  { "lora", ESTIMATE_LORA },
    { "qlora", ESTIMATE_LORA },
};

int estimate_precision_parse(const char *text, enum estimate_precision *p, struct sl_error *err)
{
    for (size_t i = 0; text && i < sizeof(precisions) / sizeof(precisions[0]); i++)
        if (strcasecmp(text, precisions[i].name) == 0) {
            *p = precisions[i].p;
            return 0;
        }
    return sl_fail(err, SL_E_INVALID, "invalid_field",
                   "precision must be fp32, bf16, fp16, int8 or int4");
}

int estimate_job_parse(const char *text, enum estimate_job *j, struct sl_error *err)
{
    for (size_t i = 0; text && i < sizeof(jobs) / sizeof(jobs[0]); i++)
        if (strcasecmp(text, jobs[i].name) == 0) {
            *j = jobs[i].j;
            return 0;
        }
    return sl_fail(err, SL_E_INVALID, "invalid_field",
                   "job must be inference, full (a full fine-tune with Adam) or lora");
}

const char *estimate_precision_name(enum estimate_precision p)
{
    static const char *const names[] = { "fp32", "bf16", "fp16", "int8", "int4" };
    return names[p];
}

const char *estimate_job_name(enum estimate_job j)
{
    static const char *const names[] = { "inference", "full", "lora" };
    return names[j];
}

const char *estimate_part_name(enum estimate_part part)
{
    static const char *const names[] = { "weights",     "gradients", "optimizer",
                                         "activations", "kv_cache",  "overhead" };
    return names[part];
}

/* Bytes per weight at precision p. */
static double weight_bytes(enum estimate_precision p)
{
    static const double bytes[] = { 4, 2, 2, 1, 0.5 };
    return bytes[p];
}

/* Bytes per activation and KV-cache value: 8- and 4-bit weights are
 * dequantised and computed in 16 bits. */
static int activation_bytes(enum estimate_precision p)
{
    return p == ESTIMATE_FP32 ? 4 : 2;
}

#define SET(part, value, ...)                                                                      \
    do {                                                                                           \
        parts[part] = (value);                                                                     \
        snprintf(out->formula[part], sizeof(out->formula[part]), __VA_ARGS__);                     \
    } while (0)

/* The LoRA adapters' parameters: r·(d_in + d_out) for each of a layer's
 * seven linear layers (q, k, v, o, gate, up, down), in every layer. */
static int64_t lora_parameters(const struct estimate_shape *s, int64_t rank)
{
    int64_t q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim, h = s->hidden;
    return rank * s->layers * (2 * (h + q) + 2 * (h + kv) + 3 * (h + s->intermediate));
}

int estimate_run(const struct estimate_request *r, struct estimate_result *out,
                 struct sl_error *err)
{
    const struct estimate_shape *s = &r->model.shape;
    const char *prec = estimate_precision_name(r->precision);
    double P = (double)r->model.parameters, wb = weight_bytes(r->precision);
    int ab = activation_bytes(r->precision);
    double L = (double)s->layers, h = (double)s->hidden, S = (double)r->context,
           B = (double)r->batch, V = (double)s->vocab;
    double parts[ESTIMATE_PARTS] = { 0 };

    *out = (struct estimate_result){ 0 };
    if (r->job == ESTIMATE_FULL && (r->precision == ESTIMATE_INT8 || r->precision == ESTIMATE_INT4))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "a full fine-tune trains fp32 or bf16/fp16 weights: for 8- or 4-bit "
                       "weights use job lora (QLoRA)");
    if (r->job == ESTIMATE_INFERENCE) {
        double width = 3 * h + (double)(s->heads * s->head_dim) +
                       2.0 * (double)(s->kv_heads * s->head_dim) + 2.0 * (double)s->intermediate;
        SET(ESTIMATE_WEIGHTS, P * wb, "P × %g B (%s) = %" PRId64 " × %g", wb, prec,
            r->model.parameters, wb);
        SET(ESTIMATE_GRADIENTS, 0, "none: inference computes no gradients");
        SET(ESTIMATE_OPTIMIZER, 0, "none: inference keeps no optimizer states");
        SET(ESTIMATE_ACTIVATIONS, B * S * width * ab + B * V * 4,
            "one layer's working set at prefill, attention scores not stored (FlashAttention/SDPA),"
            " plus the last position's fp32 logits: b·s·(3h + n_q·d + 2·n_kv·d + 2i)·%d B + b·V·4"
            " = %" PRId64 "·%" PRId64 "·%.0f·%d + %" PRId64 "·%" PRId64 "·4",
            ab, r->batch, r->context, width, ab, r->batch, s->vocab);
        SET(ESTIMATE_KV_CACHE, 2.0 * L * (double)s->kv_heads * (double)s->head_dim * S * B * ab,
            "2 (K and V) × L × n_kv × d × s × b × %d B = 2 × %" PRId64 " × %" PRId64 " × %" PRId64
            " × %" PRId64 " × %" PRId64 " × %d",
            ab, s->layers, s->kv_heads, s->head_dim, r->context, r->batch, ab);
    } else {
        double coefficient = 34.0 * ab / 2, stored;
        if (r->checkpointing) {
            stored = (2.0 * ab / 2 * L + coefficient) * S * B * h;
            SET(ESTIMATE_ACTIVATIONS, stored + B * S * V * 4,
                "checkpointing on: each layer's input kept, one layer recomputed at a time, plus "
                "the fp32 logits for the loss: (%g·L + %g)·s·b·h + b·s·V·4 = (%g·%" PRId64
                " + %g)·%" PRId64 "·%" PRId64 "·%" PRId64 " + %" PRId64 "·%" PRId64 "·%" PRId64
                "·4 (Korthikanti et al. 2022, full recomputation)",
                2.0 * ab / 2, coefficient, 2.0 * ab / 2, s->layers, coefficient, r->context,
                r->batch, s->hidden, r->batch, r->context, s->vocab);
        } else {
            stored = coefficient * L * S * B * h;
            SET(ESTIMATE_ACTIVATIONS, stored + B * S * V * 4,
                "checkpointing off: %g·s·b·h per layer (Korthikanti et al. 2022: 34·s·b·h in 16 "
                "bit, the attention scores' 5·a·s²·b left out as FlashAttention does not store "
                "them) plus the fp32 logits for the loss: %g·L·s·b·h + b·s·V·4 = %g·%" PRId64
                "·%" PRId64 "·%" PRId64 "·%" PRId64 " + %" PRId64 "·%" PRId64 "·%" PRId64 "·4",
                coefficient, coefficient, coefficient, s->layers, r->context, r->batch, s->hidden,
                r->batch, r->context, s->vocab);
        }
        SET(ESTIMATE_KV_CACHE, 0, "none: training runs without a KV cache");
    }
    if (r->job == ESTIMATE_FULL) {
        out->trainable = r->model.parameters;
        SET(ESTIMATE_WEIGHTS, P * wb, "P × %g B (%s) = %" PRId64 " × %g", wb, prec,
            r->model.parameters, wb);
        SET(ESTIMATE_GRADIENTS, P * wb, "P × %g B (%s gradients) = %" PRId64 " × %g", wb, prec,
            r->model.parameters, wb);
        if (r->precision == ESTIMATE_FP32)
            SET(ESTIMATE_OPTIMIZER, P * 8, "Adam's two moments in fp32: P × 8 B = %" PRId64 " × 8",
                r->model.parameters);
        else
            SET(ESTIMATE_OPTIMIZER, P * 12,
                "mixed precision Adam: fp32 master weights + two fp32 moments, P × 12 B = %" PRId64
                " × 12",
                r->model.parameters);
    } else if (r->job == ESTIMATE_LORA) {
        out->trainable = lora_parameters(s, r->lora_rank);
        double T = (double)out->trainable;
        SET(ESTIMATE_WEIGHTS, P * wb + T * 4,
            "frozen base P × %g B (%s) + fp32 adapters T × 4 B = %" PRId64 " × %g + %" PRId64
            " × 4, T = r·L·(2(h + n_q·d) + 2(h + n_kv·d) + 3(h + i)) with r=%" PRId64
            " on q, k, v, o, gate, up, down",
            wb, prec, r->model.parameters, wb, out->trainable, r->lora_rank);
        SET(ESTIMATE_GRADIENTS, T * 4, "the adapters' fp32 gradients: T × 4 B = %" PRId64 " × 4",
            out->trainable);
        SET(ESTIMATE_OPTIMIZER, T * 8,
            "Adam's two fp32 moments of the adapters: T × 8 B = %" PRId64 " × 8", out->trainable);
    }
    SET(ESTIMATE_OVERHEAD, (double)ESTIMATE_OVERHEAD_BYTES,
        "framework, a constant per GPU: CUDA context and kernels, cuBLAS workspaces, the caching "
        "allocator's slack = 1 GiB");
    for (int i = 0; i < ESTIMATE_PARTS; i++) {
        if (!(parts[i] <= MAX_PART_BYTES))
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "the %s alone would be over 2^60 bytes: check the model, context "
                           "and batch",
                           estimate_part_name(i));
        out->bytes[i] = (int64_t)parts[i];
        out->bytes[i] += (double)out->bytes[i] < parts[i]; /* rounded up */
        out->total += out->bytes[i];
    }
    return 0;
}

int estimate_gpus_needed(const struct estimate_result *r, int64_t vram_mib, int max_gpus)
{
    int64_t vram = vram_mib * 1024 * 1024, shared = r->total - r->bytes[ESTIMATE_OVERHEAD];

    if (vram_mib <= 0 || vram_mib > (1LL << 30) || vram <= r->bytes[ESTIMATE_OVERHEAD])
        return 0;
    for (int n = 1; n <= max_gpus; n++)
        if ((shared + n - 1) / n + r->bytes[ESTIMATE_OVERHEAD] <= vram)
            return n;
    return 0;
}
