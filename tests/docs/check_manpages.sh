#!/usr/bin/env bash
# tests/docs/check_manpages.sh SKIPLOCK SOURCE_DIR
#
# The man pages cannot drift from the command: for every command that
# `skiplock --help` lists there must be man/skiplock-CMD.1, and every option
# the command accepts — from its option table in src/cli (cmd_CMD.c, CMD_*.c
# and CMD/*.c) and from `skiplock CMD [SUB] --help` — must be described in that
# page; the common options (CLI_COMMON_LONGOPTS in src/cli/cli.h) and every
# command must be in man/skiplock.1.  An option in a table but not in the
# command's --help is reported too.  Each problem is one line saying what
# is missing where; pages must also format without groff warnings.
set -u
BIN=${1:?usage: check_manpages.sh SKIPLOCK SOURCE_DIR}
SRC=${2:?usage: check_manpages.sh SKIPLOCK SOURCE_DIR}
MAN=$SRC/man
PROBLEMS=0
CHECKED=0
problem() { PROBLEMS=$((PROBLEMS + 1)); echo "MISSING: $*"; }

# --opt as roff writes it: \-\-opt, not followed by more of a name (the
# page's text is in $TEXT; bash matching: no process per check)
in_page() {
	local re="\\\\-\\\\-${1//-/\\\\-}([^a-z0-9\\\\]|\\\\[^-]|$)"
	[[ $TEXT =~ $re ]]
}
# word list membership without a process
has() { [[ $'\n'$2$'\n' == *$'\n'$1$'\n'* ]]; }
table_options() { # files...: long options of the getopt tables
	grep -ohE '\{"[a-z][a-z0-9-]*", *(required|no|optional)_argument' "$@" 2>/dev/null |
		sed -E 's/\{"([^"]*)".*/\1/' | sort -u
}
help_options() { # help text on stdin: options defined at the start of a line
	grep -oE '^ {1,8}(-[a-zA-Z], )?--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z][a-z0-9-]*' |
		sed 's/^--//' | sort -u
}
common=$(sed -n '/define CLI_COMMON_LONGOPTS/,/^$/p' "$SRC/src/cli/cli.h" |
	grep -oE '\{"[a-z][a-z0-9-]*"' | tr -d '{"' | sort -u)
[ -n "$common" ] || problem "no common options found in src/cli/cli.h (CLI_COMMON_LONGOPTS)"

top=$MAN/skiplock.1
[ -f "$top" ] || problem "man/skiplock.1 does not exist"
TEXT=$(cat "$top" 2>/dev/null)
TOP=$TEXT
for o in $common; do
	CHECKED=$((CHECKED + 1))
	[ -f "$top" ] && ! in_page "$o" &&
		problem "man/skiplock.1: common option --$o (src/cli/cli.h CLI_COMMON_LONGOPTS) is not described"
done

commands=$("$BIN" --help | sed -n '/^Commands:/,/^$/p' | sed -nE 's/^  ([a-z][a-z0-9-]*) .*/\1/p')
[ -n "$commands" ] || problem "\`skiplock --help\` lists no commands"
for c in $commands; do
	CHECKED=$((CHECKED + 1))
	[ -f "$top" ] && [[ $TOP != *"skiplock\\-$c"* ]] &&
		problem "man/skiplock.1: command $c (in \`skiplock --help\`) is not listed"
	page=$MAN/skiplock-$c.1
	if [ ! -f "$page" ]; then
		problem "man/skiplock-$c.1 does not exist: \`skiplock --help\` lists the command $c"
		continue
	fi
	files=("$SRC/src/cli/cmd_$c.c")
	for f in "$SRC/src/cli/${c}"_*.c "$SRC/src/cli/${c}"/*.c; do [ -e "$f" ] && files+=("$f"); done
	help=$("$BIN" "$c" --help 2>/dev/null)
	# subcommands: "skiplock CMD SUB" in its usage lines and in the sources
	subs=$( { grep -oE "skiplock $c [a-z][a-z-]*" <<<"$help"
		grep -ohE "Usage: skiplock $c [a-z][a-z-]*" "${files[@]}" 2>/dev/null; } |
		awk '{print $NF}' | sort -u)
	TEXT=$(cat "$page")
	for s in $subs; do
		[[ $TEXT == *"$s"* ]] || problem "man/skiplock-$c.1: subcommand $c $s is not described"
		help+=$'\n'$("$BIN" "$c" "$s" --help 2>/dev/null)
	done
	from_help=$(help_options <<<"$help")
	from_table=$(table_options "${files[@]}")
	for o in $(printf '%s\n%s\n' "$from_help" "$from_table" | sort -u); do
		has "$o" "$common" && continue
		CHECKED=$((CHECKED + 1))
		where=""
		has "$o" "$from_table" && where="the option table in ${files[*]#"$SRC/"}"
		has "$o" "$from_help" && where="${where:+$where and }\`skiplock $c [SUB] --help\`"
		in_page "$o" || problem "man/skiplock-$c.1: option --$o (in $where) is not described"
		has "$o" "$from_help" ||
			problem "\`skiplock $c [SUB] --help\` does not describe --$o (in ${files[*]#"$SRC/"})"
	done
done

if command -v groff >/dev/null; then
	for p in "$MAN"/*.1; do
		CHECKED=$((CHECKED + 1))
		w=$(groff -man -ww -z "$p" 2>&1)
		[ -z "$w" ] || problem "${p#"$SRC/"} does not format cleanly: $(head -c 300 <<<"$w")"
	done
fi
echo "check_manpages: $CHECKED checks, $PROBLEMS problems"
[ "$PROBLEMS" = 0 ]
