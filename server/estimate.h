/* Which card fits: the GPU memory a model needs for a job, in parts
 * (weights, gradients, optimizer states, activations, KV cache, framework
 * overhead), each with its formula as text. Pure arithmetic, no store: the
 * API (api-estimate.c) adds the market's offers; the CLI and the console
 * only show what it answers. The formulas, their sources and their limits
 * are in docs/design/estimate.md. */
#ifndef SL_ESTIMATE_H
#define SL_ESTIMATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../lib/error.h"

/* The framework's share of each GPU: CUDA context, kernels, cuBLAS
 * workspaces and the caching allocator's slack. */
#define ESTIMATE_OVERHEAD_BYTES (1LL << 30)
/* Bounds of what can be asked; the input checks name them. */
#define ESTIMATE_MIN_PARAMETERS 1000000LL         /* 1M */
#define ESTIMATE_MAX_PARAMETERS 100000000000000LL /* 100T */
#define ESTIMATE_MAX_CONTEXT    (1 << 20)
#define ESTIMATE_MAX_BATCH      4096
#define ESTIMATE_MAX_LORA_RANK  4096
#define ESTIMATE_MAX_GPUS       8

enum estimate_precision {
    ESTIMATE_FP32,
    ESTIMATE_BF16,
    ESTIMATE_FP16,
    ESTIMATE_INT8,
    ESTIMATE_INT4
};
enum estimate_job {
    ESTIMATE_INFERENCE,
    ESTIMATE_FULL,
    ESTIMATE_LORA
};

/* A llama-style decoder's shape (Hugging Face config.json names). */
struct estimate_shape {
    int64_t layers;        /* num_hidden_layers */
    int64_t hidden;        /* hidden_size */
    int64_t heads;         /* num_attention_heads */
    int64_t kv_heads;      /* num_key_value_heads (grouped-query attention) */
    int64_t head_dim;      /* head_dim, or hidden_size / num_attention_heads */
    int64_t intermediate;  /* intermediate_size (the SwiGLU MLP's width) */
    int64_t vocab;         /* vocab_size */
    int64_t max_positions; /* max_position_embeddings; 0: not known */
    bool tied_embeddings;  /* tie_word_embeddings: one matrix for input and output */
};

struct estimate_model {
    int64_t parameters;
    struct estimate_shape shape;
    char source[160];            /* where the parameters and the shape come from */
    char parameter_formula[320]; /* how the parameters were counted */
};

/* "7B", "13b", "1.5B", "350M", "0.1T": the parameter count, from 1M to
 * 100T. -1 with err (SL_E_INVALID) saying what to write otherwise. */
int estimate_parse_size(const char *text, int64_t *parameters, struct sl_error *err);

/* The parameters of a llama-style decoder of shape s:
 * V·h·(tied ? 1 : 2) + L·(h·d·(2·n_q + 2·n_kv) + 3·h·i + 2·h) + h. */
int64_t estimate_parameters(const struct estimate_shape *s);

/* A model from its size: the parameters as given, the shape of the
 * reference model nearest in size (said in m->source). */
int estimate_model_from_size(const char *text, struct estimate_model *m, struct sl_error *err);

/* A model from a Hugging Face config.json object (only its top-level
 * fields are read). -1 with err (SL_E_INVALID) naming the field and its
 * bounds when one is missing, not an integer or out of bounds. */
int estimate_model_from_config(json_t *config, struct estimate_model *m, struct sl_error *err);

/* "fp32", "bf16", "fp16", "int8", "int4" (and "float32", "bfloat16",
 * "float16"); "inference", "full", "lora" (and "infer", "finetune",
 * "full-finetune", "qlora"). -1 with err saying the choices. */
int estimate_precision_parse(const char *text, enum estimate_precision *p, struct sl_error *err);
int estimate_job_parse(const char *text, enum estimate_job *j, struct sl_error *err);
const char *estimate_precision_name(enum estimate_precision p);
const char *estimate_job_name(enum estimate_job j);

struct estimate_request {
    struct estimate_model model;
    enum estimate_precision precision;
    enum estimate_job job;
    int64_t context;    /* tokens per sequence: 1 to ESTIMATE_MAX_CONTEXT */
    int64_t batch;      /* sequences: 1 to ESTIMATE_MAX_BATCH */
    int64_t lora_rank;  /* LoRA's r: 1 to ESTIMATE_MAX_LORA_RANK */
    bool checkpointing; /* training with activation checkpointing */
};

enum estimate_part {
    ESTIMATE_WEIGHTS,
    ESTIMATE_GRADIENTS,
    ESTIMATE_OPTIMIZER,
    ESTIMATE_ACTIVATIONS,
    ESTIMATE_KV_CACHE,
    ESTIMATE_OVERHEAD,
    ESTIMATE_PARTS
};

struct estimate_result {
    int64_t trainable; /* parameters trained: 0, all of them, or the adapters' */
    int64_t bytes[ESTIMATE_PARTS];
    char formula[ESTIMATE_PARTS][400];
    int64_t total;
};

/* "weights", "gradients", "optimizer", "activations", "kv_cache", "overhead". */
const char *estimate_part_name(enum estimate_part part);

/* Fills out. -1 with err (SL_E_INVALID) when the job does not exist at the
 * precision (a full fine-tune of 8- or 4-bit weights) or the answer is
 * beyond any machine (over 2^60 bytes). */
int estimate_run(const struct estimate_request *r, struct estimate_result *out,
                 struct sl_error *err);

/* The fewest GPUs of vram_mib each, up to max_gpus, whose memory holds r
 * when everything but the overhead is split evenly across them and each
 * pays the overhead; 0 when max_gpus are not enough. */
int estimate_gpus_needed(const struct estimate_result *r, int64_t vram_mib, int max_gpus);

#endif
