# The module layering of DESIGN.md ("Dependency rule"), enforced when the build is configured:
# a target or a source file that reaches across a layer makes `cmake` fail with the offending
# link or #include named.
#
#   core      depends on nothing of ours but common
#   records   core, common
#   sim       core, records, common (never k8s, agent, shim or cli)
#   k8s       core, records, common (never sim, agent, shim or cli)
#   agent     may use k8s's API client, never its scheduler (nor sim or cli); and the shim's
#             agent side (segments, compute controller, contract)
#   cli       anything
#
# Inside the agent (src/agent/README.md "Parts"), each part uses only these others:
#   discovery  none (the GPU backends)         mps      none (NVIDIA's MPS control daemon)
#   procs      none (host and GPU processes)   edits    mps (what a container gets, both modes)
#   publish    discovery                       metrics  pods, edits
#   health     discovery (GPU faults: Events, the fault policy)
#   pods       discovery, mps, edits, procs (classic mode's per-pod state)
#   nri        pods, discovery, edits (classic delivery: the NRI plugin)
#   dra        discovery, edits, procs (DRA mode: never the NRI plugin, nor classic mode's pods)
#   doctor     discovery, pods, edits (`tessera doctor node`; k8s's findings, no API server)
# and only publish, health, dra and the agent's own root (node_agent, and agent.h, the composition
# root) talk to the API server (k8s/client). The composition root (tessera_agent_root) is the one
# target that sees every part; nothing of ours but the CLI links it.
#
# Two checks: the transitive link closure of every tessera_* library target (after all targets
# are defined), and the quoted #includes of every source file under src/ (a header-only reach,
# which no link would show).

# Our libraries in the link closure of `target` (tessera_* names, generator expressions peeled).
function(_tessera_link_closure target out)
  set(seen "")
  set(todo ${target})
  while(todo)
    list(POP_FRONT todo t)
    if(NOT TARGET ${t} OR t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${t})
    get_target_property(type ${t} TYPE)
    set(links "")
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(direct ${t} LINK_LIBRARIES)
      if(direct)
        list(APPEND links ${direct})
      endif()
    endif()
    get_target_property(iface ${t} INTERFACE_LINK_LIBRARIES)
    if(iface)
      list(APPEND links ${iface})
    endif()
    foreach(l IN LISTS links)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" l "${l}")
      if(l MATCHES "^tessera_")
        list(APPEND todo ${l})
      endif()
    endforeach()
  endwhile()
  list(REMOVE_ITEM seen ${target})
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# Fails if any of our libraries in the closure of a target matching `pattern` matches `forbidden`
# (a regex) and not `except` (a regex; "" for none).
function(_tessera_forbid_links pattern forbidden except why)
  get_property(targets GLOBAL PROPERTY TESSERA_LIBRARIES)
  foreach(t IN LISTS targets)
    if(NOT t MATCHES "${pattern}")
      continue()
    endif()
    _tessera_link_closure(${t} closure)
    foreach(dep IN LISTS closure)
      if(dep MATCHES "${forbidden}" AND (except STREQUAL "" OR NOT dep MATCHES "${except}"))
        message(FATAL_ERROR "layering: ${t} links ${dep}, but ${why} (DESIGN.md, cmake/layering.cmake)")
      endif()
    endforeach()
  endforeach()
endfunction()

# Fails if a file under src/<dir> includes "<x>/..." for a top-level source folder x that is
# not allowed to it.
function(_tessera_forbid_includes dir allowed why)
  file(GLOB_RECURSE files "${PROJECT_SOURCE_DIR}/src/${dir}/*.h" "${PROJECT_SOURCE_DIR}/src/${dir}/*.cc")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" lines REGEX "^#include \"[a-z_]+/")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^#include \"([a-z_]+)/.*$" "\\1" top "${line}")
      if(NOT top IN_LIST allowed AND EXISTS "${PROJECT_SOURCE_DIR}/src/${top}")
        file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${f}")
        message(FATAL_ERROR "layering: ${rel}: ${line}, but ${why} (DESIGN.md, cmake/layering.cmake)")
      endif()
    endforeach()
  endforeach()
endfunction()

# Fails if a file under src/agent/<part> includes "agent/<x>/..." for a part x not in `allowed`
# (the part itself is always allowed), or includes "k8s/..." when `k8s` is false.
function(_tessera_forbid_agent_includes part allowed k8s why)
  file(GLOB_RECURSE files "${PROJECT_SOURCE_DIR}/src/agent/${part}/*.h"
                          "${PROJECT_SOURCE_DIR}/src/agent/${part}/*.cc")
  foreach(f IN LISTS files)
    file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${f}")
    file(STRINGS "${f}" lines REGEX "^#include \"(agent/[a-z_]+/|k8s/)")
    foreach(line IN LISTS lines)
      if(line MATCHES "^#include \"agent/([a-z_]+)/")
        if(NOT CMAKE_MATCH_1 STREQUAL part AND NOT CMAKE_MATCH_1 IN_LIST allowed)
          message(FATAL_ERROR "layering: ${rel}: ${line}, but ${why} (src/agent/README.md, cmake/layering.cmake)")
        endif()
      elseif(NOT k8s)
        message(FATAL_ERROR "layering: ${rel}: ${line}, but the agent's ${part} does not talk to the API server (src/agent/README.md, cmake/layering.cmake)")
      endif()
    endforeach()
  endforeach()
endfunction()

# The agent's inner rules (above), for includes and links.
function(_tessera_check_agent_parts)
  _tessera_forbid_agent_includes(discovery "" OFF "discovery uses no other part of the agent")
  _tessera_forbid_agent_includes(mps "" OFF "the MPS control uses no other part of the agent")
  _tessera_forbid_agent_includes(procs "" OFF "the process views use no other part of the agent")
  _tessera_forbid_agent_includes(health "discovery" ON "GPU fault handling uses only discovery")
  _tessera_forbid_agent_includes(doctor "discovery;pods;edits" ON
                                 "the node's preflight uses only discovery, pods and the edits")
  _tessera_forbid_agent_includes(edits "mps" OFF
                                 "what a container gets depends only on the grant and the node")
  _tessera_forbid_agent_includes(publish "discovery" ON "publishing uses only discovery")
  _tessera_forbid_agent_includes(metrics "pods;edits" ON
                                 "metrics read only the pod manager (and the API client's request counts)")
  _tessera_forbid_agent_includes(pods "discovery;mps;edits;procs" OFF
                                 "classic mode's pod state never reaches a delivery mechanism")
  _tessera_forbid_agent_includes(nri "pods;discovery;edits" OFF
                                 "the NRI plugin uses only the pod manager and the edits")
  _tessera_forbid_agent_includes(dra "discovery;edits;procs" ON
                                 "the DRA driver never includes the NRI plugin nor classic mode's pods")
  _tessera_forbid_links("^tessera_agent_dra" "^tessera_agent_(nri|pods|publish|metrics)$" ""
                        "the DRA driver never uses the NRI plugin nor classic mode's pods")
  _tessera_forbid_links("^tessera_agent_edits$" "^tessera_agent_" "^tessera_agent_mps$"
                        "what a container gets depends only on the grant and the node")
  _tessera_forbid_links("^tessera_agent_(discovery|mps|procs)$" "^tessera_agent_" ""
                        "discovery, the MPS control and the process views use no other part of the agent")
  _tessera_forbid_links("^tessera_(agent|k8s|records|core|sim|shim)" "^tessera_agent_root$" ""
                        "the agent's composition root is used only by the CLI")
endfunction()

function(tessera_check_layering)
  _tessera_forbid_links("^tessera_core$" "^tessera_" "^tessera_common$"
                        "core depends on nothing of ours but common")
  _tessera_forbid_links("^tessera_records$" "^tessera_" "^tessera_(core|common)$"
                        "records depends only on core")
  _tessera_forbid_links("^tessera_sim" "^tessera_(k8s|agent|shim|cli)" ""
                        "the simulator depends only on core and records")
  _tessera_forbid_links("^tessera_k8s" "^tessera_(sim|agent|shim|cli)" ""
                        "k8s depends only on core and records")
  _tessera_forbid_links("^tessera_agent" "^tessera_(k8s_scheduler|sim|cli)" ""
                        "the agent uses k8s's API client, never its scheduler")
  _tessera_forbid_links("^tessera_k8s_(cluster_state|snapshot|status|explain|doctor|findings|manifests)$"
                        "^tessera_k8s_scheduler$" ""
                        "the operator's tools read the cluster as the scheduler does (tessera_k8s_cluster_state) without linking the scheduler")
  _tessera_forbid_includes(core "core;common" "core depends on nothing of ours but common")
  _tessera_forbid_includes(records "records;core;common" "records depends only on core")
  _tessera_forbid_includes(sim "sim;records;core;common"
                           "the simulator depends only on core and records")
  _tessera_forbid_includes(k8s "k8s;records;core;common" "k8s depends only on core and records")
  if(EXISTS "${PROJECT_SOURCE_DIR}/src/agent")
    _tessera_forbid_includes(agent "agent;shim;k8s;records;core;common"
                             "the agent uses k8s's API client, never its scheduler")
    file(GLOB_RECURSE agent_files "${PROJECT_SOURCE_DIR}/src/agent/*.h" "${PROJECT_SOURCE_DIR}/src/agent/*.cc")
    foreach(f IN LISTS agent_files)
      file(STRINGS "${f}" lines REGEX "^#include \"k8s/scheduler/")
      if(lines)
        file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${f}")
        message(FATAL_ERROR "layering: ${rel} includes the scheduler, but the agent uses k8s's API client, never its scheduler (DESIGN.md, cmake/layering.cmake)")
      endif()
    endforeach()
    _tessera_check_agent_parts()
  endif()
endfunction()
