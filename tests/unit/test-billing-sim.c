/* A seeded simulation of the billing engine (server/billing*.c) driven
 * through the real scheduler, instance verbs, node heartbeats and reports,
 * catalog and ledger on a real SQLite store, with a fake clock.
 *
 * Random creates, stops, starts (GPU and no-GPU mode), releases, price
 * changes, host outages (short ones, billed, and long ones, not billed),
 * plan purchases, renewals and refunds, top-ups and balances running dry,
 * for at least 1,000,000 instance-hours (SUANLI_SIM_HOURS changes that).
 * An independent model of DESIGN.md section 4 predicts every instance's
 * total charge (the exact floor integral of its rates over its billed
 * intervals, plus plans, minus refunds), every balance and every state the
 * money rules bring about; after every step the store must agree to the
 * micro, every new ledger entry must account for its balance's change,
 * every settlement key must follow its meter's sequence, and no charge may
 * cover time after a release or while a host was out.
 *
 * SUANLI_SIM_SEED=N replays a run; a failure prints the seed. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/json.h"
#include "../../lib/timefmt.h"
#include "../../lib/xalloc.h"
#include "../../server/billing.h"
#include "../../server/catalog.h"
#include "../../server/instances.h"
#include "../../server/ledger.h"
#include "../../server/nodes.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define N_USERS       24
#define N_NODES       16
#define GPUS_PER_NODE 8
#define MAX_INSTANCES 8192
#define OFFLINE_AFTER 86400 /* steps reach 20 h: a silence is longer */
#define FREE_GIB      50

/* ---- the clock and the dice ---- */

static int64_t fake_now;
static uint64_t rng;

static int64_t clock_now(void)
{
    return fake_now;
}

static uint64_t dice(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int64_t range(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(dice() % (uint64_t)(hi - lo + 1));
}

static bool chance(int percent)
{
    return range(1, 100) <= percent;
}

/* ---- the model ---- */

enum state {
    CREATING,
    RUNNING,
    STOPPING,
    STOPPED,
    STARTING,
    RELEASING,
    RELEASED
};
static const char *const state_names[] = { "creating", "running",   "stopping", "stopped",
                                           "starting", "releasing", "released" };

struct interval {
    int64_t amount, period, start, end; /* end -1: open */
    bool compute;
};

struct outage {
    int64_t from, to;
};

struct m_node {
    char id[SL_ID_MAX];
    int model;
    int64_t heartbeat;
    int64_t silent_until; /* no reports before this */
    struct outage *outages;
    size_t n_outages;
};

struct m_user {
    char id[SL_ID_MAX];
    int64_t credits;
};

struct m_inst {
    char id[SL_ID_MAX];
    int user, node, model;
    int64_t gpus, disk;
    enum state state;
    bool nogpu;
    int plan; /* 0 payg, 1 day, 2 week, 3 month */
    bool auto_renew;
    int64_t plan_expires, stopped_at, released_at;
    int64_t plan_price;  /* paid for the current period */
    int64_t plan_hourly; /* the pay-as-you-go rate when it was bought */
    int64_t plan_money;  /* plans bought minus refunds */
    struct interval *iv;
    size_t n_iv;
    int64_t db_charged; /* the store's charges rows, summed as they appear */
    int64_t db_open;    /* its meters' open pieces (billing_open_pieces) now */
};

static const char *const plan_names[] = { "payg", "day", "week", "month" };
static const int64_t plan_seconds[] = { 0, 86400, 7 * 86400, 30 * 86400 };
static const char *const model_names[] = { "RTX 4090", "H200" };

static struct {
    struct server srv;
    struct m_node nodes[N_NODES];
    struct m_user users[N_USERS];
    struct m_inst *inst;
    size_t n_inst;
    char model_ids[2][SL_ID_MAX];
    int64_t gpu_price[2], nogpu_price, disk_price, disk_free;
    int64_t last_charge_seq, last_entry_seq;
    int64_t *meter_settlements; /* by meter seq: settlements seen */
    size_t meter_cap;
    int64_t instance_seconds;
    int64_t steps, settlements, outages, plans, refunds, refunds_none, renewals, balance_stops,
        auto_releases, refusals;
    bool failed;
} sim;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        test_fail(__FILE__, __LINE__, __VA_ARGS__);                                                \
        sim.failed = true;                                                                         \
    } while (0)

/* Instances by id: an open-addressing table of indexes into sim.inst. */
static size_t id_hash(const char *id)
{
    size_t h = 5381;
    while (*id)
        h = h * 33 + (unsigned char)*id++;
    return h & (2 * MAX_INSTANCES - 1);
}

static int32_t by_id[2 * MAX_INSTANCES];

static void index_add(size_t i)
{
    size_t h = id_hash(sim.inst[i].id);
    while (by_id[h])
        h = (h + 1) & (2 * MAX_INSTANCES - 1);
    by_id[h] = (int32_t)i + 1;
}

static struct m_inst *find(const char *id)
{
    for (size_t h = id_hash(id); by_id[h]; h = (h + 1) & (2 * MAX_INSTANCES - 1))
        if (strcmp(sim.inst[by_id[h] - 1].id, id) == 0)
            return &sim.inst[by_id[h] - 1];
    return NULL;
}

static void iv_add(struct m_inst *in, int64_t amount, int64_t period, bool compute)
{
    in->iv = xrealloc(in->iv, (in->n_iv + 1) * sizeof(*in->iv));
    in->iv[in->n_iv++] = (struct interval){ amount, period, fake_now, -1, compute };
}

static void iv_close(struct m_inst *in, bool storage_too)
{
    for (size_t i = 0; i < in->n_iv; i++)
        if (in->iv[i].end < 0 && (storage_too || in->iv[i].compute))
            in->iv[i].end = fake_now;
}

static bool has_open_compute(const struct m_inst *in)
{
    for (size_t i = 0; i < in->n_iv; i++)
        if (in->iv[i].end < 0 && in->iv[i].compute)
            return true;
    return false;
}

static int64_t floor_div(__int128 a, int64_t b)
{
    return (int64_t)(a / b); /* a >= 0 */
}

/* What the instance should have been charged by now: every interval up to
 * its end, now, and its host's last report. */
static int64_t expected_charged(const struct m_inst *in)
{
    int64_t bound = sim.nodes[in->node].heartbeat, total = in->plan_money;

    if (bound > fake_now)
        bound = fake_now;
    for (size_t i = 0; i < in->n_iv; i++) {
        const struct interval *v = &in->iv[i];
        int64_t to = v->end >= 0 && v->end < bound ? v->end : bound;
        if (to > v->start)
            total += floor_div((__int128)v->amount * (to - v->start), v->period);
    }
    return total;
}

static int64_t expected_balance(int user)
{
    int64_t b = sim.users[user].credits;

    for (size_t i = 0; i < sim.n_inst; i++)
        if (sim.inst[i].user == user)
            b -= expected_charged(&sim.inst[i]);
    return b;
}

static void compute_open(struct m_inst *in)
{
    if (in->plan)
        return;
    if (in->nogpu)
        iv_add(in, sim.nogpu_price, 3600, true);
    else
        iv_add(in, sim.gpu_price[in->model] * in->gpus, 3600, true);
}

static int64_t plan_price(const struct m_inst *in, int plan)
{
    static const int64_t percent[] = { 0, 95, 85, 75 };
    int64_t total = sim.gpu_price[in->model] * in->gpus * (plan_seconds[plan] / 3600);
    return floor_div((__int128)total * percent[plan], 100);
}

/* Leaving a plan early gives back what is left of its price after the time
 * used at the pay-as-you-go rate of the day it was bought (no discount for
 * part of a period), never below 0 nor above what was paid. */
static int64_t plan_refund(const struct m_inst *in)
{
    int64_t period = plan_seconds[in->plan], remaining = in->plan_expires - fake_now;

    if (remaining > period)
        remaining = period;
    if (remaining <= 0)
        return 0;
    int64_t used = floor_div((__int128)in->plan_hourly * (period - remaining), 3600);
    return used >= in->plan_price ? 0 : in->plan_price - used;
}

static void plan_end(struct m_inst *in)
{
    int64_t refund = plan_refund(in);

    if (refund > 0) {
        in->plan_money -= refund;
        sim.refunds++;
    } else if (in->plan_expires > fake_now) {
        sim.refunds_none++;
    }
    in->plan = 0;
    in->auto_renew = false;
}

/* ---- driving the real code ---- */

static struct store *st(void)
{
    return sim.srv.store;
}

/* Runs fn inside a store transaction as the API would: 0, or the error's
 * code ("" for success) in code. */
static bool in_tx(int (*fn)(void *ctx, struct sl_error *err), void *ctx, char *code, size_t len)
{
    struct sl_error err = SL_ERROR_INIT;

    code[0] = '\0';
    if (store_begin(st(), &err) < 0) {
        FAIL("begin: %s", err.message);
        return false;
    }
    if (fn(ctx, &err) < 0 || store_commit(st(), &err) < 0) {
        store_rollback(st());
        snprintf(code, len, "%s", err.code);
        if (err.kind != SL_E_CONFLICT)
            FAIL("unexpected failure (%s): %s", err.code, err.message);
        return false;
    }
    return true;
}

static int64_t db_balance(int user)
{
    struct sl_error err = SL_ERROR_INIT;
    char account[LEDGER_ACCOUNT_MAX];
    int64_t b = 0;

    if (ledger_balance(st(), ledger_user_account(account, sim.users[user].id), &b, &err) < 0)
        FAIL("balance: %s", err.message);
    return b;
}

static void credit(int user, int64_t amount)
{
    struct sl_error err = SL_ERROR_INIT;
    char account[LEDGER_ACCOUNT_MAX], key[64], txn[SL_ID_MAX];
    bool existed;
    struct ledger_txn t = {
        .kind = "credit",
        .idempotency_key = sl_id_new(key, "credit:"),
        .entries = { { ledger_user_account(account, sim.users[user].id), amount },
                     { "system:credits", -amount } },
        .n_entries = 2,
    };

    if (ledger_post(st(), &t, txn, &existed, &err) < 0)
        FAIL("credit: %s", err.message);
    else
        sim.users[user].credits += amount;
}

static json_t *inventory(const struct m_node *n)
{
    json_t *gpus = json_array();

    for (int i = 0; i < GPUS_PER_NODE; i++) {
        char uuid[64];
        snprintf(uuid, sizeof(uuid), "GPU-%s-%d", n->id, i);
        json_array_append_new(gpus, json_pack("{s:i, s:s, s:s, s:i, s:b}", "index", i, "uuid", uuid,
                                              "name", model_names[n->model], "vram_mib", 24576,
                                              "simulated", 1));
    }
    return json_pack("{s:i, s:i, s:i, s:i, s:I, s:o}", "cpu_cores", 64, "memory_mib", 512 * 1024,
                     "disk_total_gib", 4000, "disk_free_gib", 3000, "disk_free_bytes",
                     (json_int_t)1 << 50, "gpus", gpus);
}

struct report_ctx {
    int node;
    json_t *report;
};

static int heartbeat_fn(void *p, struct sl_error *err)
{
    struct report_ctx *c = p;
    cleanup_json json_t *inv = inventory(&sim.nodes[c->node]);

    if (nodes_heartbeat(&sim.srv, sim.nodes[c->node].id, inv, err) < 0)
        return -1;
    return instances_apply_report(&sim.srv, sim.nodes[c->node].id, c->report, err);
}

static int64_t generation_of(const char *id)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t g = 0;

    if (store_get_int(st(), "SELECT generation FROM instances WHERE id = ?1", DB_ARGS(DB_TEXT(id)),
                      &g, &err) < 0)
        FAIL("generation: %s", err.message);
    return g;
}

/* A node reports: the silence it ends is cut out of its meters and plans,
 * and some of its instances reach what they were asked to be. */
static void node_reports(int n)
{
    struct m_node *node = &sim.nodes[n];
    cleanup_json json_t *report = json_array();
    char code[64];

    if (node->heartbeat && fake_now - node->heartbeat > OFFLINE_AFTER) {
        int64_t last = node->heartbeat;
        for (size_t i = 0; i < sim.n_inst; i++) {
            struct m_inst *in = &sim.inst[i];
            if (in->node != n)
                continue;
            size_t count = in->n_iv;
            for (size_t k = 0; k < count; k++) {
                struct interval *v = &in->iv[k];
                if (v->end >= 0 && v->end <= last)
                    continue;
                bool was_open = v->end < 0;
                v->end = v->start > last ? v->start : last;
                if (was_open) {
                    struct interval again = *v;
                    in->iv = xrealloc(in->iv, (in->n_iv + 1) * sizeof(*in->iv));
                    again.start = fake_now;
                    again.end = -1;
                    in->iv[in->n_iv++] = again;
                    v = &in->iv[k];
                }
            }
            if (in->plan && in->plan_expires > last)
                in->plan_expires += fake_now - last;
        }
        node->outages = xrealloc(node->outages, (node->n_outages + 1) * sizeof(*node->outages));
        node->outages[node->n_outages++] = (struct outage){ last, fake_now };
        sim.outages++;
    }
    node->heartbeat = fake_now;
    for (size_t i = 0; i < sim.n_inst; i++) {
        struct m_inst *in = &sim.inst[i];
        const char *to = NULL;
        if (in->node != n || !chance(80))
            continue;
        if (in->state == CREATING || in->state == STARTING) {
            to = "running";
            in->state = RUNNING;
            compute_open(in);
        } else if (in->state == STOPPING) {
            to = "stopped";
            in->state = STOPPED;
        } else if (in->state == RELEASING) {
            to = "absent";
            in->state = RELEASED;
        }
        if (to)
            json_array_append_new(report,
                                  json_pack("{s:s, s:s, s:I}", "id", in->id, "state", to,
                                            "generation", (json_int_t)generation_of(in->id)));
    }
    struct report_ctx c = { n, report };
    if (!in_tx(heartbeat_fn, &c, code, sizeof(code)))
        FAIL("heartbeat of %s refused: %s", node->id, code);
}

/* ---- the operations ---- */

struct create_ctx {
    struct instance_request rq;
    char id[SL_ID_MAX];
};

static int create_fn(void *p, struct sl_error *err)
{
    struct create_ctx *c = p;
    return sched_place(&sim.srv, &c->rq, c->id, err);
}

static int node_index(const char *node_id)
{
    for (int i = 0; i < N_NODES; i++)
        if (strcmp(sim.nodes[i].id, node_id) == 0)
            return i;
    return -1;
}

static void op_create(void)
{
    int user = (int)range(0, N_USERS - 1), model = (int)range(0, 1);
    int plan = chance(15) ? (int)range(1, 3) : 0;
    struct create_ctx c = { .rq = {
                                .user_id = sim.users[user].id,
                                .gpu_model = model_names[model],
                                .gpus = range(1, 4),
                                .image = "debian-12",
                                .data_disk_gib = chance(50) ? 50 : range(1, 800),
                                .plan = plan_names[plan],
                                .auto_renew = chance(50),
                            } };
    char code[64];
    int64_t balance = db_balance(user);

    if (sim.n_inst == MAX_INSTANCES)
        return;
    struct m_inst probe = { .model = model, .gpus = c.rq.gpus };
    int64_t need = plan ? plan_price(&probe, plan) : sim.gpu_price[model] * c.rq.gpus;
    if (!in_tx(create_fn, &c, code, sizeof(code))) {
        sim.refusals++;
        if (strcmp(code, "insufficient_balance") == 0 && balance >= need)
            FAIL("create refused for balance %" PRId64 " >= %" PRId64, balance, need);
        return;
    }
    if (balance < need)
        FAIL("create of %s accepted with balance %" PRId64 " < %" PRId64, c.id, balance, need);
    cleanup_json json_t *j = instance_json(&sim.srv, c.id, NULL, &(struct sl_error)SL_ERROR_INIT);
    struct m_inst *in = &sim.inst[sim.n_inst++];
    memset(in, 0, sizeof(*in));
    snprintf(in->id, sizeof(in->id), "%s", c.id);
    index_add(sim.n_inst - 1);
    in->user = user;
    in->model = model;
    in->gpus = c.rq.gpus;
    in->disk = c.rq.data_disk_gib;
    in->node = node_index(json_string_value(json_object_get(j, "node_id")));
    in->state = CREATING;
    in->stopped_at = -1;
    in->released_at = -1;
    if (in->disk > sim.disk_free && sim.disk_price > 0)
        iv_add(in, sim.disk_price * (in->disk - sim.disk_free), 86400, false);
    if (plan) {
        in->plan = plan;
        in->auto_renew = c.rq.auto_renew;
        in->plan_price = plan_price(in, plan);
        in->plan_hourly = sim.gpu_price[model] * in->gpus;
        in->plan_money += in->plan_price;
        in->plan_expires = fake_now + plan_seconds[plan];
        sim.plans++;
    }
}

/* An instance in one of the states, at random; NULL when none is. */
static struct m_inst *pick(unsigned states)
{
    size_t n = 0;
    for (size_t i = 0; i < sim.n_inst; i++)
        n += (states >> sim.inst[i].state) & 1;
    if (n == 0)
        return NULL;
    int64_t k = range(0, (int64_t)n - 1);
    for (size_t i = 0; i < sim.n_inst; i++)
        if ((states >> sim.inst[i].state) & 1 && k-- == 0)
            return &sim.inst[i];
    return NULL;
}

#define S(x) (1u << (x))

struct verb_ctx {
    struct m_inst *in;
    const char *arg;
    int auto_renew;
};

static int stop_fn(void *p, struct sl_error *err)
{
    struct verb_ctx *c = p;
    return instance_stop(&sim.srv, c->in->id, "user", err);
}

static int start_fn(void *p, struct sl_error *err)
{
    struct verb_ctx *c = p;
    return instance_start(&sim.srv, c->in->id, c->arg, err);
}

static int release_fn(void *p, struct sl_error *err)
{
    struct verb_ctx *c = p;
    return instance_release(&sim.srv, c->in->id, "user", err);
}

static int plan_fn(void *p, struct sl_error *err)
{
    struct verb_ctx *c = p;
    return billing_plan_set(&sim.srv, c->in->id, c->arg, c->auto_renew, err);
}

static void op_stop(void)
{
    struct verb_ctx c = { pick(S(CREATING) | S(RUNNING) | S(STARTING)), NULL, 0 };
    char code[64];

    if (!c.in)
        return;
    if (!in_tx(stop_fn, &c, code, sizeof(code))) {
        FAIL("stop of %s refused: %s", c.in->id, code);
        return;
    }
    c.in->state = STOPPING;
    c.in->stopped_at = fake_now;
    iv_close(c.in, false);
}

static void op_start(bool nogpu)
{
    struct verb_ctx c = { pick(S(STOPPED)), nogpu ? "nogpu" : "gpu", 0 };
    char code[64];

    if (!c.in)
        return;
    int64_t balance = db_balance(c.in->user);
    int64_t need = nogpu ? sim.nogpu_price : sim.gpu_price[c.in->model] * c.in->gpus;
    if (!in_tx(start_fn, &c, code, sizeof(code))) {
        sim.refusals++;
        if (strcmp(code, "insufficient_balance") == 0 && (c.in->plan || balance >= need))
            FAIL("start of %s refused for balance %" PRId64 " >= %" PRId64, c.in->id, balance,
                 need);
        return;
    }
    if (!c.in->plan && balance < need)
        FAIL("start of %s accepted with balance %" PRId64 " < %" PRId64, c.in->id, balance, need);
    c.in->state = STARTING;
    c.in->nogpu = nogpu;
    c.in->stopped_at = -1;
}

static void op_release(void)
{
    struct verb_ctx c = { pick(S(CREATING) | S(RUNNING) | S(STOPPING) | S(STOPPED) | S(STARTING)),
                          NULL, 0 };
    char code[64];

    if (!c.in)
        return;
    if (!in_tx(release_fn, &c, code, sizeof(code))) {
        FAIL("release of %s refused: %s", c.in->id, code);
        return;
    }
    if (c.in->plan)
        plan_end(c.in);
    iv_close(c.in, true);
    c.in->state = RELEASING;
    c.in->released_at = fake_now;
}

static void op_plan(void)
{
    struct verb_ctx c = { pick(S(CREATING) | S(RUNNING) | S(STOPPING) | S(STOPPED) | S(STARTING)),
                          NULL, (int)range(-1, 1) };
    int plan = (int)range(0, 3);
    char code[64];

    if (!c.in)
        return;
    struct m_inst *in = c.in;
    c.arg = plan_names[plan];
    int64_t balance = db_balance(in->user);
    /* moving between plans refunds first: the balance that pays is after it */
    int64_t refund = in->plan && plan != in->plan ? plan_refund(in) : 0;
    bool closes_compute = !in->plan && plan && has_open_compute(in);
    int64_t need = plan && plan != in->plan ? plan_price(in, plan) : 0;
    /* closing a pay-as-you-go meter settles it first; that charge is due
     * before the plan is paid for: read it from the store afterwards */
    if (!in_tx(plan_fn, &c, code, sizeof(code))) {
        sim.refusals++;
        if (strcmp(code, "insufficient_balance") == 0 && !closes_compute &&
            balance + refund >= need)
            FAIL("plan %s for %s refused for balance %" PRId64 " >= %" PRId64, c.arg, in->id,
                 balance + refund, need);
        return;
    }
    if (plan == in->plan) {
        if (plan && c.auto_renew >= 0)
            in->auto_renew = c.auto_renew;
        return;
    }
    if (in->plan) {
        plan_end(in);
    } else {
        iv_close(in, false);
    }
    if (plan == 0) {
        if (in->state == RUNNING)
            compute_open(in);
        else if (in->state == STOPPED)
            in->stopped_at = fake_now;
        return;
    }
    in->plan = plan;
    in->auto_renew = c.auto_renew > 0;
    in->plan_price = plan_price(in, plan);
    in->plan_hourly = sim.gpu_price[in->model] * in->gpus;
    in->plan_money += in->plan_price;
    in->plan_expires = fake_now + plan_seconds[plan];
    in->stopped_at = -1;
    sim.plans++;
}

static void op_price(void)
{
    struct sl_error err = SL_ERROR_INIT;
    char item[SL_ID_MAX + 8];
    int which = (int)range(0, 3);
    int64_t free_gib = 0;

    if (which < 2) {
        sim.gpu_price[which] = range(500000, 12000000);
        snprintf(item, sizeof(item), "gpu:%s", sim.model_ids[which]);
        if (catalog_price_set(st(), item, "", sim.gpu_price[which], 0, false, NULL, &err) < 0)
            FAIL("price: %s", err.message);
        return;
    }
    if (which == 2) {
        sim.nogpu_price = range(10000, 300000);
        if (catalog_price_set(st(), CATALOG_NOGPU, "", sim.nogpu_price, 0, false, NULL, &err) < 0)
            FAIL("price: %s", err.message);
        return;
    }
    sim.disk_price = range(0, 20000);
    sim.disk_free = free_gib = chance(70) ? FREE_GIB : range(0, 200);
    if (catalog_price_set(st(), CATALOG_DATA_DISK, "", sim.disk_price, free_gib, false, NULL,
                          &err) < 0)
        FAIL("price: %s", err.message);
}

static void op_outage(void)
{
    struct m_node *n = &sim.nodes[range(0, N_NODES - 1)];

    if (n->silent_until > fake_now)
        return;
    /* short silences are billed; long ones are not */
    n->silent_until = fake_now + (chance(40) ? range(60, OFFLINE_AFTER - 60)
                                             : range(OFFLINE_AFTER + 1, 4 * 86400));
}

static void op_credit(void)
{
    credit((int)range(0, N_USERS - 1), range(1, 400) * 1000000);
}

/* ---- what the billing loop should do, and checking that it did ---- */

/* The rules of a billing pass at now, in the engine's order: plans end or
 * renew, balances at zero stop their running pay-as-you-go instances,
 * instances stopped for too long are released. */
static void model_pass(void)
{
    for (;;) {
        /* plans due, earliest first, on hosts that report */
        struct m_inst *due = NULL;
        for (size_t i = 0; i < sim.n_inst; i++) {
            struct m_inst *in = &sim.inst[i];
            if (in->plan && in->plan_expires <= fake_now &&
                sim.nodes[in->node].heartbeat >= fake_now - OFFLINE_AFTER &&
                (!due || in->plan_expires < due->plan_expires))
                due = in;
        }
        if (!due)
            break;
        while (due->plan && due->plan_expires <= fake_now && due->auto_renew) {
            int64_t price = plan_price(due, due->plan);
            if (expected_balance(due->user) < price)
                break;
            due->plan_price = price;
            due->plan_hourly = sim.gpu_price[due->model] * due->gpus;
            due->plan_money += price;
            due->plan_expires += plan_seconds[due->plan];
            sim.renewals++;
        }
        if (due->plan_expires > fake_now)
            continue;
        due->plan = 0;
        due->auto_renew = false;
        if (due->state == STOPPED) {
            due->stopped_at = due->plan_expires;
        } else if (due->state == CREATING || due->state == RUNNING || due->state == STARTING) {
            due->state = STOPPING;
            due->stopped_at = fake_now;
            iv_close(due, false);
        }
    }
    for (int u = 0; u < N_USERS; u++) {
        if (expected_balance(u) > 0)
            continue;
        for (size_t i = 0; i < sim.n_inst; i++) {
            struct m_inst *in = &sim.inst[i];
            if (in->user != u || in->plan ||
                !(in->state == CREATING || in->state == RUNNING || in->state == STARTING))
                continue;
            in->state = STOPPING;
            in->stopped_at = fake_now;
            iv_close(in, false);
            sim.balance_stops++;
        }
    }
    for (size_t i = 0; i < sim.n_inst; i++) {
        struct m_inst *in = &sim.inst[i];
        if (in->state == STOPPED && !in->plan && in->stopped_at >= 0 &&
            in->stopped_at + sim.srv.cfg.release_after <= fake_now) {
            iv_close(in, true);
            in->state = RELEASING;
            in->released_at = fake_now;
            sim.auto_releases++;
        }
    }
}

/* Rows in seq order are the model's instances in creation order. */
static void check_states(void)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_rows struct db_rows *rows =
        store_query(st(), "SELECT id, state FROM instances ORDER BY seq", DB_NO_ARGS, &err);
    size_t i = 0;
    int rc;

    while (rows && (rc = db_next(rows, &err)) == 1) {
        struct m_inst *in = i < sim.n_inst ? &sim.inst[i++] : NULL;
        if (!in || strcmp(in->id, db_text(rows, 0)) != 0)
            FAIL("instance %s is not in the model", db_text(rows, 0));
        else if (strcmp(db_text(rows, 1), state_names[in->state]) != 0)
            FAIL("%s is %s, the model says %s", in->id, db_text(rows, 1), state_names[in->state]);
    }
    if (!rows)
        FAIL("states: %s", err.message);
    else if (i != sim.n_inst)
        FAIL("the store has %zu instances, the model %zu", i, sim.n_inst);
}

static int64_t meter_step(int64_t meter)
{
    if ((size_t)meter >= sim.meter_cap) {
        size_t cap = sim.meter_cap ? sim.meter_cap : 1024;
        while (cap <= (size_t)meter)
            cap *= 2;
        sim.meter_settlements = xrealloc(sim.meter_settlements, cap * sizeof(int64_t));
        memset(sim.meter_settlements + sim.meter_cap, 0, (cap - sim.meter_cap) * sizeof(int64_t));
        sim.meter_cap = cap;
    }
    return ++sim.meter_settlements[meter];
}

/* A charges row (seq) or an open piece (seq 0) of a meter of in: one UTC
 * day at most, so that a day's bill is exact; never after the release nor
 * while the host was out. */
static void check_piece(const struct m_inst *in, int64_t seq, int64_t from, int64_t to,
                        int64_t amount)
{
    if (amount <= 0 || to <= from || from / 86400 != (to - 1) / 86400)
        FAIL("charge %" PRId64 " of %s: %" PRId64 " for [%" PRId64 ", %" PRId64 ")", seq, in->id,
             amount, from, to);
    if (in->released_at >= 0 && to > in->released_at)
        FAIL("%s charged until %" PRId64 " after its release at %" PRId64, in->id, to,
             in->released_at);
    const struct m_node *n = &sim.nodes[in->node];
    for (size_t k = 0; k < n->n_outages; k++)
        if (from < n->outages[k].to && to > n->outages[k].from)
            FAIL("%s charged for [%" PRId64 ", %" PRId64 ") while its host was out"
                 " [%" PRId64 ", %" PRId64 ")",
                 in->id, from, to, n->outages[k].from, n->outages[k].to);
}

static int see_open_piece(const struct billing_piece *p, void *ctx, struct sl_error *err)
{
    struct m_inst *in = find(p->instance_id);

    (void)ctx;
    (void)err;
    if (!in) {
        FAIL("open piece of unknown instance %s", p->instance_id);
        return 0;
    }
    in->db_open += p->amount;
    check_piece(in, 0, p->from, p->to, p->amount);
    return 0;
}

/* Every charge written since the last step: summed per instance, its key in
 * its meter's sequence, never over a host's silence or after a release. */
static void check_new_charges(void)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_rows struct db_rows *rows = store_query(
        st(),
        "SELECT c.seq, c.instance_id, c.meter_seq, c.period_from, c.period_to, c.amount_micros,"
        " c.settlement FROM charges c WHERE c.seq > ?1 ORDER BY c.seq",
        DB_ARGS(DB_INT(sim.last_charge_seq)), &err);
    int64_t first = sim.last_charge_seq;
    int rc;

    while (rows && (rc = db_next(rows, &err)) == 1) {
        struct m_inst *in = find(db_text(rows, 1));
        int64_t from = db_int(rows, 3), to = db_int(rows, 4), amount = db_int(rows, 5);
        sim.last_charge_seq = db_int(rows, 0);
        if (!in) {
            FAIL("charge for unknown instance %s", db_text(rows, 1));
            continue;
        }
        in->db_charged += amount;
        if (db_null(rows, 2))
            continue; /* a plan or a refund */
        sim.settlements++;
        int64_t meter = db_int(rows, 2), want = meter_step(meter);
        if (db_int(rows, 6) != want)
            FAIL("settlement %" PRId64 " of meter %" PRId64 ", expected %" PRId64, db_int(rows, 6),
                 meter, want);
        check_piece(in, db_int(rows, 0), from, to, amount);
    }
    if (!rows) {
        FAIL("charges: %s", err.message);
        return;
    }
    /* each new ledger transaction that names charges (plans, refunds)
     * moves exactly them; the days' rows name none: usage moves with the
     * passes (check_money holds every balance to the model) */
    cleanup_rows struct db_rows *txns = store_query(
        st(),
        "SELECT x.txn_id, x.total, e.amount_micros, t.idempotency_key FROM (SELECT txn_id,"
        " user_id, SUM(amount_micros) AS total FROM charges WHERE seq > ?1 AND txn_id != ''"
        " GROUP BY txn_id, user_id) x"
        " LEFT JOIN ledger_entries e ON e.txn_id = x.txn_id AND e.account_id = 'user:' || x.user_id"
        " LEFT JOIN ledger_txns t ON t.id = x.txn_id",
        DB_ARGS(DB_INT(first)), &err);
    while (txns && (rc = db_next(txns, &err)) == 1) {
        if (db_null(txns, 2) || -db_int(txns, 2) != db_int(txns, 1))
            FAIL("ledger transaction %s moved %" PRId64 " for charges of %" PRId64,
                 db_text(txns, 0), -db_int(txns, 2), db_int(txns, 1));
        const char *key = db_text(txns, 3);
        if (strncmp(key, "settle:", 7) != 0 && strncmp(key, "plan", 4) != 0)
            FAIL("ledger transaction %s has key %s", db_text(txns, 0), key);
    }
    if (!txns)
        FAIL("transactions: %s", err.message);
}

/* The ledger since the last step: each account's new entries sum to its
 * balance's change; the balances are the model's. */
static void check_money(void)
{
    struct sl_error err = SL_ERROR_INIT;
    static int64_t prev[N_USERS], prev_revenue;
    int64_t revenue = 0, charged = 0;

    for (int u = 0; u < N_USERS; u++) {
        char account[LEDGER_ACCOUNT_MAX];
        int64_t now_balance = db_balance(u), moved = 0;
        if (store_get_int(st(),
                          "SELECT COALESCE(SUM(amount_micros), 0) FROM ledger_entries"
                          " WHERE account_id = ?1 AND seq > ?2",
                          DB_ARGS(DB_TEXT(ledger_user_account(account, sim.users[u].id)),
                                  DB_INT(sim.last_entry_seq)),
                          &moved, &err) < 0)
            FAIL("ledger: %s", err.message);
        if (now_balance - prev[u] != moved)
            FAIL("user %d: balance moved %" PRId64 ", its new entries sum to %" PRId64, u,
                 now_balance - prev[u], moved);
        int64_t want = expected_balance(u);
        if (now_balance != want)
            FAIL("user %d: balance %" PRId64 ", the model says %" PRId64, u, now_balance, want);
        prev[u] = now_balance;
    }
    /* an instance's charges: its rows and its meters' open pieces */
    for (size_t i = 0; i < sim.n_inst; i++)
        sim.inst[i].db_open = 0;
    if (billing_open_pieces(st(), NULL, 0, INT64_MAX, see_open_piece, NULL, &err) < 0)
        FAIL("open pieces: %s", err.message);
    for (size_t i = 0; i < sim.n_inst; i++) {
        struct m_inst *in = &sim.inst[i];
        int64_t want = expected_charged(in), have = in->db_charged + in->db_open;
        charged += have;
        if (have != want)
            FAIL("%s: charged %" PRId64 " (rows %" PRId64 ", open %" PRId64
                 "), the exact integral is %" PRId64 " (%zu intervals)",
                 in->id, have, in->db_charged, in->db_open, want, in->n_iv);
    }
    if (ledger_balance(st(), BILLING_REVENUE_ACCOUNT, &revenue, &err) < 0)
        FAIL("revenue: %s", err.message);
    if (revenue != charged)
        FAIL("revenue %" PRId64 " != charges %" PRId64, revenue, charged);
    (void)prev_revenue;
    if (store_get_int(st(), "SELECT COALESCE(MAX(seq), 0) FROM ledger_entries", DB_NO_ARGS,
                      &sim.last_entry_seq, &err) < 0)
        FAIL("ledger: %s", err.message);
}

static void check_everything(void)
{
    struct sl_error err = SL_ERROR_INIT;
    struct ledger_check lc;
    struct billing_check bc;
    int64_t keys, distinct;

    if (ledger_check(st(), &lc, &err) < 0 || billing_check(st(), &bc, &err) < 0 ||
        store_get_int(st(), "SELECT COUNT(*) FROM ledger_txns", DB_NO_ARGS, &keys, &err) < 0 ||
        store_get_int(st(), "SELECT COUNT(DISTINCT idempotency_key) FROM ledger_txns", DB_NO_ARGS,
                      &distinct, &err) < 0) {
        FAIL("checks: %s", err.message);
        return;
    }
    if (lc.bad_balances || lc.unbalanced_txns || lc.bad_running)
        FAIL("ledger check: %" PRId64 " bad balances, %" PRId64 " unbalanced, %" PRId64
             " bad running",
             lc.bad_balances, lc.unbalanced_txns, lc.bad_running);
    if (bc.bad_charged || bc.bad_sums || bc.bad_positions || bc.after_release || bc.bad_keys ||
        bc.bad_txns || bc.bad_renters || bc.charges_total != bc.ledger_charges)
        FAIL("billing check: %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
             " != %" PRId64,
             bc.bad_charged, bc.bad_sums, bc.bad_positions, bc.after_release, bc.bad_keys,
             bc.charges_total, bc.ledger_charges);
    if (keys != distinct)
        FAIL("%" PRId64 " ledger transactions share keys", keys - distinct);
}

/* ---- the run ---- */

static void setup(void)
{
    struct sl_error err = SL_ERROR_INIT;

    memset(&sim.srv, 0, sizeof(sim.srv));
    if (sl_config_defaults(server_options, server_options_count, &sim.srv.cfg, &err) < 0)
        FAIL("config: %s", err.message);
    sim.srv.cfg.require_verification = false;
    sim.srv.cfg.node_offline_after = OFFLINE_AFTER;
    /* money is under test, not the limits of placement: no renter and no
     * host reaches them (the hosts report room for every disk) */
    sim.srv.cfg.max_instances_per_user = 1 << 20;
    sim.srv.store = test_store();
    /* durability is not under test here; speed is welcome */
    store_exec(st(), "PRAGMA synchronous = OFF", DB_NO_ARGS, &err);
    store_exec(st(), "PRAGMA cache_size = -262144", DB_NO_ARGS, &err);
    sl_time_set_clock(clock_now);
    fake_now = 1767225600 + range(0, 86400); /* 2026-01-01 */

    sim.gpu_price[0] = 2500000;
    sim.gpu_price[1] = 9990000;
    sim.nogpu_price = 100000;
    sim.disk_price = 7000;
    sim.disk_free = FREE_GIB;
    if (catalog_region_create(st(), "sim-1", "Simulated", false, &err) < 0 ||
        catalog_gpu_model_create(st(), model_names[0], 24576, 12, 65536, sim.gpu_price[0], false,
                                 NULL, sim.model_ids[0], &err) < 0 ||
        catalog_gpu_model_create(st(), model_names[1], 144000, 16, 131072, sim.gpu_price[1], false,
                                 NULL, sim.model_ids[1], &err) < 0 ||
        catalog_price_set(st(), CATALOG_NOGPU, "", sim.nogpu_price, 0, false, NULL, &err) < 0 ||
        catalog_price_set(st(), CATALOG_DATA_DISK, "", sim.disk_price, FREE_GIB, false, NULL,
                          &err) < 0 ||
        store_exec(st(),
                   "INSERT INTO images (name, kind, created_at) VALUES ('debian-12', 'base', ?1)",
                   DB_ARGS(DB_INT(fake_now)), &err) < 0 ||
        ledger_open_account(st(), "system:credits", NULL, &err) < 0)
        FAIL("catalog: %s", err.message);
    for (int u = 0; u < N_USERS; u++) {
        struct m_user *user = &sim.users[u];
        char account[LEDGER_ACCOUNT_MAX];
        snprintf(user->id, sizeof(user->id), "u-sim%02d", u);
        if (store_exec(st(),
                       "INSERT INTO users (id, email, name, password_hash, created_at)"
                       " VALUES (?1, ?1 || '@example.com', ?1, 'x', ?2)",
                       DB_ARGS(DB_TEXT(user->id), DB_INT(fake_now)), &err) < 0 ||
            ledger_open_account(st(), ledger_user_account(account, user->id), user->id, &err) < 0)
            FAIL("user: %s", err.message);
        credit(u, range(200, 3000) * 1000000);
    }
    for (int n = 0; n < N_NODES; n++) {
        struct m_node *node = &sim.nodes[n];
        char hash[32];
        snprintf(node->id, sizeof(node->id), "n-sim%02d", n);
        snprintf(hash, sizeof(hash), "hash-%02d", n);
        node->model = n % 2;
        if (store_exec(st(),
                       "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                       " ssh_port_min, ssh_port_max, created_at) VALUES (?1, ?1, '127.0.0.1',"
                       " 'sim-1', ?2, 30000, 39999, ?3)",
                       DB_ARGS(DB_TEXT(node->id), DB_TEXT(hash), DB_INT(fake_now)), &err) < 0 ||
            store_exec(st(),
                       "INSERT INTO node_images (node_id, name, state, updated_at)"
                       " VALUES (?1, 'debian-12', 'ready', ?2)",
                       DB_ARGS(DB_TEXT(node->id), DB_INT(fake_now)), &err) < 0)
            FAIL("node: %s", err.message);
        node_reports(n);
    }
    sim.inst = xcalloc(MAX_INSTANCES, sizeof(*sim.inst));
}

static size_t alive(void)
{
    size_t n = 0;
    for (size_t i = 0; i < sim.n_inst; i++)
        n += sim.inst[i].state != RELEASED;
    return n;
}

static void advance(int64_t seconds)
{
    sim.instance_seconds += seconds * (int64_t)alive();
    fake_now += seconds;
}

static void step(void)
{
    struct sl_error err = SL_ERROR_INIT;
    struct billing_stats stats;

    for (int k = range(2, 6); k > 0; k--) {
        advance(range(1, 3));
        int64_t r = range(1, 100);
        if (r <= 24) {
            if (alive() < 260)
                op_create();
        } else if (r <= 38) {
            op_stop();
        } else if (r <= 52) {
            op_start(false);
        } else if (r <= 56) {
            op_start(true);
        } else if (r <= 64) {
            if (alive() > 80)
                op_release();
        } else if (r <= 72) {
            op_plan();
        } else if (r <= 75) {
            op_price();
        } else if (r <= 78) {
            op_outage();
        } else {
            op_credit();
        }
    }
    for (int n = 0; n < N_NODES; n++)
        if (sim.nodes[n].silent_until <= fake_now)
            node_reports(n);
    if (billing_run(&sim.srv, &stats, &err) < 0)
        FAIL("billing pass: %s", err.message);
    model_pass();
    check_states();
    check_new_charges();
    check_money();
    sim.steps++;
    if (sim.steps % 1000 == 0)
        check_everything();
    /* then time passes: seconds, minutes or most of a day */
    int64_t r = range(1, 100);
    advance(r <= 40 ? range(1, 600) : r <= 80 ? range(600, 3 * 3600) : range(3 * 3600, 20 * 3600));
}

TEST(billing_simulation_matches_the_exact_integral)
{
    const char *seed_env = getenv("SUANLI_SIM_SEED"), *hours_env = getenv("SUANLI_SIM_HOURS");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)sl_time_mono_us();
    int64_t hours = hours_env ? strtoll(hours_env, NULL, 10) : 1000000;

    memset(&sim, 0, sizeof(sim));
    memset(by_id, 0, sizeof(by_id));
    rng = seed ? seed : 1;
    printf("  billing simulation: seed %" PRIu64 " (replay: SUANLI_SIM_SEED=%" PRIu64 "), %" PRId64
           " instance-hours\n",
           seed, seed, hours);
    fflush(stdout);
    setup();
    while (!sim.failed && sim.instance_seconds < hours * 3600)
        step();
    if (!sim.failed)
        check_everything();
    printf("  %" PRId64 " steps, %" PRId64 " instance-hours, %zu instances, %" PRId64
           " settlements, %" PRId64 " host outages, %" PRId64 " plans bought, %" PRId64
           " renewed, %" PRId64 " refunds (%" PRId64
           " plans left early with nothing to refund), %" PRId64 " balance stops, %" PRId64
           " auto-releases, %" PRId64 " refusals\n",
           sim.steps, sim.instance_seconds / 3600, sim.n_inst, sim.settlements, sim.outages,
           sim.plans, sim.renewals, sim.refunds, sim.refunds_none, sim.balance_stops,
           sim.auto_releases, sim.refusals);
    if (sim.failed)
        printf("  FAILED with seed %" PRIu64 ": replay with SUANLI_SIM_SEED=%" PRIu64 "\n", seed,
               seed);
    for (size_t i = 0; i < sim.n_inst; i++)
        free(sim.inst[i].iv);
    for (int n = 0; n < N_NODES; n++)
        free(sim.nodes[n].outages);
    free(sim.inst);
    free(sim.meter_settlements);
    sl_time_set_clock(NULL);
    sl_config_release(server_options, server_options_count, &sim.srv.cfg);
}
