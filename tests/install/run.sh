#!/usr/bin/env bash
# Install the build into a temporary prefix and compile a C11 and a C++ consumer against the
# installed headers and library (pkg-config and CMake package both checked).
set -euo pipefail
build=$1 src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib64/pkgconfig:${PKG_CONFIG_PATH:-}"
cflags=$(pkg-config --cflags teraio)
libs=$(pkg-config --libs teraio)
libdir=$(pkg-config --variable=libdir teraio)
cc -std=c11 -Wall -Wextra -Werror -pedantic $cflags "$src/consumer.c" -o "$prefix/consumer_c" $libs
c++ -std=c++17 -Wall -Wextra -Werror $cflags -x c++ "$src/consumer.c" -o "$prefix/consumer_cxx" $libs
# Every installed header compiles on its own, as C11 and as C++ (it includes what it needs).
incdir=$(pkg-config --variable=includedir teraio)
for h in "$incdir"/teraio/*.h; do
    printf '#include <teraio/%s>\nint tio_header_only;\n' "$(basename "$h")" >"$prefix/one.c"
    cc -std=c11 -Wall -Wextra -Werror -pedantic $cflags -c "$prefix/one.c" -o "$prefix/one.o"
    c++ -std=c++17 -Wall -Wextra -Werror $cflags -x c++ -c "$prefix/one.c" -o "$prefix/one.o"
done
# ... and only what it needs: the engine's header does not bring the planner's with it (they
# share the tiers of tier.h); the umbrella header brings every module, the executor included.
cat >"$prefix/layers.c" <<'C'
#include <teraio/io.h>
#ifdef TERAIO_PLAN_H
#error "teraio/io.h includes teraio/plan.h"
#endif
#include <teraio/teraio.h>
#if !defined(TERAIO_RUNTIME_H) || !defined(TERAIO_ALLOC_H) || !defined(TERAIO_TIER_H)
#error "teraio/teraio.h misses a module header"
#endif
int tio_layers_ok;
C
cc -std=c11 -Wall -Wextra -Werror -pedantic $cflags -c "$prefix/layers.c" -o "$prefix/one.o"
LD_LIBRARY_PATH="$libdir" "$prefix/consumer_c"
LD_LIBRARY_PATH="$libdir" "$prefix/consumer_cxx"
# Static linking through pkg-config --static.
cc -std=c11 $cflags "$src/consumer.c" -o "$prefix/consumer_static" \
   "$libdir/libteraio.a" $(pkg-config --static --libs-only-l teraio | sed 's/-lteraio//')
"$prefix/consumer_static"
# CMake package.
mkdir -p "$prefix/cm" && cat > "$prefix/cm/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(teraio REQUIRED)
add_executable(consumer $src/consumer.c)
target_link_libraries(consumer teraio::teraio)
CM
cmake -S "$prefix/cm" -B "$prefix/cm/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/cm/build" >/dev/null
LD_LIBRARY_PATH="$libdir" "$prefix/cm/build/consumer"
echo "install consumer: C11, C++, static and CMake package OK"
