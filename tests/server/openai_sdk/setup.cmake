# ctest fixture: npm-installs the official `openai` and `@anthropic-ai/sdk` SDKs (pinned in package.json) into SDK_DIR in
# the build tree. A missing node/npm or a failed install fails the fixture (and so the test that
# needs it): the SDK test never silently skips.
# Usage: cmake -DSDK_DIR=... -DPACKAGE_JSON=... -P setup.cmake
find_program(NODE node)
find_program(NPM npm)
if(NOT NODE OR NOT NPM)
  message(FATAL_ERROR "openai SDK test: node and npm are required (Node.js >= 18)")
endif()
file(MAKE_DIRECTORY ${SDK_DIR})
configure_file(${PACKAGE_JSON} ${SDK_DIR}/package.json COPYONLY)
set(stamp ${SDK_DIR}/node_modules/.linfer-package.json)
set(installed FALSE)
if(EXISTS ${stamp} AND EXISTS ${SDK_DIR}/node_modules/openai/package.json AND
   EXISTS ${SDK_DIR}/node_modules/@anthropic-ai/sdk/package.json)
  file(READ ${stamp} old)
  file(READ ${SDK_DIR}/package.json new)
  if(old STREQUAL new)
    set(installed TRUE)
  endif()
endif()
if(NOT installed)
  message(STATUS "openai SDK test: npm install in ${SDK_DIR}")
  execute_process(COMMAND ${NPM} install --no-audit --no-fund --no-package-lock
                  WORKING_DIRECTORY ${SDK_DIR} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT EXISTS ${SDK_DIR}/node_modules/openai/package.json OR
     NOT EXISTS ${SDK_DIR}/node_modules/@anthropic-ai/sdk/package.json)
    message(FATAL_ERROR "openai SDK test: npm install failed (${rc}); is the npm registry "
                        "reachable?")
  endif()
  configure_file(${SDK_DIR}/package.json ${stamp} COPYONLY)
endif()
message(STATUS "openai SDK test: ${SDK_DIR}/node_modules/openai")
