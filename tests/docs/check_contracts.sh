#!/usr/bin/env bash
# tests/docs/check_contracts.sh SOURCE_DIR
#
# Every exported function (a declaration that starts with SKL_API in
# include/) has its own comment directly above it: the line before the
# declaration ends a /* … */ comment.  What the comments say in common
# (NULL, result codes, memory, blocking, threads) is stated once in the
# opening comment of each header; a function's comment adds what differs.
# Prints how many exported functions there are and how many lack a
# comment, naming each; fails unless none does.
set -u
SRC=${1:?usage: check_contracts.sh SOURCE_DIR}
out=$(cd "$SRC" && awk '
	/^[[:space:]]*SKL_API[[:space:]]/ {
		total++
		if (prev !~ /\*\/[[:space:]]*$/) {
			missing++
			name = $0
			sub(/\(.*/, "", name)
			n = split(name, w, /[ *]+/)
			printf "no comment above %s (%s:%d)\n", w[n], FILENAME, FNR
		}
	}
	{ prev = $0 }
	END { printf "%d exported functions, %d without a comment\n", total, missing + 0 }
' include/skiplock.h include/skiplock/*.h)
echo "$out"
[[ $out == *", 0 without a comment" ]]
