#!/usr/bin/env bash
# tests/docs/check_architecture.sh SOURCE_DIR
#
# ARCHITECTURE.md lists every file of src/ and include/ exactly once: as the
# first cell of a table row, "| `path` | what it is |".  Fails, one line per
# problem, on a file that is not listed, listed twice, or listed but absent;
# any other `src/…` or `include/…` path the page names must exist too.
set -u
SRC=${1:?usage: check_architecture.sh SOURCE_DIR}
DOC=$SRC/ARCHITECTURE.md
PROBLEMS=0
problem() { echo "ARCHITECTURE.md: $*"; PROBLEMS=$((PROBLEMS + 1)); }
[ -f "$DOC" ] || { echo "ARCHITECTURE.md: missing"; exit 1; }

listed=$(sed -nE 's/^\| `((src|include)\/[^`]*)` \|.*/\1/p' "$DOC" | sort)
files=$(cd "$SRC" && find src include -type f | sort)
while read -r f; do
	n=$(grep -cxF -- "$f" <<<"$listed")
	[ "$n" -eq 0 ] && problem "$f is not listed (add a row: | \`$f\` | what it is |)"
	[ "$n" -gt 1 ] && problem "$f is listed $n times"
done <<<"$files"
while read -r f; do
	[ -n "$f" ] && [ ! -f "$SRC/$f" ] && problem "lists $f, which does not exist"
done < <(sort -u <<<"$listed")
# Paths named anywhere else on the page (prose, second cells) must exist.
while read -r f; do
	[ -e "$SRC/$f" ] || problem "names \`$f\`, which does not exist"
done < <(grep -oE '`(src|include)/[^` ]*`' "$DOC" | tr -d '`' | grep -v '[*<]' | sort -u)
if [ "$PROBLEMS" -gt 0 ]; then
	echo "$PROBLEMS problem(s) in ARCHITECTURE.md"
	exit 1
fi
echo "ARCHITECTURE.md lists all $(wc -l <<<"$files") files of src/ and include/ once each"
