# Checks `kvtier-replay --max-calls C`: the capped run stops starting
# batches once C manager calls were made, so it makes at least C calls,
# fewer than the whole replay, over fewer requests, in whole batches.
#
#   cmake -DREPLAY=... -DARGS="--workload;...;--batch;16" -DBATCH=16 -DCAP=C -P replay-cap-check.cmake
cmake_minimum_required(VERSION 3.19)

separate_arguments(ARGS UNIX_COMMAND "${ARGS}")

function(run out_var)
  execute_process(COMMAND ${REPLAY} ${ARGS} ${ARGN}
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvtier-replay ${ARGS} ${ARGN} failed (${rc}): ${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

run(full)
run(capped --max-calls ${CAP})
foreach(f manager_calls requests steps)
  string(JSON full_${f} GET "${full}" ${f})
  string(JSON capped_${f} GET "${capped}" ${f})
endforeach()
if(capped_manager_calls LESS CAP)
  message(FATAL_ERROR "capped at ${CAP}, the run made only ${capped_manager_calls} calls: ${capped}")
endif()
if(NOT capped_manager_calls LESS full_manager_calls OR NOT capped_requests LESS full_requests)
  message(FATAL_ERROR "the capped run did not stop early: ${capped} (whole run: ${full})")
endif()
math(EXPR whole "${capped_steps} * ${BATCH}")
if(NOT capped_requests EQUAL whole)
  message(FATAL_ERROR "the capped run ended within a batch: ${capped}")
endif()
