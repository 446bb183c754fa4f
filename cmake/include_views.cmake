# Per-target include folders, so that the layers hold by the build and not by convention.
#
# Sources include each other by their path under src/ ("core/tensor.h", "ops/cpu/ops.h"). No
# target puts src/ itself on its include path: rinfer_include_view(target folder...) makes a
# folder of symbolic links under the build tree that holds only `folder` (a path under src/,
# e.g. "ops/cpu") and adds it to the target's PUBLIC include directories. A target therefore
# sees its own folders and, through the libraries it links, those of the layers below; an
# upward include ("engine/engine_core.h" from layer 1) is "No such file" at compile time
# (tests/layering checks it).
function(rinfer_include_view target)
  set(view ${PROJECT_BINARY_DIR}/include_views/${target})
  foreach(folder ${ARGN})
    set(link ${view}/${folder})
    get_filename_component(parent ${link} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    if(NOT IS_SYMLINK ${link})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${folder} ${link} SYMBOLIC)
    endif()
  endforeach()
  target_include_directories(${target} PUBLIC ${view})
endfunction()
