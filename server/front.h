/* The front door for service ports (docs/design/access.md): with many hosts,
 * one nginx (beside suanlid, or on any host) takes every
 * INSTANCE-PORT.DOMAIN request and passes it, untouched, to the proxy of the
 * host the instance lives on, which judges it as it judges any request.
 * suanlid tells the front where an instance lives, and tells only the
 * bearer of the front's token, kept in DATA/front-token. */
#ifndef SL_FRONT_H
#define SL_FRONT_H

#include "api.h"
#include "server.h"

#define FRONT_TOKEN_PREFIX "sl_front_"
#define FRONT_TOKEN_MAX    (sizeof(FRONT_TOKEN_PREFIX) + 64)

/* Reads DATA_DIR/front-token into token, making it (0600) when missing.
 * Deleting the file and restarting suanlid changes it. */
int front_token_load(const char *data_dir, char token[static FRONT_TOKEN_MAX],
                     struct sl_error *err);

/* API_FRONT routes: the caller must bear the front's token (401 otherwise);
 * it is no user and no node. */
int front_authenticate(struct api_request *req, struct sl_error *err);

/* GET /v1/front/route: for the front's token and the host it routed on
 * (X-Original-Host), 204 with X-Suanli-Upstream: ADDRESS:PORT of the proxy
 * of the host holding that service; 403 when no host holds it (the front
 * says "no such service"), 401 without the front's token. */
int api_front_route(struct api_request *req, struct api_response *res, struct sl_error *err);

/* `suanlid front-config [--data-dir DIR] [--server URL] [--listen ADDR:PORT]`:
 * prints the front's nginx configuration, for nginx's http {} context.
 * Returns the process's exit status. */
int front_config_main(int argc, char **argv);

#endif
