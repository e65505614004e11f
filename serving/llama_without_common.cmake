# CMAKE_PROJECT_INCLUDE of llama-cpp-python's build (the Makefile's install rule): included after every project()
# call, and in llama.cpp's own directory it turns llama.cpp's common library off. llama-cpp-python forces
# LLAMA_BUILD_COMMON on in the cache; a normal variable set here shadows the cache entry and llama.cpp's option()
# leaves it be (policy CMP0077). The Python package never loads libllama-common.so (the wheel put it outside
# llama_cpp/lib), and it was a third of a host build's compile time.
if (PROJECT_NAME STREQUAL "llama.cpp")
    set(LLAMA_BUILD_COMMON OFF)
endif()
