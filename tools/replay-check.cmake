# Runs the workload replay twice with the same flags and checks that the
# two runs report the same counters, and that they equal the expected
# counters checked in beside this script (tests/replay-expected/*.json), so
# a change of behaviour fails a test instead of silently changing a
# benchmark.
#
#   cmake -DREPLAY=... -DEXPECTED=FILE -DARGS="--workload;...;--tiers;mem" -P replay-check.cmake
#
# With -DPRINT=1 it prints the counters instead of checking them against
# EXPECTED (how the expected files were made).
cmake_minimum_required(VERSION 3.19)

set(COUNTERS requests steps manager_calls lookups hit_blocks stops_miss stops_pending
    blocks_stored rejected_stores blocks_evicted promotion_blocks cascade_blocks events)
set(FIELDS ${COUNTERS} wall_s ns_per_call)

function(run_replay out_var)
  execute_process(COMMAND ${REPLAY} ${ARGS}
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvtier-replay ${ARGS} failed (${rc}): ${err}")
  endif()
  # Exactly the fields kvtier-replay.c documents (COUNTERS, wall_s, ns_per_call), no more.
  string(JSON n LENGTH "${out}")
  list(LENGTH FIELDS expected_n)
  if(NOT n EQUAL expected_n)
    message(FATAL_ERROR "kvtier-replay printed ${n} fields, expected ${expected_n}: ${out}")
  endif()
  foreach(f IN LISTS FIELDS)
    string(JSON v ERROR_VARIABLE missing GET "${out}" ${f})
    if(missing)
      message(FATAL_ERROR "kvtier-replay output lacks \"${f}\": ${out}")
    endif()
  endforeach()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

separate_arguments(ARGS UNIX_COMMAND "${ARGS}")

run_replay(first)
run_replay(second)

set(counters_json "{")
set(sep "")
foreach(c IN LISTS COUNTERS)
  string(JSON a GET "${first}" ${c})
  string(JSON b GET "${second}" ${c})
  if(NOT a EQUAL b)
    message(FATAL_ERROR "two runs disagree on ${c}: ${a} and ${b}\n${first}\n${second}")
  endif()
  string(APPEND counters_json "${sep}\n  \"${c}\": ${a}")
  set(sep ",")
endforeach()
string(APPEND counters_json "\n}\n")

if(PRINT)
  message("${counters_json}")
  return()
endif()

file(READ "${EXPECTED}" expected)
set(diffs "")
foreach(c IN LISTS COUNTERS)
  string(JSON want GET "${expected}" ${c})
  string(JSON got GET "${first}" ${c})
  if(NOT want EQUAL got)
    string(APPEND diffs "\n  ${c}: expected ${want}, got ${got}")
  endif()
endforeach()
if(diffs)
  message(FATAL_ERROR "counters differ from ${EXPECTED}:${diffs}\n"
    "If the change of behaviour is intended, update the file with the counters above.")
endif()
message("counters match ${EXPECTED}")
