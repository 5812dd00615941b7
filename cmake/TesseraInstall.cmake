# Install rules beyond the executables (src/CMakeLists.txt installs those to bin/): share/ as
# <prefix>/share/tessera (= TESSERA_HOME), the sbatch templates, and the environment modulefiles.
include(GNUInstallDirs) # (after project(): the top-level CMakeLists includes this file last)
set(TESSERA_MODULE_DEPENDS "" CACHE STRING
    "Modules the tessera modulefile loads first (depends-on), e.g. \"openmpi/4.1 cuda/12.4\"; empty: none")
set(TESSERA_MODULEFILES_DIR "share/modulefiles" CACHE STRING
    "Where the modulefiles go, relative to the install prefix (`module use <prefix>/<this>`)")

# TESSERA_HOME: example configs, tokenizers, sample data; the job templates beside them.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/share/ DESTINATION share/tessera)
install(FILES ${CMAKE_SOURCE_DIR}/jobs/tessera-job-lib.sh ${CMAKE_SOURCE_DIR}/jobs/tessera-node-layout.sh
        DESTINATION share/tessera/jobs)
file(GLOB TESSERA_JOB_TEMPLATES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/jobs/*.sbatch)
install(PROGRAMS ${TESSERA_JOB_TEMPLATES} DESTINATION share/tessera/jobs)

# The modulefiles are configured at install time, so `cmake --install build --prefix X` writes X
# into them. <version> is the Tcl file (Environment Modules and Lmod), <version>.lua the Lmod one;
# .version makes <version> the default so Environment Modules never picks the .lua file.
install(CODE "
  set(TESSERA_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(TESSERA_VERSION \"${PROJECT_VERSION}\")
  set(TESSERA_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(TESSERA_DEPENDS_TCL \"\")
  set(TESSERA_DEPENDS_LUA \"\")
  foreach(_m ${TESSERA_MODULE_DEPENDS})
    string(APPEND TESSERA_DEPENDS_TCL \"depends-on    \${_m}\\n\")
    string(APPEND TESSERA_DEPENDS_LUA \"depends_on(\\\"\${_m}\\\")\\n\")
  endforeach()
  set(_dir \"\${CMAKE_INSTALL_PREFIX}/${TESSERA_MODULEFILES_DIR}/tessera\")
  message(STATUS \"Installing: \${_dir}/${PROJECT_VERSION} (+ .lua, .version)\")
  configure_file(\"${CMAKE_SOURCE_DIR}/modules/tessera.tcl.in\" \"\${_dir}/${PROJECT_VERSION}\" @ONLY)
  configure_file(\"${CMAKE_SOURCE_DIR}/modules/tessera.lua.in\" \"\${_dir}/${PROJECT_VERSION}.lua\" @ONLY)
  file(WRITE \"\${_dir}/.version\" \"#%Module1.0\\nset ModulesVersion ${PROJECT_VERSION}\\n\")
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${_dir}/${PROJECT_VERSION}\" \"\${_dir}/${PROJECT_VERSION}.lua\" \"\${_dir}/.version\")
")

# The library as a CMake package: find_package(Tessera) gives Tessera::tessera (every package's
# static library and its headers under <prefix>/include/tessera), so a program outside this tree
# can register a loss (examples/custom_loss) and run tessera-train's command line.
get_property(TESSERA_PACKAGE_TARGETS GLOBAL PROPERTY TESSERA_PACKAGE_TARGETS)
set(TESSERA_EXPORTED_TARGETS ${TESSERA_PACKAGE_TARGETS} tessera)
if(TESSERA_HAVE_CUDA)
  list(APPEND TESSERA_EXPORTED_TARGETS tessera_kernels)
  install(FILES ${CMAKE_SOURCE_DIR}/kernels/kernels.h ${CMAKE_SOURCE_DIR}/kernels/flash_attention.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kernels)
endif()
install(TARGETS ${TESSERA_EXPORTED_TARGETS} EXPORT TesseraTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}/tessera)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/src/tessera/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera
        FILES_MATCHING PATTERN "*.h")
install(EXPORT TesseraTargets NAMESPACE Tessera:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
include(CMakePackageConfigHelpers)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/TesseraConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/TesseraConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/TesseraConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/TesseraConfig.cmake ${CMAKE_BINARY_DIR}/TesseraConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
