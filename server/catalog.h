/* The catalog: regions, GPU models and prices. Prices are history: a change
 * adds a row effective from now, and the newest row in effect wins; a
 * region's own price overrides the price for every region (region ""). */
#ifndef SL_CATALOG_H
#define SL_CATALOG_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* Items that carry a price besides GPU models ("gpu:<model id>"). */
#define CATALOG_NOGPU        "nogpu"        /* per hour */
#define CATALOG_DATA_DISK    "data_disk"    /* per GiB-day over free_gib */
#define CATALOG_FILE_STORAGE "file_storage" /* per GiB-day over free_gib */
/* saved images, per renter over free_gib, per GiB-day; one price for every
 * region (images are the renter's, not a region's) */
#define CATALOG_IMAGE_STORAGE "image_storage"

int catalog_region_create(struct store *st, const char *id, const char *name, bool sample,
                          struct sl_error *err);
int catalog_gpu_model_create(struct store *st, const char *name, int64_t vram_mib,
                             int64_t cpu_cores, int64_t memory_mib, int64_t price_per_hour,
                             bool sample, const char *by, char *id_out, struct sl_error *err);
int catalog_price_set(struct store *st, const char *item, const char *region, int64_t amount,
                      int64_t free_gib, bool sample, const char *by, struct sl_error *err);
/* 1 and the price in effect at time at, 0 when none, -1 on error. */
int catalog_price_at(struct store *st, const char *item, const char *region, int64_t at,
                     int64_t *amount, int64_t *free_gib, struct sl_error *err);

/* Loads a JSON catalog (etc/catalog.sample.json) when the catalog is empty. */
/* The hourly price now of one GPU of model_id in region, or of no-GPU mode
 * (model_id NULL); 409 "no_price" when the catalog has none. */
int catalog_hourly_price(struct store *st, const char *model_id, const char *region, int64_t *price,
                         struct sl_error *err);

int catalog_seed_file(struct server *srv, const char *path, struct sl_error *err);

#endif
