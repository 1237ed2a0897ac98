/* Which card fits (server/estimate.c), checked against published figures;
 * each test cites its source. GB here is 10^9 bytes, GiB 2^30. */
#include "harness.h"

#include "../../lib/json.h"
#include "../../server/estimate.h"

#include <jansson.h>
#include <stdio.h>

#define GIB (1024.0 * 1024 * 1024)

/* Llama-2-7b-hf's config.json (huggingface.co/meta-llama/Llama-2-7b-hf). */
static json_t *llama2_7b_config(void)
{
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b}", "hidden_size", 4096,
                     "num_hidden_layers", 32, "num_attention_heads", 32, "num_key_value_heads", 32,
                     "intermediate_size", 11008, "vocab_size", 32000, "max_position_embeddings",
                     4096, "tie_word_embeddings", 0);
}

static int run(const char *size, json_t *config, const char *precision, const char *job,
               int64_t context, int64_t batch, int64_t rank, bool checkpointing,
               struct estimate_result *out)
{
    struct sl_error err = SL_ERROR_INIT;
    struct estimate_request r = {
        .context = context, .batch = batch, .lora_rank = rank, .checkpointing = checkpointing
    };
    int rc = config ? estimate_model_from_config(config, &r.model, &err)
                    : estimate_model_from_size(size, &r.model, &err);

    if (rc == 0)
        rc = estimate_precision_parse(precision, &r.precision, &err);
    if (rc == 0)
        rc = estimate_job_parse(job, &r.job, &err);
    if (rc == 0)
        rc = estimate_run(&r, out, &err);
    if (rc < 0)
        test_fail(__FILE__, __LINE__, "estimate %s %s %s: %s", size ? size : "config", precision,
                  job, err.message);
    return rc;
}

TEST(sizes_parse)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t p = 0;

    CHECK_EQ_INT(estimate_parse_size("7B", &p, &err), 0);
    CHECK_EQ_INT(p, 7000000000LL);
    CHECK_EQ_INT(estimate_parse_size("13b", &p, &err), 0);
    CHECK_EQ_INT(p, 13000000000LL);
    CHECK_EQ_INT(estimate_parse_size("350M", &p, &err), 0);
    CHECK_EQ_INT(p, 350000000LL);
    CHECK_EQ_INT(estimate_parse_size("1.5B", &p, &err), 0);
    CHECK_EQ_INT(p, 1500000000LL);
    CHECK_EQ_INT(estimate_parse_size("6.74b", &p, &err), 0);
    CHECK_EQ_INT(p, 6740000000LL);
    CHECK_EQ_INT(estimate_parse_size("100T", &p, &err), 0);
    static const char *const bad[] = { "",        "7",         "B",    "7GB",  "-7B", "7 B",
                                       "1e9B",    "0.5M",      "101T", "nanB", ".5B", "7B ",
                                       "1.2345B", "99999999B", "7Bx",  "0B" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sl_error e = SL_ERROR_INIT;
        if (!CHECK(estimate_parse_size(bad[i], &p, &e) < 0))
            fprintf(stderr, "  accepted '%s'\n", bad[i]);
        CHECK(strstr(e.message, "model must be a size like 7B") != NULL);
    }
}

/* Llama-2-7b-hf has 6,738,415,616 parameters (the figure PyTorch's
 * model.num_parameters() gives; its Hugging Face page rounds it to "6.74B
 * params"); Llama-2-70b-hf 68,976,648,192 (the page: "69B params"). */
TEST(parameters_from_config)
{
    struct sl_error err = SL_ERROR_INIT;
    struct estimate_model m;
    cleanup_json json_t *c7 = llama2_7b_config();
    cleanup_json json_t *c70 =
        json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "hidden_size", 8192, "num_hidden_layers", 80,
                  "num_attention_heads", 64, "num_key_value_heads", 8, "intermediate_size", 28672,
                  "vocab_size", 32000);

    CHECK_EQ_INT(estimate_model_from_config(c7, &m, &err), 0);
    CHECK_EQ_INT(m.parameters, 6738415616LL);
    CHECK_EQ_INT(m.shape.head_dim, 128);
    CHECK(strstr(m.parameter_formula, "= 6738415616") != NULL);
    CHECK_EQ_INT(estimate_model_from_config(c70, &m, &err), 0);
    CHECK_EQ_INT(m.parameters, 68976648192LL);
    CHECK_EQ_INT(m.shape.kv_heads, 8);
}

/* Hugging Face, "Model memory anatomy" / the Accelerate model-memory
 * guidance: inference needs about 2 bytes per parameter in fp16/bf16, so a
 * 7B model's weights are ~14 GB; 4 in fp32, 1 in int8, 0.5 in int4. */
TEST(inference_weights_per_precision)
{
    struct estimate_result r;

    if (run("7B", NULL, "bf16", "inference", 4096, 1, 16, false, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_WEIGHTS], 14000000000LL);
    if (run("7B", NULL, "fp32", "inference", 4096, 1, 16, false, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_WEIGHTS], 28000000000LL);
    if (run("7B", NULL, "int8", "inference", 4096, 1, 16, false, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_WEIGHTS], 7000000000LL);
    if (run("7B", NULL, "int4", "inference", 4096, 1, 16, false, &r) == 0) {
        CHECK_EQ_INT(r.bytes[ESTIMATE_WEIGHTS], 3500000000LL);
        CHECK_EQ_INT(r.bytes[ESTIMATE_GRADIENTS], 0);
        CHECK_EQ_INT(r.bytes[ESTIMATE_OPTIMIZER], 0);
        CHECK_EQ_INT(r.bytes[ESTIMATE_OVERHEAD], 1LL << 30);
    }
}

/* NVIDIA, "Mastering LLM Techniques: Inference Optimization" (2023): the KV
 * cache of Llama 2 7B in 16 bit is 2 · 32 layers · 4096 (32 heads × 128) ·
 * 2 bytes = 0.5 MiB per token; batch 1 at 4096 tokens is ~2 GB. The 70B's
 * grouped-query attention (8 KV heads) keeps 8× less per layer. */
TEST(kv_cache_llama2)
{
    struct estimate_result r;
    cleanup_json json_t *c7 = llama2_7b_config();

    if (run(NULL, c7, "fp16", "inference", 1, 1, 16, false, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_KV_CACHE], 512 * 1024);
    if (run(NULL, c7, "bf16", "inference", 4096, 1, 16, false, &r) == 0) {
        CHECK_EQ_INT(r.bytes[ESTIMATE_KV_CACHE], 2LL << 30);
        CHECK(strstr(r.formula[ESTIMATE_KV_CACHE], "2 × 32 × 32 × 128 × 4096 × 1 × 2") != NULL);
    }
    /* the size alone takes Llama-2-7B's shape */
    if (run("7B", NULL, "bf16", "inference", 4096, 8, 16, false, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_KV_CACHE], 16LL << 30);
    /* int8 weights, 16-bit cache */
    if (run("7B", NULL, "int8", "inference", 4096, 1, 16, false, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_KV_CACHE], 2LL << 30);
    /* 70B: 2 · 80 · 8 · 128 · 2 = 320 KiB per token */
    if (run("70B", NULL, "bf16", "inference", 1, 1, 16, false, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_KV_CACHE], 320 * 1024);
}

/* Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
 * Parameter Models" (2019), section 3.1: mixed-precision Adam holds 2Ψ +
 * 2Ψ + 12Ψ = 16Ψ bytes, "a 1.5B parameter GPT-2 model requires at least
 * 24GB"; EleutherAI's "Transformer Math 101" (2023) gives the same 16
 * bytes per parameter (4 weights+grads in 16 bit, 12 optimizer). */
TEST(full_finetune_sixteen_bytes_per_parameter)
{
    struct estimate_result r;

    if (run("1.5B", NULL, "bf16", "full", 1024, 1, 16, false, &r) == 0) {
        CHECK_EQ_INT(r.bytes[ESTIMATE_WEIGHTS] + r.bytes[ESTIMATE_GRADIENTS] +
                         r.bytes[ESTIMATE_OPTIMIZER],
                     24000000000LL);
        CHECK_EQ_INT(r.bytes[ESTIMATE_OPTIMIZER], 18000000000LL);
        CHECK_EQ_INT(r.bytes[ESTIMATE_KV_CACHE], 0);
        CHECK_EQ_INT(r.trainable, 1500000000LL);
    }
    /* fp32: 4 + 4 + 8, the same 16 */
    if (run("7B", NULL, "fp32", "full", 1024, 1, 16, false, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_WEIGHTS] + r.bytes[ESTIMATE_GRADIENTS] +
                         r.bytes[ESTIMATE_OPTIMIZER],
                     112000000000LL);
    /* 8- and 4-bit weights are not trained in full */
    struct sl_error err = SL_ERROR_INIT;
    struct estimate_request q = {
        .precision = ESTIMATE_INT4, .job = ESTIMATE_FULL, .context = 1, .batch = 1, .lora_rank = 1
    };
    CHECK_EQ_INT(estimate_model_from_size("7B", &q.model, &err), 0);
    CHECK_EQ_INT(estimate_run(&q, &r, &err), -1);
    CHECK(strstr(err.message, "use job lora") != NULL);
}

/* Korthikanti et al., "Reducing Activation Recomputation in Large
 * Transformer Models" (2022), eq. 1-2: a layer stores s·b·h·(34 + 5·a·s/h)
 * bytes of 16-bit activations; with FlashAttention the scores' 5·a·s/h
 * term is not stored, leaving 34·s·b·h; full recomputation keeps 2·s·b·h
 * per layer. Plus the fp32 logits, b·s·V·4. */
TEST(training_activations)
{
    struct estimate_result r;
    cleanup_json json_t *c7 = llama2_7b_config();
    int64_t logits = 1LL * 2048 * 32000 * 4;

    if (run(NULL, c7, "bf16", "full", 2048, 1, 16, false, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_ACTIVATIONS], 34LL * 2048 * 4096 * 32 + logits);
    if (run(NULL, c7, "bf16", "full", 2048, 1, 16, true, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_ACTIVATIONS], (2LL * 32 + 34) * 2048 * 4096 + logits);
    if (run(NULL, c7, "fp32", "full", 2048, 1, 16, false, &r) == 0)
        CHECK_EQ_INT(r.bytes[ESTIMATE_ACTIVATIONS], 68LL * 2048 * 4096 * 32 + logits);
}

/* Dettmers et al., "QLoRA: Efficient Finetuning of Quantized LLMs" (2023):
 * LoRA r=64 on all linear layers of a 4-bit LLaMA-65B "finetunes on a
 * single 48GB GPU", while 16-bit full fine-tuning of it "requires more than
 * 780 GB". LoRA's adapters are r·(d_in + d_out) per matrix (Hu et al.,
 * "LoRA", 2021): for LLaMA-7B, 64·32·(2·8192 + 2·8192 + 3·15104) =
 * 159,907,840. */
TEST(qlora_65b_fits_48gb)
{
    struct estimate_result r;

    if (run("7B", NULL, "int4", "lora", 512, 1, 64, true, &r) == 0)
        CHECK_EQ_INT(r.trainable, 159907840LL);
    if (run("65B", NULL, "int4", "lora", 512, 1, 64, true, &r) == 0) {
        /* an RTX A6000 / A40 / L40S: 48 GB, 49140 MiB */
        CHECK_EQ_INT(estimate_gpus_needed(&r, 49140, 8), 1);
        CHECK(r.total < 48.0 * GIB);
    }
    if (run("65B", NULL, "bf16", "full", 512, 1, 64, true, &r) == 0)
        CHECK(r.total > 780000000000LL);
    /* 16-bit LoRA of the 65B needs the 130 GB of weights: not one 48 GB card */
    if (run("65B", NULL, "bf16", "lora", 512, 1, 64, true, &r) == 0)
        CHECK_EQ_INT(estimate_gpus_needed(&r, 49140, 1), 0);
}

/* Fitting cards: 7B in bf16 serves on one 24 GB RTX 4090 (24564 MiB) at
 * 4096 tokens; 70B in bf16 (138 GB of weights) needs two 80 GB A100s. */
TEST(gpus_needed)
{
    struct estimate_result r;

    if (run("7B", NULL, "bf16", "inference", 4096, 1, 16, false, &r) == 0) {
        CHECK_EQ_INT(estimate_gpus_needed(&r, 24564, 8), 1);
        CHECK_EQ_INT(estimate_gpus_needed(&r, 12288, 8), 2);
        CHECK_EQ_INT(estimate_gpus_needed(&r, 1024, 8), 0); /* the overhead alone */
        CHECK_EQ_INT(estimate_gpus_needed(&r, 0, 8), 0);
    }
    if (run("70B", NULL, "bf16", "inference", 4096, 1, 16, false, &r) == 0) {
        CHECK_EQ_INT(estimate_gpus_needed(&r, 81920, 8), 2);
        CHECK_EQ_INT(estimate_gpus_needed(&r, 81920, 1), 0);
    }
}

/* A hostile config is refused with a message naming the field, never
 * overflows. */
TEST(hostile_configs)
{
    static const char *const bad[] = {
        "[]",
        "{}",
        "{\"hidden_size\": 4096}",
        "{\"hidden_size\": -1, \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
        " \"intermediate_size\": 11008, \"vocab_size\": 32000}",
        "{\"hidden_size\": 1e300, \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
        " \"intermediate_size\": 11008, \"vocab_size\": 32000}",
        "{\"hidden_size\": 9223372036854775807, \"num_hidden_layers\": 32,"
        " \"num_attention_heads\": 32, \"intermediate_size\": 11008, \"vocab_size\": 32000}",
        "{\"hidden_size\": \"4096\", \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
        " \"intermediate_size\": 11008, \"vocab_size\": 32000}",
        "{\"hidden_size\": 4096, \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
        " \"num_key_value_heads\": 5, \"intermediate_size\": 11008, \"vocab_size\": 32000}",
        "{\"hidden_size\": 4096, \"num_hidden_layers\": 32, \"num_attention_heads\": 0,"
        " \"intermediate_size\": 11008, \"vocab_size\": 32000}",
        "{\"hidden_size\": 4097, \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
        " \"intermediate_size\": 11008, \"vocab_size\": 32000}",
        "{\"hidden_size\": 4096, \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
        " \"intermediate_size\": 11008, \"vocab_size\": 32000, \"tie_word_embeddings\": 3}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sl_error err = SL_ERROR_INIT;
        struct estimate_model m;
        cleanup_json json_t *c = json_loads(bad[i], 0, NULL);
        if (!CHECK(c != NULL))
            continue;
        if (!CHECK(estimate_model_from_config(c, &m, &err) < 0))
            fprintf(stderr, "  accepted %s\n", bad[i]);
        CHECK(strstr(err.message, "config") != NULL);
    }
    /* the largest shape accepted: an answer, or a refusal, never a wrap */
    struct sl_error err = SL_ERROR_INIT;
    struct estimate_request r = { .precision = ESTIMATE_FP32,
                                  .job = ESTIMATE_FULL,
                                  .context = ESTIMATE_MAX_CONTEXT,
                                  .batch = ESTIMATE_MAX_BATCH,
                                  .lora_rank = ESTIMATE_MAX_LORA_RANK };
    struct estimate_result out;
    cleanup_json json_t *huge =
        json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "hidden_size", 1 << 17, "num_hidden_layers",
                  1024, "num_attention_heads", 4096, "head_dim", 4096, "intermediate_size", 1 << 20,
                  "vocab_size", 1 << 23);
    int rc = estimate_model_from_config(huge, &r.model, &err);
    if (rc == 0)
        rc = estimate_run(&r, &out, &err);
    CHECK_EQ_INT(rc, -1);
    /* big but within bounds: the parts stay positive */
    cleanup_json json_t *c7 = llama2_7b_config();
    CHECK_EQ_INT(estimate_model_from_config(c7, &r.model, &err), 0);
    r.job = ESTIMATE_INFERENCE;
    rc = estimate_run(&r, &out, &err);
    CHECK_EQ_INT(rc, 0);
    for (int i = 0; i < ESTIMATE_PARTS; i++)
        CHECK(out.bytes[i] >= 0);
    CHECK(out.total > 0);
}
