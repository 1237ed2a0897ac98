/* What the CLI prints: aligned tables for people, the API's JSON for
 * scripts (-o json), and the formatting of money, times and durations. */
#ifndef SUANLI_OUTPUT_H
#define SUANLI_OUTPUT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum output_mode {
    OUTPUT_TABLE,
    OUTPUT_JSON,
    OUTPUT_CSV,
};

/* A table of strings; cells are copied. Columns are padded to the widest
 * cell in display columns (UTF-8 aware, East Asian wide characters count
 * two). */
struct table {
    size_t ncols, nrows, cap;
    char **cells; /* nrows * ncols; row 0 is the header */
};

/* headers: ncols strings. */
void table_init(struct table *t, size_t ncols, const char *const *headers);
/* Adds a row of t->ncols strings; NULL prints as "-". */
void table_add(struct table *t, const char *const *row);
void table_print(const struct table *t, FILE *out);
/* The table as CSV (RFC 4180: a header line, fields quoted when they hold a
 * comma, a quote or a line break; NULL cells are empty). */
void table_print_csv(const struct table *t, FILE *out);
void table_release(struct table *t);

struct output_pair {
    const char *key, *value; /* a NULL value prints as "-" */
};

/* Prints "key:   value" lines with the values aligned. */
void output_pairs(FILE *out, const struct output_pair *pairs, size_t n);

/* Pretty JSON, two-space indent, with a final newline. */
void output_json(FILE *out, json_t *j);

/* "¥12.50" for CNY, "$3.00" for USD, "12.50 XYZ" for other codes; currency
 * NULL prints the amount alone. buf holds OUTPUT_MONEY_MAX bytes. */
#define OUTPUT_MONEY_MAX 48
char *output_money(int64_t micros, const char *currency, char *buf);
/* Like output_money with an explicit '+' for positive amounts. */
char *output_money_signed(int64_t micros, const char *currency, char *buf);

/* bytes in binary units, one decimal below 10 ("1.5 GiB", "300 MiB",
 * "0 B" for nothing or less); buf holds 32 bytes. */
const char *output_size(int64_t bytes, char *buf);

/* The "YYYY-MM-DD HH:MM" part of an RFC 3339 string, or "-" when NULL;
 * buf holds 32 bytes. */
const char *output_time(const char *rfc3339, char *buf);

/* Borrowed string field of j, or NULL. */
const char *jstr(json_t *j, const char *key);
/* Integer field of j, or 0. */
int64_t jint(json_t *j, const char *key);

#endif
