/* Units of time, named once: `ms / SL_MSEC_PER_SEC`, not `ms / 1000`.
 *
 * Plain int constants, like the literals they replace, so the type of an
 * expression does not change; widen the other operand (int64_t, long) where
 * a product could pass INT_MAX. Micros of money are not time: they are
 * lib/money.h's SL_MICROS_PER_UNIT. */
#ifndef SL_TIMECONST_H
#define SL_TIMECONST_H

#define SL_NSEC_PER_SEC  1000000000
#define SL_USEC_PER_SEC  1000000
#define SL_MSEC_PER_SEC  1000
#define SL_NSEC_PER_MSEC 1000000
#define SL_USEC_PER_MSEC 1000
#define SL_NSEC_PER_USEC 1000

#define SL_SEC_PER_MIN  60
#define SL_SEC_PER_HOUR 3600
#define SL_SEC_PER_DAY  86400

#endif
