/* The metadata endpoint (DESIGN.md section 5): inside every instance,
 * http://169.254.169.254/ answers for that instance only. The agent serves
 * it on the bridge's gateway address (a port of its own, metadata.port);
 * a DNAT rule of the bridge maps 169.254.169.254:80 there and the firewall
 * lets exactly that through (firewall_allow_metadata).
 *
 * A request is the instance's when it comes from the address the instance
 * holds on the bridge (its cached CNI result, DATA/net/results/<id>.json)
 * AND carries `Authorization: Bearer TOKEN` with the token of that
 * instance's boot directory (/.suanli/metadata-token inside, new at every
 * start, boot.h). Anything else is 403; a path naming another instance is
 * 404. The agent then asks suanlid with its node token:
 *
 *   GET  /                      the instance: id, state, plan, scheduled and
 *   GET  /instances/ID          idle stops, the owner's balance and how long
 *                               it lasts (covers_seconds)
 *   POST /stop                  stops it now (billing stops with the request)
 *   POST /instances/ID/stop
 *
 * The `shutdown` command inside (boot.h) calls these.
 *
 * One instance cannot starve the others: at most 8 connections per address
 * (of 256, a thread each), and a request's headers are due 10 s after
 * connecting; more connections are closed at once (lib/conn-guard.h). */
#ifndef SL_NODE_METADATA_H
#define SL_NODE_METADATA_H

#include <stdbool.h>
#include <stddef.h>

#include "../lib/error.h"
#include "../lib/id.h"

struct metadata_config {
    const char *server;  /* suanlid's URL */
    const char *node_id; /* this node, and its token for suanlid */
    const char *node_token;
    const char *data_dir;  /* DATA: instances/<id>/boot/metadata-token */
    const char *net_state; /* DATA/net: results/<id>.json */
    const char *bridge;
    const char *subnet;
    unsigned port;
};

struct metadata_server;

/* Installs the bridge's rules and serves on the gateway address of subnet
 * (which need not exist yet: the bridge comes with the first instance).
 * The strings of cfg must outlive the server. */
struct metadata_server *metadata_start(const struct metadata_config *cfg, struct sl_error *err);
void metadata_stop(struct metadata_server *m);

/* The gateway host-local gives a subnet's bridge: its first address
 * ("10.88.0.0/16" -> "10.88.0.1"). out holds 64 bytes. */
int metadata_gateway(const char *subnet, char *out, struct sl_error *err);

/* The instance whose cached CNI result holds address ip: 1 with id filled
 * (SL_ID_MAX bytes), 0 when none. */
int metadata_instance_for_ip(const char *net_state, const char *ip, char *id);

/* Checks "Bearer TOKEN" against the instance's token file in constant
 * time: true when it matches. */
bool metadata_token_ok(const char *data_dir, const char *id, const char *authorization);

#endif
