/* Storage meters: what file storage and saved images bill (billing.h,
 * docs/design/billing.md "Storage meters"). */
#include "billing.h"

#include "../lib/cleanup.h"
#include "../lib/timefmt.h"
#include "catalog.h"

#define GIB (1024LL * 1024 * 1024)

int64_t billing_storage_mib_over(int64_t used_bytes, int64_t free_gib)
{
    if (used_bytes <= 0 || free_gib < 0 || free_gib > INT64_MAX / GIB)
        return 0;
    int64_t free_bytes = free_gib * GIB;
    return used_bytes > free_bytes ? (used_bytes - free_bytes) / BILLING_STORAGE_UNIT : 0;
}

/* MiB over the free size, at most what a meter's amount (MiB x price)
 * holds: a quantity no int64 amount can bill must never fail a host's
 * heartbeat, which carries the sample (an absurd price or a mount backend
 * of exabytes: billed at the most the books can hold). */
static int64_t quantity(int64_t used_bytes, int64_t free_gib, int64_t price)
{
    int64_t mib = billing_storage_mib_over(used_bytes, free_gib);
    return price > 0 && mib > INT64_MAX / price ? INT64_MAX / price : mib;
}

/* The item's price and free size now (0 and 0 when it has none). */
static int price_now(struct store *st, const char *item, const char *region, int64_t *price,
                     int64_t *free_gib, struct sl_error *err)
{
    *price = 0;
    *free_gib = 0;
    return catalog_price_at(st, item, region, sl_time_now(), price, free_gib, err) < 0 ? -1 : 0;
}

int billing_file_storage_sample(struct store *st, const char *user_id, const char *region,
                                int64_t used_bytes, int64_t previous_at, struct sl_error *err)
{
    int64_t price, free_gib, now = sl_time_now();

    if (price_now(st, CATALOG_FILE_STORAGE, region, &price, &free_gib, err) < 0)
        return -1;
    if (previous_at <= 0 || previous_at > now)
        previous_at = now;
    return billing_renter_meter_set(st, user_id, CATALOG_FILE_STORAGE, region,
                                    quantity(used_bytes, free_gib, price), price,
                                    BILLING_STORAGE_PERIOD_S, now, previous_at, err);
}

int billing_image_storage_update(struct store *st, const char *user_id, struct sl_error *err)
{
    int64_t price, free_gib, bytes, now = sl_time_now();

    /* the layers the renter saved and that are stored (not an image being
     * saved, nor one whose capture failed) */
    if (store_get_int(st,
                      "SELECT COALESCE(SUM(layer_bytes), 0) FROM images WHERE created_by = ?1"
                      " AND parent != '' AND save_state = ''",
                      DB_ARGS(DB_TEXT(user_id)), &bytes, err) < 0 ||
        price_now(st, CATALOG_IMAGE_STORAGE, "", &price, &free_gib, err) < 0)
        return -1;
    return billing_renter_meter_set(st, user_id, CATALOG_IMAGE_STORAGE, "",
                                    quantity(bytes, free_gib, price), price,
                                    BILLING_STORAGE_PERIOD_S, now, now, err);
}
