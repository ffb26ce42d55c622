# distlab_library(NAME SOURCES file... [PUBLIC target...] [PRIVATE target...])
#   One of the kit's own libraries: distlab_<NAME> (static, C++20, built with distlab_options),
#   its alias distlab::<NAME>, and <folder>/include as its public include directory.
function(distlab_library name)
  cmake_parse_arguments(L "" "" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  add_library(distlab_${name} STATIC ${L_SOURCES})
  add_library(distlab::${name} ALIAS distlab_${name})
  target_include_directories(distlab_${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>)
  target_compile_features(distlab_${name} PUBLIC cxx_std_20)
  target_link_libraries(distlab_${name} PUBLIC ${L_PUBLIC} PRIVATE ${L_PRIVATE} distlab_options)
endfunction()
