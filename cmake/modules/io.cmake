# Migration engine extras (tests/io): fake vendor libraries and the cuFile layout check.
#
# Fakes: libtio_fake_cudart.so and libtio_fake_cufile.so, built from tests/io/fakes/*.c,
# implement the cudart/cuFile entry points our shims resolve over host memory. Tests that
# exercise the cuda/cufile backends get TIO_CUDART_LIB / TIO_CUFILE_LIB pointing at them.
#
# cuFile layout: tests/io/test_cufile_layout.c compares our declarations with the real
# cufile.h. Set TIO_CUFILE_INCLUDE_DIR (CMake cache variable or environment variable) to the
# directory holding cufile.h; if unset, it is looked up in the Python environment's
# nvidia-cufile wheel (site-packages/nvidia/cu13/include or nvidia/cufile/include). cufile.h
# includes cuda.h, found via CUDAToolkit_INCLUDE_DIRS or /usr/local/cuda/include. The test
# exits 77 (skip) when either header is missing.
# The GPU twin (bench/bench_gpu_twin.c, bench/gpu_twin_run.c) drives the fake cudart through tests/io/fake_cuda.h.
# bench/bench_bounce.c too (the cufile backend's bounce path on the timed fake).
if(TARGET bench_bounce)
    target_include_directories(bench_bounce PRIVATE ${PROJECT_SOURCE_DIR}/tests)
endif()
if(TARGET bench_gpu_twin)
    # its runs are in a file of their own (bench/gpu_twin.h)
    target_sources(bench_gpu_twin PRIVATE ${PROJECT_SOURCE_DIR}/bench/gpu_twin_run.c)
    target_include_directories(bench_gpu_twin PRIVATE ${PROJECT_SOURCE_DIR}/tests)
    target_link_libraries(bench_gpu_twin PRIVATE m)
    target_compile_definitions(bench_gpu_twin PRIVATE
        TIO_TWIN_OFFLOADER_TRACE="${PROJECT_SOURCE_DIR}/bench/data/offloader-llama.tio")
endif()
# the fakes serve the tests and the two benchmarks above, which run on them
if(NOT TIO_BUILD_TESTS AND NOT TARGET bench_gpu_twin AND NOT TARGET bench_bounce)
    return()
endif()

add_library(tio_fake_cudart SHARED ${PROJECT_SOURCE_DIR}/tests/io/fakes/fake_cudart.c
    ${PROJECT_SOURCE_DIR}/tests/io/fakes/fake_cudart_sched.c
    ${PROJECT_SOURCE_DIR}/tests/io/fakes/fake_cudart_timed.c)
add_library(tio_fake_cufile SHARED ${PROJECT_SOURCE_DIR}/tests/io/fakes/fake_cufile.c)
# the same without the optional calls (buffer registration, the stream API): the fallback
add_library(tio_fake_cufile_sync SHARED ${PROJECT_SOURCE_DIR}/tests/io/fakes/fake_cufile.c)
target_compile_definitions(tio_fake_cufile_sync PRIVATE FAKE_CUFILE_SYNC_ONLY)
target_link_libraries(tio_fake_cudart PRIVATE Threads::Threads)
target_link_libraries(tio_fake_cufile PRIVATE tio_fake_cudart)
target_link_libraries(tio_fake_cufile_sync PRIVATE tio_fake_cudart)
foreach(t tio_fake_cudart tio_fake_cufile tio_fake_cufile_sync)
    target_compile_options(${t} PRIVATE -Wall -Wextra)
    target_compile_definitions(${t} PRIVATE _GNU_SOURCE)
endforeach()

if(TARGET bench_gpu_twin)
    add_dependencies(bench_gpu_twin tio_fake_cudart)
    target_compile_definitions(bench_gpu_twin PRIVATE
        TIO_FAKE_CUDART_PATH="$<TARGET_FILE:tio_fake_cudart>")
endif()

if(TARGET bench_bounce)
    add_dependencies(bench_bounce tio_fake_cudart tio_fake_cufile)
    target_compile_definitions(bench_bounce PRIVATE
        TIO_FAKE_CUDART_PATH="$<TARGET_FILE:tio_fake_cudart>"
        TIO_FAKE_CUFILE_PATH="$<TARGET_FILE:tio_fake_cufile>")
endif()

if(NOT TIO_BUILD_TESTS)
    return()
endif()

set(_tio_fake_env
    "TIO_CUDART_LIB=$<TARGET_FILE:tio_fake_cudart>"
    "TIO_CUFILE_LIB=$<TARGET_FILE:tio_fake_cufile>")
foreach(t test_io_conformance test_io_device test_device test_cuda_emulator test_runtime_stream
        test_cuda_devices test_cuda_timed test_runtime_waits test_cuda_races
        test_runtime_forget test_io_gpu_path test_runtime_poolmix test_io_bounce
        test_io_cufile)
    if(TARGET ${t})
        add_dependencies(${t} tio_fake_cudart tio_fake_cufile)
        set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT ${_tio_fake_env})
        # the same paths compiled in, for a test run by hand (it sets them where unset)
        target_compile_definitions(${t} PRIVATE
            TIO_FAKE_CUDART_LIB="$<TARGET_FILE:tio_fake_cudart>"
            TIO_FAKE_CUFILE_LIB="$<TARGET_FILE:tio_fake_cufile>")
    endif()
endforeach()
# The stream-ordered executor with one tier alone (the SSDs, the host tier): the same emulator
# test over engines that have only that tier, every planned move sent there.
if(TARGET test_runtime_stream)
    set(_tio_tier_schedules 400)
    if(TIO_SANITIZE)
        set(_tio_tier_schedules 60)
    endif()
    foreach(tier ssd host)
        add_test(NAME test_runtime_stream_${tier} COMMAND test_runtime_stream)
        set_tests_properties(test_runtime_stream_${tier} PROPERTIES TIMEOUT ${TIO_TEST_TIMEOUT} LABELS io
            ENVIRONMENT
            "TIO_STREAM_TIERS=${tier};TIO_STREAM_SCHEDULES=${_tio_tier_schedules};${_tio_fake_env}")
    endforeach()
endif()
# The cufile backend against a libcufile without the optional calls (the synchronous fallback).
if(TARGET test_io_cufile)
    add_dependencies(test_io_cufile tio_fake_cufile_sync)
    add_test(NAME test_io_cufile_sync COMMAND test_io_cufile)
    set_tests_properties(test_io_cufile_sync PROPERTIES TIMEOUT ${TIO_TEST_TIMEOUT} LABELS io
        ENVIRONMENT "TIO_TEST_CUFILE_SYNC=1;TIO_CUDART_LIB=$<TARGET_FILE:tio_fake_cudart>;TIO_CUFILE_LIB=$<TARGET_FILE:tio_fake_cufile_sync>")
endif()
if(TARGET test_io_probe)
    add_dependencies(test_io_probe tio_fake_cudart)
    set_property(TEST test_io_probe APPEND PROPERTY ENVIRONMENT
        "TIO_FAKE_CUDART=$<TARGET_FILE:tio_fake_cudart>")
endif()
if(TARGET test_io_cli AND TARGET teraio_cli)
    add_dependencies(test_io_cli teraio_cli tio_fake_cudart)
    set_property(TEST test_io_cli APPEND PROPERTY ENVIRONMENT
        "TIO_FAKE_CUDART=$<TARGET_FILE:tio_fake_cudart>")
endif()

# --- cuFile layout check -------------------------------------------------------------------
set(TIO_CUFILE_INCLUDE_DIR "$ENV{TIO_CUFILE_INCLUDE_DIR}" CACHE PATH "directory with cufile.h")
if(NOT TIO_CUFILE_INCLUDE_DIR)
    # the active virtual environment first (where CI installs the wheel), then CMake's Python
    set(_tio_pys "")
    if(DEFINED ENV{VIRTUAL_ENV})
        list(APPEND _tio_pys "$ENV{VIRTUAL_ENV}/bin/python")
    endif()
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
        list(APPEND _tio_pys "${Python3_EXECUTABLE}")
    endif()
    foreach(_py ${_tio_pys})
        execute_process(
            COMMAND ${_py} -c
                "import importlib.util,os\ns=importlib.util.find_spec('nvidia')\nfor p in (s.submodule_search_locations if s else []):\n  for sub in ('cu13/include','cufile/include','cu12/include'):\n    if os.path.exists(os.path.join(p,sub,'cufile.h')): print(os.path.join(p,sub)); raise SystemExit"
            OUTPUT_VARIABLE _cufile_inc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        if(_cufile_inc)
            set(TIO_CUFILE_INCLUDE_DIR "${_cufile_inc}" CACHE PATH "directory with cufile.h" FORCE)
            break()
        endif()
    endforeach()
endif()
find_path(TIO_CUDA_H_DIR cuda.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
if(TARGET test_cufile_layout AND TIO_CUFILE_INCLUDE_DIR AND TIO_CUDA_H_DIR
   AND EXISTS "${TIO_CUFILE_INCLUDE_DIR}/cufile.h")
    message(STATUS "teraio: cuFile layout check against ${TIO_CUFILE_INCLUDE_DIR}/cufile.h")
    target_include_directories(test_cufile_layout SYSTEM PRIVATE ${TIO_CUFILE_INCLUDE_DIR}
        ${TIO_CUDA_H_DIR})
    target_compile_definitions(test_cufile_layout PRIVATE TIO_HAVE_CUFILE_H=1)
else()
    message(STATUS "teraio: cufile.h not found (pip install nvidia-cufile, or set "
                   "TIO_CUFILE_INCLUDE_DIR): the cuFile layout test will be skipped")
endif()
