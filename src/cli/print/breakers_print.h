/*
 * breakers_print.h — the circuit breakers as a table or JSON, shared by
 * `skiplock breakers` and `skiplock status`.
 */
#ifndef SKL_CLI_BREAKERS_PRINT_H
#define SKL_CLI_BREAKERS_PRINT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "skiplock.h"

bool breakers_print_table(const skl_breaker_info *rows, size_t n);
/* A JSON array (new reference), NULL when out of memory. */
json_t *breakers_json(const skl_breaker_info *rows, size_t n);

#endif
