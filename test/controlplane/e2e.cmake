# tessera_e2e_test: a GoogleTest binary that runs against a real Kubernetes control plane.
#
#   tessera_e2e_test(NAME name SRCS a_e2e_test.cc ... DEPS lib ...
#                    [WITH_SCHEDULER] [WITH_CONTROLLER_MANAGER] [WITH_SERVICE_ACCOUNTS]
#                    [WITH_WORKLOADS] [WITH_JOB_WORKLOADS] [NODES n]
#                    [NODE_ARGS --node NAME --gpus FILE --label K=V ...] [TIMEOUT s] [ARGS ...])
#
# The binary's main (controlplane_main.cc) starts one control plane before the first test and
# stops it after the last; tests reach it with tessera::e2e::ControlPlane::Shared() (see
# test/controlplane/controlplane.h). WITH_SCHEDULER adds the stock kube-scheduler,
# WITH_CONTROLLER_MANAGER kube-controller-manager, WITH_SERVICE_ACCOUNTS pods as in-cluster API
# clients (ServiceAccount tokens; implies the controller manager), WITH_WORKLOADS the Workload and
# PodGroup APIs (scheduling.k8s.io/v1beta1, gate GenericWorkload), WITH_JOB_WORKLOADS those and the
# Job controller's own Workloads and PodGroups (gate WorkloadWithJob; implies the controller
# manager). NODES n adds n real nodes (kubelet + containerd; node-1 ... node-n), NODE_ARGS nodes
# described with cluster.sh's options (both may be given; see test/controlplane/README.md). The
# test gets the CTest label `e2e`, a
# default timeout of 600 s, and the resource lock `tessera_controlplane`, so that e2e binaries
# run one at a time on the 2-core machines while unit tests run beside them. The control plane
# binaries come from test/controlplane/build.sh (`make test` runs it).
#
# Included from cmake/tessera.cmake so that directories configured before test/ can use it; the
# targets it links are defined in test/controlplane/CMakeLists.txt.
include_guard(GLOBAL)

function(tessera_e2e_test)
  if(NOT TESSERA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "WITH_SCHEDULER;WITH_CONTROLLER_MANAGER;WITH_SERVICE_ACCOUNTS;WITH_WORKLOADS;WITH_JOB_WORKLOADS" "NAME;TIMEOUT;NODES"
                        "SRCS;DEPS;ARGS;NODE_ARGS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} tessera_controlplane_main
                        tessera_controlplane_testenv GTest::gtest GTest::gmock)
  target_compile_definitions(${ARG_NAME} PRIVATE
      TESSERA_DATA_DIR="${TESSERA_DATA_DIR}"
      TESSERA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  _tessera_common(${ARG_NAME})
  set(cp_args)
  if(ARG_WITH_SCHEDULER)
    list(APPEND cp_args --with-scheduler)
  endif()
  if(ARG_WITH_CONTROLLER_MANAGER)
    list(APPEND cp_args --with-controller-manager)
  endif()
  if(ARG_WITH_SERVICE_ACCOUNTS)
    list(APPEND cp_args --with-service-accounts)
  endif()
  if(ARG_WITH_WORKLOADS)
    list(APPEND cp_args --with-workloads)
  endif()
  if(ARG_WITH_JOB_WORKLOADS)
    list(APPEND cp_args --with-job-workloads)
  endif()
  if(ARG_NODES)
    list(APPEND cp_args --nodes ${ARG_NODES})
  endif()
  list(APPEND cp_args ${ARG_NODE_ARGS})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME} ${ARG_ARGS} ${cp_args})
  set_tests_properties(${ARG_NAME} PROPERTIES LABELS e2e TIMEOUT ${ARG_TIMEOUT}
                       RESOURCE_LOCK tessera_controlplane)
endfunction()
