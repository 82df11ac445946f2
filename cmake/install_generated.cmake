# Installs the files whose text names installed paths (skiplock.pc and the
# systemd unit), generated at install time so that `cmake --install
# --prefix P` (and `make install PREFIX=P`) writes P into them, not the
# prefix the build was configured with.  Run by install(CODE) with
# SKL_SOURCE_DIR, SKL_BINARY_DIR, SKL_VERSION, SKL_LIBDIR, SKL_INCLUDEDIR,
# SKL_BINDIR (relative) set.
set(prefix "${CMAKE_INSTALL_PREFIX}")
set(CMAKE_INSTALL_PREFIX "${prefix}")
set(CMAKE_INSTALL_LIBDIR "${SKL_LIBDIR}")
set(CMAKE_INSTALL_INCLUDEDIR "${SKL_INCLUDEDIR}")
set(PROJECT_VERSION "${SKL_VERSION}")
set(SKL_BINDIR "${prefix}/${SKL_BINDIR_REL}")
set(out "${SKL_BINARY_DIR}/install-generated")
configure_file("${SKL_SOURCE_DIR}/cmake/skiplock.pc.in" "${out}/skiplock.pc" @ONLY)
configure_file("${SKL_SOURCE_DIR}/dist/systemd/skiplock-worker@.service.in"
               "${out}/skiplock-worker@.service" @ONLY)
file(INSTALL DESTINATION "${prefix}/${SKL_LIBDIR}/pkgconfig" TYPE FILE
     FILES "${out}/skiplock.pc")
file(INSTALL DESTINATION "${prefix}/lib/systemd/system" TYPE FILE
     FILES "${out}/skiplock-worker@.service")
