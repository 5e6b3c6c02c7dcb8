# gpipe_add_pipeline(): compile an ONNX training graph into stage executables
# as part of a CMake build.
#
#   gpipe_add_pipeline(<target>
#     MODEL <model.onnx>            # the ONNX training graph (with its loss)
#     [OUTPUT_DIR <dir>]            # default: ${CMAKE_CURRENT_BINARY_DIR}/<target>
#     [DEPENDS <files>...]          # other inputs, e.g. external data files
#     [OPTIONS <gpipe-compile flags>...])   # e.g. --batch-size 64 --optimizer adam
#
# Adds a target (built by default) that runs gpipe-compile whenever the model,
# DEPENDS, OPTIONS or gpipe-compile change (a stamp file records the last
# successful compile, so any --emit works). The target's GPIPE_PIPELINE_DIR
# property names the output directory (stage executables, weights,
# pipeline.json), to hand to gpipe-run (${GPIPE_RUN_EXECUTABLE}).
function(gpipe_add_pipeline target)
  cmake_parse_arguments(ARG "" "MODEL;OUTPUT_DIR" "OPTIONS;DEPENDS" ${ARGN})
  if(NOT ARG_MODEL)
    message(FATAL_ERROR "gpipe_add_pipeline(${target}): MODEL is required")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "gpipe_add_pipeline(${target}): unknown arguments "
                        "${ARG_UNPARSED_ARGUMENTS}")
  endif()
  get_filename_component(model "${ARG_MODEL}" ABSOLUTE)
  set(out "${ARG_OUTPUT_DIR}")
  if(NOT out)
    set(out "${CMAKE_CURRENT_BINARY_DIR}/${target}")
  endif()
  # The stamp's name changes with the flags, so new OPTIONS recompile under
  # every generator.
  string(MD5 flags_hash "${ARG_OPTIONS}")
  set(stamp "${CMAKE_CURRENT_BINARY_DIR}/${target}.${flags_hash}.gpipe-stamp")
  add_custom_command(
    OUTPUT "${stamp}"
    COMMAND "${GPIPE_COMPILE_EXECUTABLE}" "${model}" -o "${out}" ${ARG_OPTIONS}
    COMMAND "${CMAKE_COMMAND}" -E touch "${stamp}"
    DEPENDS "${model}" ${ARG_DEPENDS} "${GPIPE_COMPILE_EXECUTABLE}"
    COMMENT "gpipe-compile ${ARG_MODEL} -> ${out}"
    VERBATIM)
  add_custom_target(${target} ALL DEPENDS "${stamp}")
  set_target_properties(${target} PROPERTIES GPIPE_PIPELINE_DIR "${out}")
endfunction()
