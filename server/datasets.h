/* Public data (issue 14): datasets an operator publishes, read-only at
 * /root/public in every instance of a region. suanlid keeps the list
 * (table datasets: an uploaded tar, kept in DATA/uploads like an image
 * archive, or a directory each host has), the desired state names them to
 * every node of their region, and the nodes report what they hold
 * (node_datasets). docs/design/node-runtime.md, "Public data". */
#ifndef SL_SERVER_DATASETS_H
#define SL_SERVER_DATASETS_H

#include <jansson.h>
#include <stdbool.h>

#include "store.h"
#include "../lib/error.h"

/* 1 to 64 of [a-z0-9._-], not starting with '.' (node/public-data.h). */
bool dataset_name_valid(const char *name);

/* The datasets of node_id's region (and of all regions), as the desired
 * state names them: [{name, sha256} | {name, path}]. A new reference. */
json_t *datasets_desired(struct store *st, const char *node_id, struct sl_error *err);

/* Replaces what the node holds with its heartbeat's report:
 * [{name, state (ready, building, failed), message, size_bytes}]. */
int datasets_apply_report(struct store *st, const char *node_id, json_t *report,
                          struct sl_error *err);

#endif
