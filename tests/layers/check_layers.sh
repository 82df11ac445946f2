#!/usr/bin/env bash
# tests/layers/check_layers.sh SOURCE_DIR LIBSKIPLOCK.a [CLI_OBJECT_DIR]
#
# The library's parts are folders of src/lib, in dependency order:
#   core  queue  coord  worker  migrate  doctor
# A file may include, and its object may call, only its own part or an
# earlier one.  Checked here:
#  - every #include "…" in src/lib/<part>/*.[ch] and include/skiplock/*.h
#    names "part/file.h", a public header "skiplock/NAME.h" (each belongs to
#    a part, PUBLIC below) or the umbrella "skiplock.h" (above every part:
#    only the files directly in src/lib may include it);
#  - every skl_ symbol an object of the static library uses (nm -u) is
#    defined (nm --defined-only) by an object of the same or an earlier part;
#  - no two files of a part call each other, directly or around a cycle;
#  - the command (src/cli) includes no internal header of the library but
#    core/lazy.h, the dlopen helper it shares with the library;
#  - with CLI_OBJECT_DIR (the command's objects, CMake's
#    CMakeFiles/skiplock.dir): no cycle among the command's files; a command
#    file (cmd_NAME.c) calls no other command's file (its own subcommand
#    files cmd_NAME_*.c excepted); the dashboard (dashboard/) calls only
#    itself, print/, http/ and the generated assets (and the library).
# Prints the layer table (what each part includes and calls), then one line
# per violation, and exits 1 when there is any.
set -u
SRC=${1:?usage: check_layers.sh SOURCE_DIR LIBSKIPLOCK.a [CLI_OBJECT_DIR]}
LIB=${2:?usage: check_layers.sh SOURCE_DIR LIBSKIPLOCK.a [CLI_OBJECT_DIR]}
CLI_OBJ=${3:-}
PARTS=(core queue coord worker migrate doctor lib)
declare -A RANK PUBLIC PART_OF
for i in "${!PARTS[@]}"; do RANK[${PARTS[$i]}]=$i; done
# The public headers by part (include/skiplock/NAME.h).
while read -r part names; do
	for n in $names; do PUBLIC[$n]=$part; done
done <<'EOF'
core error client schema retry
queue queue inspect control workers limits deps
coord lease idem cron retention
worker worker webhook
migrate migrate
doctor doctor diagnose
EOF
# Parts whose files must not call each other in a cycle: every one.
ACYCLIC_PARTS=("${PARTS[@]}")
HANDLER_FILES=(command.c.o webhook.c.o stream.c.o stream_out.c.o stream_proc.c.o stream_loop.c.o)
HANDLER_BLIND=(worker_loop.c.o worker.c.o)
PROBLEMS=0
problem() { echo "violation: $*"; PROBLEMS=$((PROBLEMS + 1)); }
declare -A INCLUDES CALLS FILES
EDGES=""                     # "from.o to.o" lines: calls within a part

# part_of FILE (relative to SRC): the part a source or header belongs to.
part_of() {
	case $1 in
	src/lib/*/*) local p=${1#src/lib/}; echo "${p%%/*}" ;;
	src/lib/*) echo lib ;;
	include/skiplock/*) local n=${1#include/skiplock/}; echo "${PUBLIC[${n%.h}]:-?}" ;;
	esac
}

# included_part HEADER: the part an #include "HEADER" reaches, or "?".
included_part() {
	case $1 in
	skiplock.h) echo lib ;;
	skiplock/*.h) local n=${1#skiplock/}; echo "${PUBLIC[${n%.h}]:-?}" ;;
	*/*) local p=${1%%/*}; [ -n "${RANK[$p]:-}" ] && [ -f "$SRC/src/lib/$1" ] && echo "$p" || echo "?" ;;
	*) echo "?" ;;
	esac
}

check_includes() {
	local f part h to
	while read -r f; do
		part=$(part_of "$f")
		if [ -z "${RANK[$part]:-}" ]; then
			problem "$f is in no part (src/lib/<part>/ with part one of ${PARTS[*]})"
			continue
		fi
		[[ $f == src/lib/*.c ]] && FILES[$part]=$((${FILES[$part]:-0} + 1))
		for h in $(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/p' "$SRC/$f"); do
			to=$(included_part "$h")
			if [ "$to" = "?" ]; then
				problem "$f includes \"$h\": not \"part/file.h\" of src/lib, nor a public header of a part"
			elif [ "${RANK[$to]}" -gt "${RANK[$part]}" ]; then
				problem "$f ($part) includes \"$h\" ($to, a later part)"
			elif [ "$to" != "$part" ]; then
				INCLUDES[$part]="${INCLUDES[$part]:-} $to"
			fi
		done
	done < <(cd "$SRC" && find src/lib include/skiplock -name '*.[ch]' | sort)
}

# Object names in the archive are the source's file name plus .o; the
# generated schema_sql.c (cmake/embed_sql.cmake) belongs to core.
map_objects() {
	local f b
	PART_OF[schema_sql.c.o]=core
	while read -r f; do
		b=$(basename "$f").o
		[ -n "${PART_OF[$b]:-}" ] && problem "two sources are named $(basename "$f"): objects would be ambiguous"
		PART_OF[$b]=$(part_of "$f")
	done < <(cd "$SRC" && find src/lib -name '*.c' | sort)
}

check_calls() {
	local obj sym from to
	declare -A DEF
	while IFS=: read -r _ obj sym; do
		DEF[$sym]=$obj
	done < <(nm -A --defined-only "$LIB" 2>/dev/null |
		awk '$(NF-1) ~ /^[TDBRV]$/ && $NF ~ /^skl_/ {sub(/:[^:]*$/, "", $1); print $1 ":" $NF}')
	while IFS=: read -r _ obj sym; do
		from=${PART_OF[$obj]:-?}
		to=${PART_OF[${DEF[$sym]:-}]:-?}
		if [ "$from" = "?" ]; then
			problem "object $obj has no source in src/lib"
		elif [ -z "${DEF[$sym]:-}" ]; then
			problem "$obj ($from) uses $sym, which the library does not define"
		elif [ "${RANK[$to]}" -gt "${RANK[$from]}" ]; then
			problem "$obj ($from) calls $sym, defined in ${DEF[$sym]} ($to, a later part)"
		elif [ "$to" != "$from" ]; then
			CALLS[$from]="${CALLS[$from]:-} $to"
		elif [ "$obj" != "${DEF[$sym]}" ]; then
			EDGES+="$from $obj ${DEF[$sym]} $sym"$'\n'
		fi
	done < <(nm -A -u "$LIB" 2>/dev/null |
		awk '$NF ~ /^skl_/ {sub(/:[^:]*$/, "", $1); print $1 ":" $NF}')
	[ "${#DEF[@]}" -gt 0 ] || problem "nm found no skl_ symbols in $LIB"
}

# The command's includes that name a header of src/lib: only CLI_MAY.
CLI_MAY="core/lazy.h"
check_cli() {
	local f h
	while read -r f; do
		for h in $(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/p' "$SRC/$f"); do
			[ -f "$SRC/src/lib/$h" ] && [ ! -f "$SRC/src/cli/$h" ] && [ "$h" != "$CLI_MAY" ] &&
				problem "$f includes \"$h\", an internal header of the library (the command may include only $CLI_MAY)"
		done
	done < <(cd "$SRC" && find src/cli -name '*.[ch]' | sort)
}

# No cycle among the files of an ACYCLIC_PARTS part; no call from a
# HANDLER_BLIND object into a HANDLER_FILES object.
check_cycles() {
	local part from obj def sym loop
	for part in "${ACYCLIC_PARTS[@]}"; do
		loop=$(printf '%s' "$EDGES" | awk -v p="$part" '$1 == p {print $2, $3}' | cycle_of)
		[ -z "$loop" ] || problem "the $part files call each other in a cycle: ${loop% }"
	done
	while read -r from obj def sym; do
		[ -n "$obj" ] || continue
		[[ " ${HANDLER_BLIND[*]} " == *" $obj "* && " ${HANDLER_FILES[*]} " == *" $def "* ]] &&
			problem "$obj calls $sym of $def: handlers are reached only through handler_ops"
	done <<<"$EDGES"
}

# cycle_of "FROM TO" lines: the files of a cycle, or nothing.
cycle_of() {
	sort -u | tsort 2>&1 >/dev/null | sed -n 's/^tsort: \([^ ]*\.o\)$/\1/p' | awk '!seen[$0]++' |
		tr '\n' ' '
}

# The command's files (objects under CLI_OBJ): no cycle, no command calling
# another, the dashboard on the library, print/ and http/ only.
check_cli_calls() {
	[ -n "$CLI_OBJ" ] || return 0
	[ -d "$CLI_OBJ" ] || { problem "$CLI_OBJ: no such directory of the command's objects"; return; }
	local obj sym def from to loop edges=""
	declare -A CDEF=()
	while IFS=: read -r obj sym; do CDEF[$sym]=$obj; done < <(
		cd "$CLI_OBJ" && find . -name '*.o' | sort | xargs nm -A --defined-only 2>/dev/null |
			awk '$(NF-1) ~ /^[TDBR]$/ {sub(/:[^:]*$/, "", $1); sub(/^\.\//, "", $1); print $1 ":" $NF}')
	[ "${#CDEF[@]}" -gt 0 ] || { problem "nm found no symbols in the command's objects ($CLI_OBJ)"; return; }
	while IFS=: read -r obj sym; do
		def=${CDEF[$sym]:-}
		[ -n "$def" ] && [ "$def" != "$obj" ] || continue
		edges+="$obj $def"$'\n'
		from=$(basename "$obj" .c.o) to=$(basename "$def" .c.o)
		if [[ $from == cmd_* && $to == cmd_* && $to != "$from" && $to != "${from}"_* ]]; then
			problem "${obj%.o} calls $sym of ${def%.o}: a command never calls another command's file (share it from print/ or the library)"
		fi
		if [[ $obj == */dashboard/* && $def != */dashboard/* && $def != */print/* &&
			$def != */http/* && $def != generated/* ]]; then
			problem "${obj%.o} calls $sym of ${def%.o}: the dashboard uses only the library, print/ and http/"
		fi
	done < <(cd "$CLI_OBJ" && find . -name '*.o' | sort | xargs nm -A -u 2>/dev/null |
		awk '{sub(/:[^:]*$/, "", $1); sub(/^\.\//, "", $1); print $1 ":" $NF}')
	loop=$(printf '%s' "$edges" | cycle_of)
	[ -z "$loop" ] || problem "the command's files call each other in a cycle: ${loop% }"
	CLI_FILES=$(cd "$CLI_OBJ" && find . -name '*.o' | wc -l)
}

# uniq_sorted "WORDS": the distinct words, in part order.
uniq_sorted() {
	local p out=""
	for p in "${PARTS[@]}"; do [[ " $1 " == *" $p "* ]] && out+="$p "; done
	out=${out% }
	echo "${out:--}"
}

map_objects
check_includes
check_calls
check_cli
check_cycles
check_cli_calls
printf '%-6s %-8s %-6s %-36s %s\n' layer part files "includes from" "calls into"
for p in "${PARTS[@]}"; do
	printf '%-6s %-8s %-6s %-36s %s\n' "$((${RANK[$p]} + 1))" "$p" "${FILES[$p]:-0}" \
		"$(uniq_sorted "${INCLUDES[$p]:-}")" "$(uniq_sorted "${CALLS[$p]:-}")"
done
if [ "$PROBLEMS" -gt 0 ]; then
	echo "$PROBLEMS layering violation(s): a part may include and call only itself and earlier parts"
	exit 1
fi
echo "layering ok: no part includes or calls a later one; no cycle among the files of: ${ACYCLIC_PARTS[*]}"
[ -z "$CLI_OBJ" ] || echo "command ok: no cycle among its ${CLI_FILES:-0} files, no command calls another's, the dashboard on the library, print/ and http/"
