# Helper functions that keep every target small and its dependencies explicit.
#
#   tessera_cc_library(NAME name SRCS a.cc ... HDRS a.h ... PUBLIC_DEPS lib ... DEPS lib ...)
#     PUBLIC_DEPS: what the library's headers expose (users get their include paths);
#     DEPS: what only its .cc files use (linked, but private: users cannot include them).
#   tessera_cc_test(NAME name SRCS a_test.cc ... DEPS lib ... [LABELS unit|e2e] [TIMEOUT s])
#   tessera_cc_benchmark(NAME name SRCS a_bench.cc ... DEPS lib ...)

set(TESSERA_SANITIZE "" CACHE STRING "Comma-separated sanitizers (address,undefined)")
option(TESSERA_ASSERTS "Keep debug assertions in optimised builds" OFF)

set(TESSERA_WARNINGS -Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
    -Wno-missing-field-initializers -Wno-maybe-uninitialized)

function(_tessera_common target)
  target_compile_options(${target} PRIVATE ${TESSERA_WARNINGS})
  if(TESSERA_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${TESSERA_SANITIZE} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${TESSERA_SANITIZE})
  endif()
  if(TESSERA_ASSERTS)
    target_compile_options(${target} PRIVATE -UNDEBUG)
  endif()
endfunction()

function(tessera_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;HDRS;DEPS;PUBLIC_DEPS" ${ARGN})
  set_property(GLOBAL APPEND PROPERTY TESSERA_LIBRARIES ${ARG_NAME})
  if(ARG_SRCS)
    add_library(${ARG_NAME} STATIC ${ARG_SRCS} ${ARG_HDRS})
    target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${ARG_NAME} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_DEPS})
    _tessera_common(${ARG_NAME})
  else()
    add_library(${ARG_NAME} INTERFACE ${ARG_HDRS})
    target_include_directories(${ARG_NAME} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${ARG_NAME} INTERFACE ${ARG_DEPS} ${ARG_PUBLIC_DEPS})
  endif()
endfunction()

function(tessera_cc_test)
  if(NOT TESSERA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${ARG_NAME} PRIVATE
      TESSERA_DATA_DIR="${TESSERA_DATA_DIR}"
      TESSERA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  _tessera_common(${ARG_NAME})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # Under a sanitizer (Debug, -O0 for ASan) the same work takes several times longer: the
  # exhaustive searches of core_plan_test ran past 300 s under ASan on a loaded machine while
  # taking 30 s in the dev build. The limits stay what they are elsewhere.
  if(TESSERA_SANITIZE)
    math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * 4")
  endif()
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME} ${ARG_ARGS})
  set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
  # `make tsan` builds only these (target tsan_tests), not the whole tree.
  if("tsan" IN_LIST ARG_LABELS)
    if(NOT TARGET tsan_tests)
      add_custom_target(tsan_tests)
    endif()
    add_dependencies(tsan_tests ${ARG_NAME})
  endif()
endfunction()

function(tessera_cc_benchmark)
  if(NOT TESSERA_BUILD_BENCHMARKS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} benchmark::benchmark)
  target_compile_definitions(${ARG_NAME} PRIVATE TESSERA_DATA_DIR="${TESSERA_DATA_DIR}")
  _tessera_common(${ARG_NAME})
endfunction()

include(${CMAKE_CURRENT_LIST_DIR}/layering.cmake)

# tessera_e2e_test(NAME .. SRCS .. DEPS .. [WITH_SCHEDULER] [WITH_CONTROLLER_MANAGER]): a test
# against a real Kubernetes control plane; see test/controlplane/e2e.cmake and its README.md.
include(${CMAKE_CURRENT_LIST_DIR}/../test/controlplane/e2e.cmake OPTIONAL)
