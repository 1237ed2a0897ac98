/* Instances as the API shows them (the Instance schema of
 * docs/api/openapi.yaml): the record, its SSH access, what it costs, its
 * service ports and its stops. */
#ifndef SL_INSTANCE_VIEW_H
#define SL_INSTANCE_VIEW_H

#include <jansson.h>

#include "../lib/error.h"
#include "server.h"

/* The instance as its owner sees it, root password included: a new
 * reference, or NULL and 404 no_such_instance when it does not exist or
 * user_id (NULL: any owner) does not own it. */
json_t *instance_json(struct server *srv, const char *id, const char *user_id,
                      struct sl_error *err);

/* The indices of the GPUs the instance holds on its host, ascending: a new
 * array, or NULL on a store error. */
json_t *instance_gpu_indices(struct store *st, const char *id, struct sl_error *err);

#endif
