/* Idempotency-Key on POST: the first response is stored in the same
 * transaction as the handler's writes, so a retry after a crash either finds
 * both or neither, and is replayed; the same key with another request is 422. */
#ifndef SL_IDEMPOTENCY_H
#define SL_IDEMPOTENCY_H

#include "api.h"

#define IDEMPOTENCY_KEY_MAX 255

bool idempotency_applies(const struct api_request *req);

int idempotency_run(struct api_request *req, struct api_response *res,
                    int (*handler)(struct api_request *, struct api_response *, struct sl_error *),
                    struct sl_error *err);

/* Deletes stored responses older than the configured time to live. */
int idempotency_expire(struct server *srv, struct sl_error *err);

#endif
