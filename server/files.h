/* Files of the renter's storage through the browser and the API
 * (docs/design/node-runtime.md, "File storage", "Upload and download"):
 * the renter asks for a ticket (POST /v1/storage/{region}/files {op,
 * path}) and presents it once at http://{instance}-files.{domain}:{proxy
 * port}/?ticket=T, where the node's nginx asks suanlid about it as about a
 * terminal (GET /v1/nodes/{id}/proxy/auth) and the agent serves the one
 * operation the ticket names on the renter's directory. The ticket rides in
 * terminal_tickets (kind files-list, files-get or files-put; its path). */
#ifndef SL_FILES_H
#define SL_FILES_H

#include <stdbool.h>

#include "api.h"
#include "server.h"
#include "terminal.h"

#define FILES_PATH_MAX TERMINAL_PATH_MAX /* bytes of a path in the storage: 4096 */
#define FILES_NAME_MAX 255               /* bytes of one of its names */

/* Whether path names something in a renter's storage as the agent takes
 * it: relative, names of 1 to FILES_NAME_MAX bytes without "/", "." or
 * "..", no control byte; "" is the top (allowed_empty). */
bool files_path_valid(const char *path, bool allowed_empty);

/* Judges one request to a files host ("i-...-files.DOMAIN") as
 * terminal_authorize judges a terminal's: the ticket is deleted when
 * presented; then it must be a files ticket, unexpired, for the host's
 * instance, of its owner, the instance running on node_id, the method its
 * operation's (GET, PUT for files-put) and the Origin the bound one (none
 * is taken for a download: a browser's navigation sends none). On a pass,
 * the ticket's operation ("list", "get", "put") is copied into op (8
 * bytes), its path into path (FILES_PATH_MAX) and its origin into origin
 * (TERMINAL_ORIGIN_MAX). */
int files_authorize(struct server *srv, const struct terminal_request *rq,
                    enum terminal_verdict *out, const char **why, char *op, char *path,
                    char *origin, struct sl_error *err);

#endif
