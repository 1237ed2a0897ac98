/* Open pieces (billing.h, billing_open_pieces): what meters are billed
 * past the charges rows written so far. docs/design/billing.md, "Marks and
 * days". */
#include "billing-meters.h"
#include "billing.h"

#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/timeconst.h"

#include <stdio.h>
#include <string.h>

#define DAY SL_SEC_PER_DAY

int billing_open_pieces(struct store *st, const char *user_id, int64_t from, int64_t to,
                        billing_piece_fn *fn, void *ctx, struct sl_error *err)
{
    size_t n;
    /* a meter has a piece while open, or ended and not written to its end
     * (unsettled): through the partial indexes on each */
    cleanup_free struct meter *ms =
        user_id ? meters_load(st,
                              "SELECT " METER_COLUMNS METER_FROM
                              " WHERE (m.user_id = ?1 AND m.ended_at IS NULL)"
                              " OR (m.unsettled = 1 AND m.user_id = ?1) ORDER BY m.seq",
                              DB_ARGS(DB_TEXT(user_id)), &n, err)
                : meters_load(st,
                              "SELECT " METER_COLUMNS METER_FROM
                              " WHERE m.ended_at IS NULL OR m.unsettled = 1 ORDER BY m.seq",
                              DB_NO_ARGS, &n, err);

    if (!ms)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const struct meter *m = &ms[i];
        int64_t u = m->settled, c = m->charged;
        while (u < m->billed) {
            int64_t step = (u / DAY + 1) * DAY, cost;
            if (step > m->billed)
                step = m->billed;
            struct billing_piece p = {
                .meter_seq = m->seq, .quantity = m->quantity, .from = u, .to = step
            };
            if (meter_cost(m, step, &cost, err) < 0 || sl_money_sub(cost, c, &p.amount, err) < 0)
                return -1;
            if (p.amount > 0 && u >= from && u < to) {
                snprintf(p.user_id, sizeof(p.user_id), "%s", m->user_id);
                snprintf(p.instance_id, sizeof(p.instance_id), "%s", m->instance_id);
                snprintf(p.item, sizeof(p.item), "%s", m->item);
                if (fn(&p, ctx, err) < 0)
                    return -1;
            }
            u = step;
            c = cost;
        }
    }
    return 0;
}
