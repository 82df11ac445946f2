#!/usr/bin/env bash
# Conformance adapter: an skl_worker with a C handler per conf.* kind
# (../c_native_worker.c, built by tests/CMakeLists.txt; CTest passes its
# path in SKL_CONFORMANCE_C_NATIVE).  See ../README.md.
set -eu
: "${DATABASE_URL:?}" "${CONFORMANCE_OWNER:?}"
exec "${SKL_CONFORMANCE_C_NATIVE:-${SKL_BUILD_DIR:?}/tests/conformance_c_native}"
