# ctest fixture: npm-installs the reference tokenizer into ORACLE_DIR (in the build tree) and
# runs oracle.js to write ORACLE_JSON. Fails loudly when node or npm is missing.
# Usage: cmake -DORACLE_DIR=... -DORACLE_JSON=... -DSCRIPT=.../oracle.js -DNEOX_JSON=... -P setup.cmake
find_program(NODE node)
find_program(NPM npm)
if(NOT NODE OR NOT NPM)
  message(FATAL_ERROR "tokenizer oracle: node and npm are required (install Node.js >= 18); "
                      "the oracle comparison tests cannot run without them")
endif()

set(stamp ${ORACLE_DIR}/node_modules/.linfer-package.json)
set(installed FALSE)
if(EXISTS ${stamp})
  file(READ ${stamp} old)
  file(READ ${ORACLE_DIR}/package.json new)
  if(old STREQUAL new)
    set(installed TRUE)
  endif()
endif()
if(NOT installed)
  message(STATUS "tokenizer oracle: npm install in ${ORACLE_DIR}")
  execute_process(COMMAND ${NPM} install --no-audit --no-fund --no-package-lock
                  WORKING_DIRECTORY ${ORACLE_DIR} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tokenizer oracle: npm install failed (${rc}); is the npm registry "
                        "reachable?")
  endif()
  configure_file(${ORACLE_DIR}/package.json ${stamp} COPYONLY)
endif()

get_filename_component(script_dir ${SCRIPT} DIRECTORY)
if(NOT EXISTS ${ORACLE_JSON} OR ${SCRIPT} IS_NEWER_THAN ${ORACLE_JSON}
   OR ${script_dir}/corpus.js IS_NEWER_THAN ${ORACLE_JSON} OR ${stamp} IS_NEWER_THAN ${ORACLE_JSON})
  execute_process(COMMAND ${NODE} ${SCRIPT} ${ORACLE_JSON}.tmp ${ORACLE_DIR}/node_modules
                          ${NEOX_JSON}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tokenizer oracle: ${SCRIPT} failed (${rc})")
  endif()
  file(RENAME ${ORACLE_JSON}.tmp ${ORACLE_JSON})
endif()
message(STATUS "tokenizer oracle: expected outputs in ${ORACLE_JSON}")
