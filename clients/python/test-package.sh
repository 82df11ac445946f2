#!/usr/bin/env bash
# test-package.sh — the package as a team installs it (CTest:
# client.python.pack).
#
# scripts/dist python builds the sdist and the wheel offline.  Each is
# installed, as a new user would, into a fresh virtual environment outside
# the tree (--system-site-packages: psycopg is Debian's python3-psycopg)
# with `pip install --no-index --no-deps` (the sdist also
# --no-build-isolation: Debian's setuptools builds it).  Then, from an app
# directory outside the tree, with no C binary on PATH, on an empty
# database directly and another through PgBouncer (transaction mode):
#   * `python -m skiplock init --url …` installs the schema (one row per
#     step);
#   * app.py (tests/cli/first_job/app.py, what bench/first-job times)
#     enqueues a job in its own transaction and a worker completes it with
#     its result; no idle-in-transaction session is left;
# the package imported is the environment's, with the tree's
# sql/install.sql and py.typed; mypy --strict checks app.py against the
# installed package's annotations (the wheel's).
HERE=$(cd "$(dirname "$0")" && pwd)
set -- direct
. "${SKL_SOURCE_DIR:?run under CTest}/tests/cli/lib.sh"
. "$SKL_SOURCE_DIR/tests/cli/package_lib.sh"
PY=${SKL_PYTHON:-/usr/bin/python3}
APP=$TMP/app
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1
unset PYTHONPATH

if "$SKL_SOURCE_DIR/scripts/dist" --out "$TMP/dist" python >"$TMP/dist.log" 2>&1; then
	pass "scripts/dist python: $(xargs -n 1 basename <"$TMP/dist.log" | xargs)"
else
	fail "scripts/dist python: $(tail -n 20 "$TMP/dist.log")"
	finish
	exit
fi
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$HERE/pyproject.toml")

# in_app VENV [NAME=VALUE...] CMD...: CMD in the app's directory, with only
# the environment's bin and sh on PATH
only_on_path sh
in_app() { local venv=$1; shift; (cd "$APP" && env PATH="$venv/bin:$TMP/path" "$@"); }

# venv_with ARTEFACT [PIP-OPTION...]: a fresh environment holding ARTEFACT,
# and the app (app.py); sets VENV
venv_with() {
	local what=${1##*/}
	VENV=$TMP/venv-$what
	if fj_python_app "$VENV" "$APP" "$@" >"$TMP/pip.log" 2>&1; then
		pass "$what: $(echo pip install --no-index --no-deps "${@:2}") into a fresh environment"
	else
		fail "$what: installing: $(cat "$TMP/pip.log")"
	fi
}

# uses VENV LABEL N: the installed package's files, init and app.py in each
# mode (the Nth job of each database)
uses() {
	local venv=$1 label=$2 n=$3 pkg
	pkg=$(in_app "$venv" python -c 'import os, skiplock; print(os.path.dirname(skiplock.__file__))')
	case $pkg in
	"$venv"/lib/python3*/site-packages/skiplock) pass "$label: imports skiplock from the environment" ;;
	*) fail "$label: imports skiplock from '$pkg', not from $venv" ;;
	esac
	[ -f "$pkg/py.typed" ] && pass "$label: py.typed installed" || fail "$label: no py.typed in $pkg"
	installer_steps "$pkg/install.sql"
	local mode
	for mode in direct pooled; do
		target "$mode"
		check_init "$label: python -m skiplock init [$mode]" "$TMP/init.out" \
			in_app "$venv" python -m skiplock init --url "$url"
		if in_app "$venv" DATABASE_URL="$url" python app.py >"$TMP/app.out" 2>&1; then
			pass "$label: app.py [$mode]: $(tail -n 1 "$TMP/app.out")"
		else
			fail "$label: app.py [$mode]: $(tail -n 20 "$TMP/app.out")"
		fi
		check_eq "$label: app.py [$mode]: the job completed with its result" \
			"$(qdb "$db" "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'greet' AND state = 'completed'
				AND result = '{\"greeted\": \"a new user\"}'")" "$n"
		no_idle_in_tx "$label [$mode]"
	done
}

venv_with "$TMP/dist/skiplock-$version-py3-none-any.whl"
uses "$VENV" wheel 1
if (cd "$APP" && "$PY" -m mypy --strict --no-incremental --python-executable "$VENV/bin/python" app.py) \
	>"$TMP/mypy.out" 2>&1; then
	pass "mypy --strict: app.py checks against the installed package's annotations"
else
	fail "mypy: $(head -n 20 "$TMP/mypy.out")"
fi

venv_with "$TMP/dist/skiplock-$version.tar.gz" --no-build-isolation
uses "$VENV" sdist 2
MODE="direct and pooled"
finish
