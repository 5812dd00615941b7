# Sanitizer and fuzzing builds (scripts/sanitize.sh configures a separate build-asan/ with both).
# TESSERA_SANITIZE: every target with AddressSanitizer + UndefinedBehaviorSanitizer (any UB report
# aborts the program, so a test cannot pass over one). TESSERA_FUZZ: coverage instrumentation for
# libFuzzer and the harnesses of test/fuzz; needs clang (Debian's clang package).
option(TESSERA_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(TESSERA_FUZZ "Build the libFuzzer harnesses of test/fuzz (needs clang)" OFF)
if(TESSERA_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
endif()
if(TESSERA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TESSERA_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
