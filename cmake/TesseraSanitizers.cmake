# Sanitizer and fuzzing builds, each in a build folder of its own.
# TESSERA_SANITIZE: every C/C++ target with AddressSanitizer + UndefinedBehaviorSanitizer (any UB
# report aborts the program, so a test cannot pass over one). gcc and clang both support it:
#   cmake -S . -B build-asan -DTESSERA_SANITIZE=ON -DTESSERA_CUDA=OFF   (the default compiler, gcc)
# TESSERA_FUZZ: coverage instrumentation for libFuzzer and the harnesses of test/fuzz; needs clang
# (Debian's clang package); scripts/sanitize.sh configures build-fuzz/ with both options.
option(TESSERA_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer (gcc or clang)" OFF)
option(TESSERA_FUZZ "Build the libFuzzer harnesses of test/fuzz (needs clang)" OFF)
if(TESSERA_SANITIZE)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "TESSERA_SANITIZE needs gcc or clang (got ${CMAKE_CXX_COMPILER_ID})")
  endif()
  set(TESSERA_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${TESSERA_SANITIZE_FLAGS}>")
  add_link_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
endif()
if(TESSERA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TESSERA_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>")
endif()
