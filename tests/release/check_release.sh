#!/usr/bin/env bash
# tests/release/check_release.sh SOURCE_DIR
#
# The release line (sql/RELEASES, CHANGELOG.md):
#   - every step of a release is in sql/ with the very text it was released
#     with (its SHA-256), and sql/CHECKSUMS pins the same text;
#   - releases are in version order and hold consecutive steps: no step was
#     added below a release's last step afterwards;
#   - every step after the newest release is named under "Unreleased" in
#     CHANGELOG.md, and every release has its section there;
#   - one version everywhere: CMakeLists.txt, include/skiplock.h, the man
#     pages, the Node, Python and Rust packages, and it is the newest release;
#   - when the tree is a git checkout with tags vX.Y.Z, the sql/RELEASES of
#     each tag is a prefix of today's (a listed release is never edited).
# Each problem is one line; exit 1 when there is any.
set -u
SRC=${1:?usage: check_release.sh SOURCE_DIR}
cd "$SRC" || exit 2
PROBLEMS=0
problem() { PROBLEMS=$((PROBLEMS + 1)); echo "RELEASE: $*"; }

# --- the releases and their steps ---
declare -A released=()  # sql/NNNN_name.sql -> release
versions=()
last_step=0
current=""
while read -r a b _; do
	case $a in
	'' | '#'*) continue ;;
	release)
		[[ $b =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || problem "sql/RELEASES: \"$b\" is not a version X.Y.Z"
		if [ ${#versions[@]} -gt 0 ]; then
			prev=${versions[-1]}
			[ "$(printf '%s\n%s\n' "$prev" "$b" | sort -V | tail -n 1)" = "$b" ] && [ "$prev" != "$b" ] ||
				problem "sql/RELEASES: release $b does not come after $prev"
		fi
		versions+=("$b")
		current=$b
		;;
	*)
		file=$b
		[ -n "$current" ] || { problem "sql/RELEASES: $file is listed before any release line"; continue; }
		[ -z "${released[$file]:-}" ] || problem "sql/RELEASES: $file is in two releases"
		released[$file]=$current
		num=$(basename "$file" | cut -c1-4)
		[ $((10#$num)) -gt "$last_step" ] || problem "sql/RELEASES: $file ($current) is not after step $last_step"
		last_step=$((10#$num))
		if [ ! -f "$file" ]; then
			problem "$file belongs to release $current but is missing"
			continue
		fi
		sum=$(sha256sum "$file" | cut -d' ' -f1)
		[ "$sum" = "$a" ] || problem "$file belongs to release $current and changed (sha256 $sum, released $a): a released step never changes; write a new step"
		grep -qx "$a  $file" sql/CHECKSUMS || problem "sql/CHECKSUMS does not pin $file as released in $current"
		;;
	esac
done <sql/RELEASES
[ ${#versions[@]} -gt 0 ] || problem "sql/RELEASES lists no release"
newest=${versions[-1]:-none}

# --- every step is released or named as unreleased ---
unreleased=$(awk '/^## Unreleased/{on=1; next} /^## /{on=0} on' CHANGELOG.md 2>/dev/null)
for f in sql/[0-9][0-9][0-9][0-9]_*.sql; do
	[ -n "${released[$f]:-}" ] && continue
	num=$(basename "$f" | cut -c1-4)
	if [ $((10#$num)) -le "$last_step" ]; then
		problem "$f is numbered within a release (last released step $last_step) but belongs to none"
	elif ! grep -qF "$(basename "$f" .sql)" <<<"$unreleased"; then
		problem "$f is unreleased and CHANGELOG.md's \"## Unreleased\" does not name it"
	fi
done
[ -f CHANGELOG.md ] || problem "CHANGELOG.md is missing"
for v in "${versions[@]}"; do
	grep -qE "^## \[?$v\]?( |$)" CHANGELOG.md 2>/dev/null || problem "CHANGELOG.md has no section \"## $v\""
done

# --- one version ---
version_of() { # description value
	[ "$2" = "$newest" ] || problem "$1 says \"$2\", the newest release is $newest"
}
version_of CMakeLists.txt "$(sed -n 's/^project(skiplock VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
version_of "include/skiplock.h SKL_VERSION" "$(sed -n 's/^#define SKL_VERSION "\(.*\)"$/\1/p' include/skiplock.h)"
version_of "include/skiplock.h SKL_VERSION_MAJOR.MINOR.PATCH" "$(awk '/^#define SKL_VERSION_(MAJOR|MINOR|PATCH) /{v = v sep $3; sep = "."} END{print v}' include/skiplock.h)"
for m in man/*.1; do
	version_of "$m" "$(sed -n 's/^\.TH .* "skiplock \([0-9.]*\)".*/\1/p' "$m")"
done
version_of clients/node/package.json "$(sed -n '0,/"version"/s/.*"version": "\(.*\)".*/\1/p' clients/node/package.json)"
version_of "clients/node/package-lock.json (the package)" \
	"$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["version"], d["packages"][""]["version"])' clients/node/package-lock.json | tr ' ' '\n' | sort -u | paste -sd' ')"
version_of clients/python/pyproject.toml "$(sed -n 's/^version = "\(.*\)"$/\1/p' clients/python/pyproject.toml)"
version_of "clients/python/src/skiplock/__init__.py __version__" \
	"$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' clients/python/src/skiplock/__init__.py)"
version_of clients/rust/Cargo.toml "$(sed -n '0,/^version/s/^version = "\(.*\)"$/\1/p' clients/rust/Cargo.toml)"
version_of "clients/rust/Cargo.lock (the skiplock package)" \
	"$(awk '/^name = "skiplock"$/{getline; gsub(/version = |"/, ""); print}' clients/rust/Cargo.lock)"

# --- a tagged release's list is never edited ---
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	for tag in $(git tag --list 'v[0-9]*.[0-9]*.[0-9]*'); do
		then=$(git show "$tag:sql/RELEASES" 2>/dev/null | grep -v '^#' | grep -v '^$') || continue
		now=$(grep -v '^#' sql/RELEASES | grep -v '^$' | head -n "$(wc -l <<<"$then")")
		[ "$then" = "$now" ] || problem "sql/RELEASES no longer starts with what tag $tag listed: a release is never edited"
	done
fi

if [ "$PROBLEMS" -gt 0 ]; then
	echo "release.check: $PROBLEMS problem(s)"
	exit 1
fi
echo "release.check: ok (newest release $newest, ${#released[@]} released steps)"
