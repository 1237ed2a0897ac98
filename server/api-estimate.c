/* POST /v1/estimate: which card fits. The memory a model needs for a job
 * (estimate.h), part by part with the formulas, and the market's offers
 * whose GPUs hold it: one implementation the CLI and the console both show. */
#include "estimate.h"
#include "routes.h"

#include "../lib/cleanup.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CONTEXT   4096
#define DEFAULT_LORA_RANK 16

/* The request body into r; -1 with err saying what to write. */
static int estimate_request_parse(struct api_request *req, struct estimate_request *r,
                                  const char **region, struct sl_error *err)
{
    const char *model = NULL, *precision = "bf16", *job = "inference";
    json_t *config = NULL;
    int64_t context = 0, batch = 1, rank = DEFAULT_LORA_RANK;
    bool checkpointing = false;
    const struct sl_json_field fields[] = {
        { "model", SL_JSON_STRING, .max_len = 32, .out = &model },
        { "config", SL_JSON_OBJECT, .out = &config },
        { "precision", SL_JSON_STRING, .max_len = 16, .out = &precision },
        { "job", SL_JSON_STRING, .max_len = 16, .out = &job },
        { "context", SL_JSON_INT, .min = 1, .max = ESTIMATE_MAX_CONTEXT, .out = &context },
        { "batch", SL_JSON_INT, .min = 1, .max = ESTIMATE_MAX_BATCH, .out = &batch },
        { "lora_rank", SL_JSON_INT, .min = 1, .max = ESTIMATE_MAX_LORA_RANK, .out = &rank },
        { "checkpointing", SL_JSON_BOOL, .out = &checkpointing },
        { "region", SL_JSON_STRING, .max_len = 32, .out = region },
    };

    *r = (struct estimate_request){ 0 };
    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (!model == !config)
        return sl_fail(err, SL_E_INVALID, model ? "invalid_field" : "missing_field",
                       "model must be a size like 7B or a config.json: send \"model\": \"7B\" or "
                       "\"config\": {the config.json object}, one of them");
    if ((model ? estimate_model_from_size(model, &r->model, err)
               : estimate_model_from_config(config, &r->model, err)) < 0 ||
        estimate_precision_parse(precision, &r->precision, err) < 0 ||
        estimate_job_parse(job, &r->job, err) < 0)
        return -1;
    int64_t longest = config ? r->model.shape.max_positions : 0;
    if (!context)
        context = longest && longest < DEFAULT_CONTEXT ? longest : DEFAULT_CONTEXT;
    if (longest && context > longest)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "context %" PRId64 " is longer than the model's max_position_embeddings "
                       "(%" PRId64 "): give a context up to that",
                       context, longest);
    if (r->job == ESTIMATE_LORA && rank > r->model.shape.hidden)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "lora_rank %" PRId64 " is over the model's hidden size (%" PRId64
                       "): ranks are 4 to 256 in practice",
                       rank, r->model.shape.hidden);
    r->context = context;
    r->batch = batch;
    r->lora_rank = rank;
    r->checkpointing = checkpointing;
    return 0;
}

/* An offer's total price for n GPUs, for sorting: unpriced ones last. */
static int64_t offer_price(json_t *o)
{
    json_t *p = json_object_get(o, "price_per_hour_micros");
    return json_is_integer(p) ? json_integer_value(p) : INT64_MAX;
}

static int by_price(const void *a, const void *b)
{
    int64_t x = offer_price(*(json_t *const *)a), y = offer_price(*(json_t *const *)b);
    return x < y ? -1 : x > y;
}

/* The hosts whose free GPUs (up to ESTIMATE_MAX_GPUS) hold the estimate,
 * cheapest first, each with the GPUs it needs and their price. */
static json_t *fitting_offers(struct server *srv, const char *region,
                              const struct estimate_result *e, struct sl_error *err)
{
    cleanup_json json_t *hosts = api_market_offers(srv, region, err);
    size_t i, n = 0;
    json_t *h;

    if (!hosts)
        return NULL;
    cleanup_free json_t **fit = calloc(json_array_size(hosts) + 1, sizeof(*fit));
    if (!fit)
        return sl_fail(err, SL_E_INTERNAL, NULL, "out of memory"), NULL;
    json_array_foreach(hosts, i, h)
    {
        int64_t free = json_integer_value(json_object_get(h, "gpus_free"));
        int most = free < ESTIMATE_MAX_GPUS ? (int)free : ESTIMATE_MAX_GPUS;
        int need =
            estimate_gpus_needed(e, json_integer_value(json_object_get(h, "vram_mib")), most);
        json_t *price = json_object_get(h, "price_per_hour_micros");
        if (need == 0)
            continue;
        fit[n++] = json_pack(
            "{s:O, s:O, s:O, s:O, s:O, s:O, s:i, s:O, s:O, s:o, s:O}", "region",
            json_object_get(h, "region"), "node_id", json_object_get(h, "node_id"), "hostname",
            json_object_get(h, "hostname"), "gpu_model", json_object_get(h, "gpu_model"),
            "gpu_model_id", json_object_get(h, "gpu_model_id"), "vram_mib",
            json_object_get(h, "vram_mib"), "gpus_needed", need, "gpus_free",
            json_object_get(h, "gpus_free"), "simulated", json_object_get(h, "simulated"),
            "price_per_hour_micros",
            json_is_integer(price) ? json_integer(json_integer_value(price) * need) : json_null(),
            "cuda_version", json_object_get(h, "cuda_version"));
    }
    qsort(fit, n, sizeof(*fit), by_price);
    json_t *out = json_array();
    for (i = 0; i < n; i++)
        json_array_append_new(out, fit[i]);
    return out;
}

/* Every GPU model of the catalog with the GPUs of it the job needs (null
 * when more than ESTIMATE_MAX_GPUS), whether or not a host has them free. */
static json_t *fitting_models(struct store *st, const struct estimate_result *e,
                              struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st, "SELECT id, name, vram_mib FROM gpu_models ORDER BY vram_mib DESC, name",
                    DB_NO_ARGS, err);
    cleanup_json json_t *out = json_array();
    int rc;

    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1) {
        int need = estimate_gpus_needed(e, db_int(rows, 2), ESTIMATE_MAX_GPUS);
        json_array_append_new(out,
                              json_pack("{s:s, s:s, s:I, s:o}", "id", db_text(rows, 0), "name",
                                        db_text(rows, 1), "vram_mib", (json_int_t)db_int(rows, 2),
                                        "gpus_needed", need ? json_integer(need) : json_null()));
    }
    return rc < 0 ? NULL : json_incref(out);
}

int api_estimate(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct estimate_request r;
    struct estimate_result e;
    const char *region = NULL;
    const struct estimate_shape *s = &r.model.shape;

    if (estimate_request_parse(req, &r, &region, err) < 0 || estimate_run(&r, &e, err) < 0)
        return -1;
    cleanup_json json_t *offers = fitting_offers(req->srv, region, &e, err);
    cleanup_json json_t *models = offers ? fitting_models(req->srv->store, &e, err) : NULL;
    if (!models)
        return -1;
    json_t *parts = json_array();
    for (int i = 0; i < ESTIMATE_PARTS; i++)
        json_array_append_new(parts,
                              json_pack("{s:s, s:I, s:s}", "name", estimate_part_name(i), "bytes",
                                        (json_int_t)e.bytes[i], "formula", e.formula[i]));
    json_t *shape = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "num_hidden_layers",
                              (json_int_t)s->layers, "hidden_size", (json_int_t)s->hidden,
                              "num_attention_heads", (json_int_t)s->heads, "num_key_value_heads",
                              (json_int_t)s->kv_heads, "head_dim", (json_int_t)s->head_dim,
                              "intermediate_size", (json_int_t)s->intermediate, "vocab_size",
                              (json_int_t)s->vocab, "tie_word_embeddings", s->tied_embeddings);
    api_reply(
        res, 200,
        json_pack("{s:{s:I, s:s, s:s, s:o}, s:s, s:s, s:I, s:I, s:I, s:b, s:I, s:o, s:I, s:I,"
                  " s:s, s:O, s:O, s:s}",
                  "model", "parameters", (json_int_t)r.model.parameters, "source", r.model.source,
                  "parameter_formula", r.model.parameter_formula, "shape", shape, "precision",
                  estimate_precision_name(r.precision), "job", estimate_job_name(r.job), "context",
                  (json_int_t)r.context, "batch", (json_int_t)r.batch, "lora_rank",
                  (json_int_t)r.lora_rank, "checkpointing", r.checkpointing, "trainable_parameters",
                  (json_int_t)e.trainable, "parts", parts, "total_bytes", (json_int_t)e.total,
                  "overhead_per_gpu_bytes", (json_int_t)ESTIMATE_OVERHEAD_BYTES, "fit_rule",
                  "a host fits when its free GPUs, up to 8, hold the total with everything but "
                  "the overhead split evenly and the overhead on each GPU",
                  "offers", offers, "gpu_models", models, "currency", req->srv->cfg.currency));
    return 0;
}
