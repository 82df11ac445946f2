#!/usr/bin/env bash
# tests/docs/check_license.sh SOURCE_DIR
#
# The license is stated once, in LICENSE (MIT, as examples/node/package.json
# says), and referenced everywhere a user or a packager looks: the README,
# skiplock.pc, every man page's COPYRIGHT section, the opening comment of
# every public header (an SPDX line), the install rules and the Debian
# package's metadata.  Each problem is one line saying what is missing where.
set -u
SRC=${1:?usage: check_license.sh SOURCE_DIR}
PROBLEMS=0
CHECKED=0
problem() { PROBLEMS=$((PROBLEMS + 1)); echo "MISSING: $*"; }
check() { # description command...
	local what=$1
	shift
	CHECKED=$((CHECKED + 1))
	"$@" >/dev/null 2>&1 || problem "$what"
}

check "LICENSE does not exist" test -f "$SRC/LICENSE"
check "LICENSE is not the MIT License" grep -qx 'MIT License' "$SRC/LICENSE"
check "LICENSE has no copyright line for the skiplock authors" \
	grep -qE '^Copyright \(c\) [0-9]{4} the skiplock authors$' "$SRC/LICENSE"
check "LICENSE lacks the MIT permission notice" \
	grep -q 'Permission is hereby granted, free of charge' "$SRC/LICENSE"
check "examples/node/package.json does not say MIT like LICENSE" \
	grep -q '"license": "MIT"' "$SRC/examples/node/package.json"
check "README.md does not name the license and the LICENSE file" \
	grep -qE 'MIT License.*LICENSE|LICENSE.*MIT' "$SRC/README.md"
check "cmake/skiplock.pc.in has no 'License: MIT' field" grep -qx 'License: MIT' "$SRC/cmake/skiplock.pc.in"
check "CMakeLists.txt does not install LICENSE" grep -qE 'install\(FILES LICENSE ' "$SRC/CMakeLists.txt"
check "CMakeLists.txt gives CPack no license (CPACK_RESOURCE_FILE_LICENSE)" \
	grep -q 'CPACK_RESOURCE_FILE_LICENSE' "$SRC/CMakeLists.txt"

for page in "$SRC"/man/*.1; do
	CHECKED=$((CHECKED + 1))
	sect=$(sed -n '/^\.SH COPYRIGHT/,/^\.SH/p' "$page")
	[[ $sect == *"MIT License"* && $sect == *LICENSE* && $sect == *"the skiplock authors"* ]] ||
		problem "man/${page##*/}: no COPYRIGHT section naming the MIT License, the authors and LICENSE"
done
for h in "$SRC"/include/skiplock.h "$SRC"/include/skiplock/*.h; do
	CHECKED=$((CHECKED + 1))
	# the opening comment: from the first line to the first */
	opening=$(sed -n '1,/\*\//p' "$h")
	[[ $(head -c 2 "$h") == "/*" && $opening == *"SPDX-License-Identifier: MIT"* ]] ||
		problem "${h#"$SRC/"}: no 'SPDX-License-Identifier: MIT' line in its opening comment"
done

echo "license: $((CHECKED - PROBLEMS)) of $CHECKED checks passed"
[ "$PROBLEMS" = 0 ]
