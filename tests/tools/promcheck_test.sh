#!/usr/bin/env bash
# promcheck accepts a valid exposition and rejects each kind of violation
# with the reason, so a scrape test that passes through it can fail.
set -u
P=${1:?usage: promcheck_test.sh PROMCHECK}
FAILS=0
CHECKS=0
ok() { # name text
	CHECKS=$((CHECKS + 1))
	if out=$(printf '%b' "$2" | "$P" 2>&1); then echo "ok   accepts: $1"
	else FAILS=$((FAILS + 1)); echo "FAIL rejects valid input ($1): $out"; fi
}
bad() { # name text reason-pattern
	CHECKS=$((CHECKS + 1))
	if out=$(printf '%b' "$2" | "$P" 2>&1); then
		FAILS=$((FAILS + 1)); echo "FAIL accepts invalid input ($1)"
	elif ! grep -qE -- "$3" <<<"$out"; then
		FAILS=$((FAILS + 1)); echo "FAIL $1: '$out' does not say /$3/"
	else echo "ok   rejects: $1 ($out)"; fi
}
H='# HELP h_seconds d\n# TYPE h_seconds histogram\n'
C='# HELP c_total c\n# TYPE c_total counter\n'
ok "counter, gauge, histogram, escapes, timestamp" \
	"${C}c_total{queue=\"a\\\\\\\\b\",kind=\"x\\\\\"y\\\\n\"} 3\nc_total{queue=\"b\",kind=\"x\"} 0 1700000000000\n# TYPE g gauge\ng -1.5e-3\n# a comment\n\n${H}h_seconds_bucket{k=\"a\",le=\"0.1\"} 1\nh_seconds_bucket{k=\"a\",le=\"+Inf\"} 2\nh_seconds_sum{k=\"a\"} 0.3\nh_seconds_count{k=\"a\"} 2\n"
out=$(printf '%b' "${C}c_total{queue=\"a\"} 3\n" | "$P")
CHECKS=$((CHECKS + 1))
[ "$out" = 'c_total{queue="a"} 3' ] && echo "ok   prints samples" || { FAILS=$((FAILS + 1)); echo "FAIL prints '$out'"; }
bad "empty input" "" "empty exposition"
bad "no final newline" "${C}c_total 1" "final newline"
bad "sample without TYPE" "x 1\n" "without a TYPE"
bad "bad metric name" "${C}1c_total 1\n" "bad metric name"
bad "bad value" "${C}c_total one\n" "bad value"
bad "junk after value" "${C}c_total 1 2 3\n" "bad timestamp|junk"
bad "negative counter" "${C}c_total -1\n" "negative"
bad "unterminated label" "${C}c_total{a=\"x} 1\n" "unterminated"
bad "bad escape" "${C}c_total{a=\"\\\\t\"} 1\n" "bad escape"
bad "unquoted label" "${C}c_total{a=x} 1\n" "bad label"
bad "repeated label" "${C}c_total{a=\"x\",a=\"y\"} 1\n" "repeated"
bad "reserved label" "${C}c_total{__a=\"x\"} 1\n" "reserved"
bad "duplicate series" "${C}c_total{a=\"x\"} 1\nc_total{a=\"x\"} 2\n" "twice"
bad "second TYPE" "${C}# TYPE c_total gauge\n" "second TYPE"
bad "unknown type" "# TYPE c_total meter\n" "unknown type"
bad "not contiguous" "${C}c_total 1\n# TYPE g gauge\ng 1\nc_total{a=\"b\"} 2\n" "not contiguous"
bad "buckets not cumulative" "${H}h_seconds_bucket{le=\"1\"} 3\nh_seconds_bucket{le=\"+Inf\"} 2\nh_seconds_count 2\n" "cumulative"
bad "no +Inf bucket" "${H}h_seconds_bucket{le=\"1\"} 3\nh_seconds_sum 1\n" "Inf"
bad "count differs from +Inf" "${H}h_seconds_bucket{le=\"+Inf\"} 3\nh_seconds_sum 1\nh_seconds_count 2\n" "_count does not match"
bad "bucket without le" "${H}h_seconds_bucket 3\n" "without le"
bad "CRLF" "${C}c_total 1\r\n" "carriage return"
echo "promcheck_test: $((CHECKS - FAILS)) of $CHECKS checks passed"
[ "$FAILS" = 0 ]
