/* jansson glue: a cleanup attribute for references and a declarative check of
 * request objects (types, bounds, unknown fields). */
#ifndef SL_JSON_H
#define SL_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"

static inline void sl_cleanup_jsonp(json_t **j)
{
    json_decref(*j);
}
#define cleanup_json __attribute__((cleanup(sl_cleanup_jsonp)))

enum sl_json_type {
    SL_JSON_STRING, /* out: const char ** borrowed from the object */
    SL_JSON_INT,    /* out: int64_t * */
    SL_JSON_BOOL,   /* out: bool * */
    SL_JSON_ARRAY,  /* out: json_t ** borrowed; max_len bounds the items (0: 256) */
    SL_JSON_OBJECT, /* out: json_t ** borrowed; checked further by the caller */
};

struct sl_json_field {
    const char *name;
    enum sl_json_type type;
    bool required;
    size_t min_len, max_len; /* strings, in bytes; max_len 0 means 256 */
    bool multiline;          /* strings: allow tab, CR and LF (pasted text) */
    int64_t min, max;        /* integers; both 0 means no bound */
    void *out;               /* untouched when the field is absent */
};

/* Checks obj against fields: it must be an object, carry every required
 * field, no unknown field, each of its type and within its bounds; strings
 * must not hold control characters (but multiline ones may hold tab, CR
 * and LF). Fills the outs. Errors are SL_E_INVALID
 * with code "invalid_field" or "unknown_field" and name the field. */
int sl_json_fields(json_t *obj, const struct sl_json_field *fields, size_t n, struct sl_error *err);

/* Parses a request body: must be a single JSON object, valid UTF-8, no NUL.
 * Returns a new reference or NULL with code "invalid_json". */
json_t *sl_json_parse_object(const char *body, size_t len, struct sl_error *err);

#endif
