function(rinfer_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall --expt-relaxed-constexpr>)
endfunction()
