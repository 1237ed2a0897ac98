/* Placement (sched.h): the host, GPUs, SSH port and disk room of a new
 * instance, within the renter's limit, name space and balance. */
#include "sched.h"

#include "../lib/cleanup.h"
#include "../lib/id.h"
#include "../lib/log.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "billing.h"
#include "catalog.h"
#include "instance-passwords.h"
#include "instance-sync.h"
#include "instances.h"
#include "ledger.h"
#include "nodes.h"
#include "ports.h"
#include "storage.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

struct gpu_model {
    char id[SL_ID_MAX];
    char name[128];
    int64_t cpu_cores, memory_mib;
};

static int find_gpu_model(struct store *st, const char *name_or_id, struct gpu_model *m,
                          struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT id, name, cpu_cores_per_gpu, memory_mib_per_gpu FROM gpu_models"
                    " WHERE id = ?1 OR lower(name) = lower(?1)",
                    DB_ARGS(DB_TEXT(name_or_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_gpu_model",
                       "no GPU model '%s': see the models and prices with suanli market",
                       name_or_id);
    snprintf(m->id, sizeof(m->id), "%s", db_text(rows, 0));
    snprintf(m->name, sizeof(m->name), "%s", db_text(rows, 1));
    m->cpu_cores = db_int(rows, 2);
    m->memory_mib = db_int(rows, 3);
    return 0;
}

/* The hourly rate of n GPUs of model in region, or of no-GPU mode. */
static int hourly_rate(struct store *st, const char *model_id, int64_t n, const char *region,
                       bool nogpu, int64_t *rate, struct sl_error *err)
{
    int64_t price;

    if (catalog_hourly_price(st, nogpu ? NULL : model_id, region, &price, err) < 0)
        return -1;
    return sl_money_mul(price, nogpu ? 1 : n, rate, err);
}

/* Starting needs a balance that covers an hour at the rate (DESIGN.md 4). */
static int check_balance(struct store *st, const char *user_id, int64_t rate, struct sl_error *err)
{
    char account[LEDGER_ACCOUNT_MAX], need[SL_MONEY_FORMAT_MAX], have[SL_MONEY_FORMAT_MAX],
        missing[SL_MONEY_FORMAT_MAX];
    int64_t balance, short_by;

    if (ledger_balance(st, ledger_user_account(account, user_id), &balance, err) < 0)
        return -1;
    if (balance >= rate)
        return 0;
    if (sl_money_sub(rate, balance, &short_by, err) < 0)
        return -1;
    return sl_fail(err, SL_E_CONFLICT, "insufficient_balance",
                   "starting needs a balance covering one hour (%s); the balance is %s: top up "
                   "at least %s",
                   sl_money_format(rate, need), sl_money_format(balance, have),
                   sl_money_format(short_by, missing));
}

static int check_may_start(struct server *srv, const char *user_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(srv->store, "SELECT role, verification FROM users WHERE id = ?1",
                    DB_ARGS(DB_TEXT(user_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_user", "no user '%s'", user_id);
    if (srv->cfg.require_verification && strcmp(db_text(rows, 0), "admin") != 0 &&
        strcmp(db_text(rows, 1), "approved") != 0)
        return sl_fail(err, SL_E_FORBIDDEN, "verification_required",
                       "instances need real-name verification first (state: %s): suanli verify "
                       "--name NAME --id-number NUMBER",
                       db_text(rows, 1));
    return 0;
}

int sched_reserve_gpus(struct store *st, const char *node_id, const char *model_id, int64_t n,
                       const char *instance_id, struct sl_error *err)
{
    int changed = store_exec(
        st,
        "UPDATE gpus SET instance_id = ?4 WHERE node_id = ?1 AND idx IN"
        " (SELECT idx FROM gpus WHERE node_id = ?1 AND gpu_model_id = ?2"
        "  AND instance_id IS NULL ORDER BY idx LIMIT ?3)",
        DB_ARGS(DB_TEXT(node_id), DB_TEXT(model_id), DB_INT(n), DB_TEXT(instance_id)), err);
    if (changed < 0)
        return -1;
    if (changed == n)
        return 0;
    /* too few: give back what was taken */
    if (store_exec(st, "UPDATE gpus SET instance_id = NULL WHERE instance_id = ?1",
                   DB_ARGS(DB_TEXT(instance_id)), err) < 0)
        return -1;
    return 1;
}

int64_t sched_per_gpu(int64_t total, int64_t reserve, int64_t gpus, int64_t cap, int64_t min)
{
    if (gpus <= 0 || total <= reserve)
        return 0;
    int64_t share = (total - reserve) / gpus;
    if (cap > 0 && share > cap)
        share = cap;
    return share < min ? 0 : share;
}

void sched_host_share(const struct server *srv, const struct host_resources *h,
                      int64_t model_cpu_cores, int64_t model_memory_mib, int64_t *millicores,
                      int64_t *memory_mib)
{
    *millicores = sched_per_gpu(h->cpu_cores * 1000, srv->cfg.cpu_reserve_millicores, h->gpus,
                                model_cpu_cores * 1000, SCHED_MIN_MILLICORES);
    *memory_mib = sched_per_gpu(h->memory_mib, srv->cfg.memory_reserve_mib, h->gpus,
                                model_memory_mib, SCHED_MIN_MEMORY_MIB);
}

/* How many of per fit in what is left of total after reserve and used. */
static int64_t fits_in(int64_t total, int64_t reserve, int64_t used, int64_t per)
{
    int64_t left = total - reserve - used;

    if (per <= 0 || left <= 0)
        return 0;
    return left / per;
}

int64_t sched_host_fits(const struct server *srv, const struct host_resources *h, int64_t idle,
                        int64_t millicores, int64_t memory_mib)
{
    int64_t by_cpu = fits_in(h->cpu_cores * 1000, srv->cfg.cpu_reserve_millicores,
                             h->cpu_used_millicores, millicores),
            by_memory =
                fits_in(h->memory_mib, srv->cfg.memory_reserve_mib, h->memory_used_mib, memory_mib);
    int64_t n = idle < by_cpu ? idle : by_cpu;

    return n < by_memory ? n : by_memory;
}

int sched_host_resources(struct server *srv, const char *node_id, const char *except_id,
                         struct host_resources *h, struct sl_error *err)
{
    /* an instance holds CPU and memory while it holds GPUs (from placement
     * until its stop is done; a plan's even while stopped) and while it is
     * meant to run in no-GPU mode; a plan's GPUs in no-GPU mode count both */
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT n.cpu_cores, n.memory_mib, (SELECT COUNT(*) FROM gpus g WHERE g.node_id = n.id),"
        " (SELECT COALESCE(SUM(CASE WHEN EXISTS (SELECT 1 FROM gpus g WHERE g.node_id = i.node_id"
        "  AND g.instance_id = i.id) THEN i.cpu_millicores ELSE 0 END + CASE WHEN"
        "  i.mode = 'nogpu' AND i.desired = 'running' THEN CASE WHEN ?3 < i.cpu_millicores THEN ?3 "
        "ELSE i.cpu_millicores END ELSE 0 END),"
        "  0) FROM instances i WHERE i.node_id = n.id AND i.state != 'released'"
        "  AND (?2 IS NULL OR i.id != ?2)),"
        " (SELECT COALESCE(SUM(CASE WHEN EXISTS (SELECT 1 FROM gpus g WHERE g.node_id = i.node_id"
        "  AND g.instance_id = i.id) THEN i.memory_mib ELSE 0 END + CASE WHEN"
        "  i.mode = 'nogpu' AND i.desired = 'running' THEN CASE WHEN ?4 < i.memory_mib THEN ?4 "
        "ELSE i.memory_mib END ELSE 0 END),"
        "  0) FROM instances i WHERE i.node_id = n.id AND i.state != 'released'"
        "  AND (?2 IS NULL OR i.id != ?2))"
        " FROM nodes n WHERE n.id = ?1",
        DB_ARGS(DB_TEXT(node_id), DB_TEXT(except_id), DB_INT(srv->cfg.nogpu_millicores),
                DB_INT(srv->cfg.nogpu_memory_mib)),
        err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_host", "no host '%s'", node_id);
    h->cpu_cores = db_int(rows, 0);
    h->memory_mib = db_int(rows, 1);
    h->gpus = db_int(rows, 2);
    h->cpu_used_millicores = db_int(rows, 3);
    h->memory_used_mib = db_int(rows, 4);
    return 0;
}

/* "2.5" cores from millicores, for messages. */
static const char *cores(int64_t millicores, char *buf, size_t size)
{
    if (millicores % 1000 == 0)
        snprintf(buf, size, "%" PRId64, millicores / 1000);
    else
        snprintf(buf, size, "%" PRId64 ".%02" PRId64, millicores / 1000, millicores % 1000 / 10);
    return buf;
}

int sched_check_room(struct server *srv, const char *id, bool nogpu, struct sl_error *err)
{
    struct host_resources h;
    char node_id[SL_ID_MAX], want[32], left[32];
    int64_t cpu, memory;
    {
        cleanup_rows struct db_rows *rows = store_query(
            srv->store, "SELECT node_id, cpu_millicores, memory_mib FROM instances WHERE id = ?1",
            DB_ARGS(DB_TEXT(id)), err);
        int rc;
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 0)
            return sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                           "no instance '%s': list yours with suanli ls", id);
        snprintf(node_id, sizeof(node_id), "%s", db_text(rows, 0));
        cpu = db_int(rows, 1);
        memory = db_int(rows, 2);
    }
    if (nogpu) {
        cpu = cpu < srv->cfg.nogpu_millicores ? cpu : srv->cfg.nogpu_millicores;
        memory = memory < srv->cfg.nogpu_memory_mib ? memory : srv->cfg.nogpu_memory_mib;
    }
    if (sched_host_resources(srv, node_id, id, &h, err) < 0)
        return -1;
    /* No-GPU mode is the way to one's data while the host's GPUs are all
     * rented, so it may start on a host whose CPU and memory are all given:
     * its CPU is a quota that shares the cores, and its memory may use the
     * reserve, never more than the host has. */
    int64_t cpu_left = h.cpu_cores * 1000 - srv->cfg.cpu_reserve_millicores - h.cpu_used_millicores,
            memory_left =
                h.memory_mib - (nogpu ? 0 : srv->cfg.memory_reserve_mib) - h.memory_used_mib;
    if (!nogpu && cpu > cpu_left)
        return sl_fail(err, SL_E_CONFLICT, "insufficient_cpu",
                       "the host of instance '%s' has %s CPU cores left, and it needs %s (its "
                       "disks live there): wait for other instances there to stop%s",
                       id, cores(cpu_left > 0 ? cpu_left : 0, left, sizeof(left)),
                       cores(cpu, want, sizeof(want)),
                       nogpu ? "" : ", or start it in no-GPU mode (suanli start --no-gpu ID)");
    if (memory > memory_left)
        return sl_fail(err, SL_E_CONFLICT, "insufficient_memory",
                       "the host of instance '%s' has %" PRId64 " MiB of memory left, and it "
                       "needs %" PRId64 " MiB%s (its disks live there): wait for other instances "
                       "there to stop%s",
                       id, memory_left > 0 ? memory_left : 0, memory,
                       nogpu ? " in no-GPU mode" : "",
                       nogpu ? "" : ", or start it in no-GPU mode (suanli start --no-gpu ID)");
    return 0;
}

int sched_pick_port(struct store *st, const char *node_id, int64_t *port, struct sl_error *err)
{
    int64_t lo, hi, candidate;
    cleanup_rows struct db_rows *range =
        store_query(st, "SELECT ssh_port_min, ssh_port_max FROM nodes WHERE id = ?1",
                    DB_ARGS(DB_TEXT(node_id)), err);

    if (!range || db_next(range, err) < 0)
        return -1;
    lo = db_int(range, 0);
    hi = db_int(range, 1);
    cleanup_rows struct db_rows *used =
        store_query(st,
                    "SELECT ssh_port FROM instances WHERE node_id = ?1 AND state != 'released'"
                    " AND ssh_port BETWEEN ?2 AND ?3 ORDER BY ssh_port",
                    DB_ARGS(DB_TEXT(node_id), DB_INT(lo), DB_INT(hi)), err);
    if (!used)
        return -1;
    candidate = lo;
    int rc;
    while ((rc = db_next(used, err)) == 1 && db_int(used, 0) <= candidate)
        candidate = db_int(used, 0) + 1;
    if (rc < 0)
        return -1;
    if (candidate > hi)
        return sl_fail(err, SL_E_CONFLICT, "no_ports",
                       "host '%s' has no free SSH port left: ask the operator", node_id);
    *port = candidate;
    return 0;
}

/* The image rq names, as the caller sees it: one ready on no host is 409
 * image_not_ready naming its state (pending, building, failed), so that the
 * renter knows to wait rather than look for GPUs. A renter sees what GET
 * /v1/images shows them: an image that failed on every host, or someone
 * else's private one, is 404 no_such_image like a name never made, so
 * probing names tells nothing; an admin is told it failed and what to do. */
static int check_image(struct store *st, const struct instance_request *rq, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT (SELECT role FROM users WHERE id = ?2) = 'admin',"
        " i.kind = 'private' AND COALESCE(i.created_by, '') != ?2 AND NOT EXISTS"
        " (SELECT 1 FROM image_shares s WHERE s.image = i.name AND s.user_id = ?2),"
        " EXISTS (SELECT 1 FROM node_images x WHERE x.name = i.name AND x.state = 'ready'),"
        " EXISTS (SELECT 1 FROM node_images x WHERE x.name = i.name AND x.state = 'building'),"
        " EXISTS (SELECT 1 FROM node_images x WHERE x.name = i.name AND x.state = 'failed')"
        " FROM images i WHERE i.name = ?1",
        DB_ARGS(DB_TEXT(rq->image), DB_TEXT(rq->user_id)), err);
    if (!rows)
        return -1;
    int rc = db_next(rows, err);
    if (rc < 0)
        return -1;
    bool admin = rc == 1 && db_int(rows, 0);
    bool failed = rc == 1 && !db_int(rows, 2) && !db_int(rows, 3) && db_int(rows, 4);
    if (rc == 0 || (!admin && (db_int(rows, 1) || failed)))
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_image",
                       "no image '%s': list them with suanli image ls", rq->image);
    if (db_int(rows, 2))
        return 0;
    if (failed)
        return sl_fail(err, SL_E_CONFLICT, "image_not_ready",
                       "image '%s' is failed: no host could build or import it (suanli admin "
                       "image hosts %s says why); delete it with suanli admin image rm %s and "
                       "import it again",
                       rq->image, rq->image, rq->image);
    return sl_fail(err, SL_E_CONFLICT, "image_not_ready",
                   "image '%s' is %s: no host holds it yet; try again when suanli image ls "
                   "lists it",
                   rq->image, db_int(rows, 3) ? "building" : "pending");
}

/* What the hosts that had the GPUs free and the image lacked, to explain a
 * refusal. */
struct shortfall {
    bool gpus_and_image; /* a host had the GPUs free and the image */
    bool disk_room;      /* one of those had disk room too */
    bool cpu;            /* what the best of those lacked: CPU, else memory */
    int64_t most_room;   /* the most disk room of the first */
    int64_t most_fit;    /* the most GPUs CPU and memory allowed on one of the second */
};

/* Whether host row (id, free GPUs) can take rq at m's share: 1 and the
 * share, 0 with what it lacked in *why. */
static int host_takes(struct server *srv, const struct instance_request *rq,
                      const struct gpu_model *m, const char *node_id, int64_t free,
                      int64_t *millicores, int64_t *memory_mib, struct shortfall *why,
                      struct sl_error *err)
{
    struct host_resources h;

    if (sched_host_resources(srv, node_id, NULL, &h, err) < 0)
        return -1;
    sched_host_share(srv, &h, m->cpu_cores, m->memory_mib, millicores, memory_mib);
    int64_t fit = sched_host_fits(srv, &h, free, *millicores, *memory_mib);
    if (fit >= rq->gpus)
        return 1;
    if (!why->disk_room || fit > why->most_fit) {
        why->most_fit = fit;
        why->cpu = sched_host_fits(srv, &h, free, *millicores, 1) < rq->gpus;
    }
    why->disk_room = true;
    return 0;
}

/* Best fit: among online hosts of the region holding the image (or the
 * pinned host), the one with the fewest free GPUs of the model that still
 * has enough, CPU and memory for them (sched_host_fits) and room for the
 * disks asked (nodes_disk_room_gib), so large holes stay for large
 * requests. Fills the instance's CPU and memory: its GPUs' share. */
static int pick_node(struct server *srv, const struct instance_request *rq,
                     const struct gpu_model *m, const char *pinned, char *node_id, char *region,
                     int64_t *millicores, int64_t *memory_mib, struct shortfall *why,
                     struct sl_error *err)
{
    int64_t cutoff = sl_time_now() - srv->cfg.node_offline_after;
    int64_t disks = srv->cfg.system_disk_gib + rq->data_disk_gib;
    int rc;

    why->most_room = INT64_MIN;
    /* gpu_free (migration 10) holds each host's free GPUs of each model:
     * its index yields the hosts with enough in best-fit order, and the
     * loop below stops at the first that takes the request, so a placement
     * reads a few hosts, not every free GPU of the fleet. The pinned host
     * is one row by its key. A host its operator cordoned takes nothing
     * new (nodes.h). */
#define PICK_NODE_SELECT                                                                           \
    "SELECT n.id, n.region_id, f.free, n.disk_free_bytes, n.instance_disks_bytes,"                 \
    " (SELECT COALESCE(SUM(i.system_disk_gib + i.data_disk_gib), 0) FROM instances i"              \
    " WHERE i.node_id = n.id AND i.state != 'released')"                                           \
    " FROM gpu_free f JOIN nodes n ON n.id = f.node_id"                                            \
    " JOIN node_images ni ON ni.node_id = n.id AND ni.name = ?4 AND ni.state = 'ready'"            \
    " WHERE f.gpu_model_id = ?1 AND f.free >= ?5 AND n.last_heartbeat > ?2"                        \
    " AND (?3 IS NULL OR n.region_id = ?3) AND n.cordoned_at IS NULL"
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    pinned ? PICK_NODE_SELECT " AND f.node_id = ?6"
                           : PICK_NODE_SELECT " AND ?6 IS NULL ORDER BY f.free, f.node_id",
                    DB_ARGS(DB_TEXT(m->id), DB_INT(cutoff), DB_TEXT(rq->region), DB_TEXT(rq->image),
                            DB_INT(rq->gpus), DB_TEXT(pinned)),
                    err);
#undef PICK_NODE_SELECT
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        int64_t room = nodes_disk_room_gib(srv, db_int(rows, 3), db_int(rows, 4), db_int(rows, 5));
        why->gpus_and_image = true;
        if (room < disks) {
            if (room > why->most_room)
                why->most_room = room;
            continue;
        }
        int takes = host_takes(srv, rq, m, db_text(rows, 0), db_int(rows, 2), millicores,
                               memory_mib, why, err);
        if (takes < 0)
            return -1;
        if (takes) {
            snprintf(node_id, SL_ID_MAX, "%s", db_text(rows, 0));
            snprintf(region, 64, "%s", db_text(rows, 1));
            return 0;
        }
    }
    return rc < 0 ? -1 : 1;
}

/* Why no host took rq (pick_node found none): the refusal, saying what to
 * do. */
static int refuse(struct server *srv, const struct instance_request *rq, const struct gpu_model *m,
                  const struct shortfall *why, struct sl_error *err)
{
    int64_t cutoff = sl_time_now() - srv->cfg.node_offline_after;

    if (why->disk_room)
        return sl_fail(err, SL_E_CONFLICT, why->cpu ? "insufficient_cpu" : "insufficient_memory",
                       "no host with %" PRId64 " free %s has the %s left for them (each GPU "
                       "comes with its share of its host's CPU and memory; instances in no-GPU "
                       "mode hold some of it): the most one host can give now is %" PRId64
                       " GPU(s). Ask for fewer GPUs, another region, or try again later",
                       rq->gpus, m->name, why->cpu ? "CPU" : "memory", why->most_fit);
    if (why->gpus_and_image) {
        int64_t fits = why->most_room - srv->cfg.system_disk_gib;
        if (fits >= 1)
            return sl_fail(err, SL_E_CONFLICT, "insufficient_disk",
                           "no host with %" PRId64 " free %s has room for a %" PRId64
                           " GiB data disk (plus the %" PRId64 " GiB system disk): the most "
                           "that fits now is a %" PRId64 " GiB data disk. Ask for a smaller "
                           "data disk (data_disk_gib, suanli create --data-disk), another "
                           "region, or try again later",
                           rq->gpus, m->name, rq->data_disk_gib, srv->cfg.system_disk_gib, fits);
        return sl_fail(err, SL_E_CONFLICT, "insufficient_disk",
                       "no host with %" PRId64 " free %s has disk room left for another "
                       "instance (a %" PRId64 " GiB system disk and a data disk): try another "
                       "region, or again later",
                       rq->gpus, m->name, srv->cfg.system_disk_gib);
    }
    int64_t most = 0;
    if (store_get_int(srv->store,
                      "SELECT COALESCE(MAX(c), 0) FROM (SELECT COUNT(*) AS c FROM gpus g"
                      " JOIN nodes n ON n.id = g.node_id WHERE g.gpu_model_id = ?1"
                      " AND g.instance_id IS NULL AND n.last_heartbeat > ?2"
                      " AND n.cordoned_at IS NULL"
                      " AND (?3 IS NULL OR n.region_id = ?3) GROUP BY g.node_id) per_host",
                      DB_ARGS(DB_TEXT(m->id), DB_INT(cutoff), DB_TEXT(rq->region)), &most, err) < 0)
        return -1;
    if (most >= rq->gpus)
        return sl_fail(err, SL_E_CONFLICT, "image_unavailable",
                       "no host with %" PRId64 " free %s holds image '%s' yet: try again when "
                       "it is built (suanli image ls)",
                       rq->gpus, m->name, rq->image);
    return sl_fail(err, SL_E_CONFLICT, "no_capacity",
                   "no host%s%s has %" PRId64 " free %s right now (the most free on one host: "
                   "%" PRId64 "): ask for fewer GPUs, another region, or try again later",
                   rq->region ? " in region " : "", rq->region ? rq->region : "", rq->gpus, m->name,
                   most);
}

/* The same for a pinned host: what it lacks, and the way to one that has
 * it. */
static int refuse_pinned(struct server *srv, const struct instance_request *rq,
                         const struct gpu_model *m, const char *node_id,
                         const struct shortfall *why, struct sl_error *err)
{
    char elsewhere[512], state[16] = "missing";
    int64_t free = 0, images = 0;

    snprintf(elsewhere, sizeof(elsewhere),
             "pick a host that has it with suanli market --gpu-model '%s' --min-free %" PRId64
             ", or leave out --host (the host field) to place it anywhere",
             m->name, rq->gpus);
    if (why->disk_room)
        return sl_fail(err, SL_E_CONFLICT, why->cpu ? "insufficient_cpu" : "insufficient_memory",
                       "host '%s' has the %s left for %" PRId64 " of its free %s, not %" PRId64
                       " (instances in no-GPU mode hold some of it): ask for fewer GPUs, or %s",
                       node_id, why->cpu ? "CPU" : "memory", why->most_fit, m->name, rq->gpus,
                       elsewhere);
    if (why->gpus_and_image)
        return sl_fail(err, SL_E_CONFLICT, "insufficient_disk",
                       "host '%s' has no room for a %" PRId64 " GiB data disk now (the most "
                       "that fits: %" PRId64 " GiB): ask for a smaller data disk, or %s",
                       node_id, rq->data_disk_gib,
                       why->most_room > srv->cfg.system_disk_gib
                           ? why->most_room - srv->cfg.system_disk_gib
                           : 0,
                       elsewhere);
    if (store_get_int(srv->store,
                      "SELECT COUNT(*) FROM gpus WHERE node_id = ?1 AND gpu_model_id = ?2"
                      " AND instance_id IS NULL",
                      DB_ARGS(DB_TEXT(node_id), DB_TEXT(m->id)), &free, err) < 0 ||
        store_get_int(srv->store,
                      "SELECT COUNT(*) FROM node_images WHERE node_id = ?1 AND name = ?2"
                      " AND state = 'ready'",
                      DB_ARGS(DB_TEXT(node_id), DB_TEXT(rq->image)), &images, err) < 0)
        return -1;
    if (free >= rq->gpus && !images) {
        cleanup_rows struct db_rows *rows = store_query(
            srv->store, "SELECT state FROM node_images WHERE node_id = ?1 AND name = ?2",
            DB_ARGS(DB_TEXT(node_id), DB_TEXT(rq->image)), err);
        int rc = rows ? db_next(rows, err) : -1;
        if (rc < 0)
            return -1;
        if (rc == 1)
            snprintf(state, sizeof(state), "%s", db_text(rows, 0));
        return sl_fail(
            err, SL_E_CONFLICT, "image_unavailable",
            "host '%s' does not hold image '%s' (%s there): %s, or %s", node_id, rq->image,
            strcmp(state, "failed") == 0     ? "its import failed"
            : strcmp(state, "building") == 0 ? "it is building"
                                             : "it is not imported yet",
            strcmp(state, "failed") == 0 ? "it will not be there" : "try again when it is",
            elsewhere);
    }
    return sl_fail(err, SL_E_CONFLICT, "host_full",
                   "host '%s' has %" PRId64 " free %s now, and you asked for %" PRId64
                   ": ask for fewer GPUs, or %s",
                   node_id, free, m->name, rq->gpus, elsewhere);
}

int sched_find_host(struct server *srv, const struct instance_request *rq, char *node_id,
                    struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT id, region_id, COALESCE(last_heartbeat, 0) FROM nodes"
                    " WHERE (id = ?1 OR hostname = ?1) AND removed_at IS NULL"
                    " ORDER BY id = ?1 DESC, id LIMIT 2",
                    DB_ARGS(DB_TEXT(rq->host)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_host",
                       "no host '%s': the hosts and their free GPUs are in suanli market",
                       rq->host);
    snprintf(node_id, SL_ID_MAX, "%s", db_text(rows, 0));
    bool by_id = strcmp(node_id, rq->host) == 0;
    const char *region = db_text(rows, 1);
    if (rq->region && strcmp(region, rq->region) != 0)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "host '%s' is in region '%s', not '%s': leave out the region, or pick a "
                       "host of region '%s' (suanli market --region %s)",
                       rq->host, region, rq->region, rq->region, rq->region);
    bool online = db_int(rows, 2) > sl_time_now() - srv->cfg.node_offline_after;
    if (!by_id && (rc = db_next(rows, err)) != 0)
        return rc < 0 ? -1
                      : sl_fail(err, SL_E_INVALID, "ambiguous_host",
                                "several hosts are named '%s': pin one by its node id (suanli "
                                "market lists them)",
                                rq->host);
    if (!online)
        return sl_fail(err, SL_E_CONFLICT, "host_offline",
                       "host '%s' is offline now: pick another with suanli market, or leave "
                       "out --host (the host field) to place it anywhere",
                       rq->host);
    return 0;
}

/* A renter holds at most instances.max_per_user instances that are not
 * released; checked inside the placement transaction, so concurrent creates
 * cannot pass it together. */
static int check_instance_limit(struct server *srv, const char *user_id, struct sl_error *err)
{
    int64_t held;

    if (store_get_int(srv->store,
                      "SELECT COUNT(*) FROM instances WHERE user_id = ?1 AND state != 'released'",
                      DB_ARGS(DB_TEXT(user_id)), &held, err) < 0)
        return -1;
    if (held < srv->cfg.max_instances_per_user)
        return 0;
    return sl_fail(
        err, SL_E_CONFLICT, "too_many_instances",
        "you hold %" PRId64 " instances, the most one account may (stopped ones "
        "count: their disks are kept): release one you no longer need (suanli release ID) "
        "or ask the operator for a higher limit",
        held);
}

/* Names are unique per renter among the instances not released, so a name
 * names one instance wherever an id would (the CLI resolves it with
 * GET /v1/instances?name=). Checked inside the placement transaction, like
 * the limit; migration 7's unique index holds it too. */
static int check_name_free(struct store *st, const char *user_id, const char *name,
                           struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    /* +seq: found by instances_user_held (user and name),
                     * not by walking all of the renter's instances in
                     * instances_user's order */
                    "SELECT id FROM instances WHERE user_id = ?1 AND name = ?2"
                    " AND state != 'released' ORDER BY +seq LIMIT 1",
                    DB_ARGS(DB_TEXT(user_id), DB_TEXT(name)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return 0;
    return sl_fail(err, SL_E_CONFLICT, "name_taken",
                   "you already have an instance named '%s' (%s): choose another name, or "
                   "release that one first (suanli release %s)",
                   name, db_text(rows, 0), db_text(rows, 0));
}

int sched_check_start(struct server *srv, const char *user_id, const char *model_id, int64_t gpus,
                      const char *region, bool nogpu, bool prepaid, struct sl_error *err)
{
    int64_t rate;

    if (check_may_start(srv, user_id, err) < 0 ||
        hourly_rate(srv->store, model_id, gpus, region, nogpu, &rate, err) < 0)
        return -1;
    return prepaid ? 0 : check_balance(srv->store, user_id, rate, err);
}

int sched_secrets_new(struct server *srv, struct instance_secrets *s, struct sl_error *err)
{
    *s = (struct instance_secrets){ 0 };
    sl_id_new(s->id, "i-");
    return instance_password_new(srv, s->id, &s->sealed, &s->hash, err);
}

void sched_secrets_release(struct instance_secrets *s)
{
    free(s->sealed);
    free(s->hash);
    *s = (struct instance_secrets){ 0 };
}

int sched_place(struct server *srv, const struct instance_request *rq, char *id,
                struct sl_error *err)
{
    struct store *st = srv->store;
    struct gpu_model m;
    char node_id[SL_ID_MAX], region[64], pinned[SL_ID_MAX];
    int64_t exists, rate, port = 0, now = sl_time_now(), millicores = 0, memory_mib = 0;
    struct shortfall why = { 0 };
    cleanup_tx struct store *tx = NULL;
    const char *plan = rq->plan ? rq->plan : "payg";
    int64_t period;

    if (billing_plan_period(plan, &period, err) < 0)
        return -1;
    bool prepaid = period > 0;
    if (rq->gpus < 1 || rq->gpus > srv->cfg.max_gpus_per_instance)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "gpus must be from 1 to %" PRId64 " (no-GPU mode is a start option)",
                       srv->cfg.max_gpus_per_instance);
    if (rq->data_disk_gib < 1 || rq->data_disk_gib > srv->cfg.max_data_disk_gib)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "data_disk_gib must be from 1 to %" PRId64, srv->cfg.max_data_disk_gib);
    if (find_gpu_model(st, rq->gpu_model, &m, err) < 0)
        return -1;
    if (check_image(st, rq, err) < 0)
        return -1;
    if (rq->region) {
        if (store_get_int(st, "SELECT COUNT(*) FROM regions WHERE id = ?1",
                          DB_ARGS(DB_TEXT(rq->region)), &exists, err) < 0)
            return -1;
        if (!exists)
            return sl_fail(err, SL_E_NOT_FOUND, "no_such_region",
                           "no region '%s': list them with suanli regions", rq->region);
    }
    if (check_may_start(srv, rq->user_id, err) < 0)
        return -1;
    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    if (check_instance_limit(srv, rq->user_id, err) < 0 ||
        (rq->name && check_name_free(st, rq->user_id, rq->name, err) < 0) ||
        (rq->host && (sched_find_host(srv, rq, pinned, err) < 0 ||
                      nodes_check_placement(srv, pinned, err) < 0)))
        return -1;
    int picked = pick_node(srv, rq, &m, rq->host ? pinned : NULL, node_id, region, &millicores,
                           &memory_mib, &why, err);
    if (picked < 0)
        return -1;
    if (picked > 0)
        return rq->host ? refuse_pinned(srv, rq, &m, pinned, &why, err)
                        : refuse(srv, rq, &m, &why, err);
    if (hourly_rate(st, m.id, rq->gpus, region, false, &rate, err) < 0 ||
        (!prepaid && check_balance(st, rq->user_id, rate, err) < 0) ||
        sched_pick_port(st, node_id, &port, err) < 0)
        return -1;
    __attribute__((cleanup(sched_secrets_release))) struct instance_secrets made = { 0 };
    const struct instance_secrets *secrets = rq->secrets;
    if (!secrets) {
        if (sched_secrets_new(srv, &made, err) < 0)
            return -1;
        secrets = &made;
    }
    snprintf(id, SL_ID_MAX, "%s", secrets->id);
    int rc = sched_reserve_gpus(st, node_id, m.id, rq->gpus, id, err);
    if (rc != 0)
        return rc < 0 ? -1 : sl_fail(err, SL_E_INTERNAL, NULL, "BUG: GPUs vanished while placing");
    if (store_exec(st,
                   "INSERT INTO instances (id, user_id, name, region_id, node_id, gpu_model_id,"
                   " gpus, image, system_disk_gib, data_disk_gib, ssh_port, root_password,"
                   " root_password_crypt, state, desired, created_at, updated_at, cpu_millicores,"
                   " memory_mib) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"
                   " 'creating', 'running', ?14, ?14, ?15, ?16)",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(rq->user_id), DB_TEXT(rq->name ? rq->name : id),
                           DB_TEXT(region), DB_TEXT(node_id), DB_TEXT(m.id), DB_INT(rq->gpus),
                           DB_TEXT(rq->image), DB_INT(srv->cfg.system_disk_gib),
                           DB_INT(rq->data_disk_gib), DB_INT(port), DB_TEXT(secrets->sealed),
                           DB_TEXT(secrets->hash), DB_INT(now), DB_INT(millicores * rq->gpus),
                           DB_INT(memory_mib * rq->gpus)),
                   err) < 0 ||
        instance_event(st, id, "create", "creating", "user", NULL, err) < 0 ||
        billing_open_storage(srv, id, err) < 0 ||
        storage_dir_ensure(st, rq->user_id, region, err) < 0 ||
        ports_create_defaults(srv, id, rq->image, err) < 0 ||
        (prepaid && billing_plan_set(srv, id, plan, rq->auto_renew, err) < 0) ||
        instances_node_changed(st, node_id, err) < 0)
        return -1;
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    log_info("instances: placed %s on %s (%" PRId64 " x %s, port %" PRId64 ")", id, node_id,
             rq->gpus, m.name, port);
    return 0;
}
