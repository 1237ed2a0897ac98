/* Saved images (docs/design/node-runtime.md, "Saved images"): a renter's
 * instance's system disk changes captured by its host as one new layer over
 * the instance's image. The host uploads the layer (a tar with OCI
 * whiteouts) to suanlid, which keeps it as DATA/uploads/<sha256>.archive;
 * every host of the region then fetches it from there like an uploaded image
 * and stacks it on the parent image's layers. */
#ifndef SL_SERVER_IMAGE_SAVE_H
#define SL_SERVER_IMAGE_SAVE_H

#include <jansson.h>

#include "instance-states.h"
#include "server.h"

/* SQL: image i (a row of images) is one user u (an SQL parameter such as
 * "?2") may see and start from: not private, u's own, or shared with u. */
#define IMAGE_VISIBLE(u)                                                                           \
    "(i.kind != 'private' OR i.created_by = " u " OR EXISTS (SELECT 1 FROM image_shares s"         \
    " WHERE s.image = i.name AND s.user_id = " u "))"

struct api_request;
struct api_response;

/* Replies status with image name as GET /v1/images/{name} shows it
 * (api-images.c); 404 when there is none. */
int api_image_reply(struct api_request *req, struct api_response *res, int status, const char *name,
                    struct sl_error *err);

/* 409 being_saved while an image is being saved from instance id: a start,
 * stop, restart or release would change or unmount the disk being read. */
int image_save_verb_check(struct server *srv, const char *id, enum instance_verb verb,
                          struct sl_error *err);

/* The saves node_id is asked to capture: [{image, instance, parent}]. */
json_t *image_saves_desired(struct server *srv, const char *node_id, struct sl_error *err);

#endif
