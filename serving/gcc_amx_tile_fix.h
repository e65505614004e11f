/* Force-included (-include) into every C++ file of the llama.cpp build by the Makefile's install rule;
 * it does something only where AMX tiles are compiled in (__AMX_TILE__: ggml's sapphirerapids CPU
 * variant) and the compiler is GCC.
 *
 * GCC 12's <amxtileintrin.h> declares that ldtilecfg reads 8 bytes of the 64-byte tile configuration
 * ("m" (*((const void **)__config))), so at -O2/-O3 the stores of the rows and column widths into a
 * configuration on the stack are dead to it and dropped: ggml's ggml_tile_config_init() then loads
 * palette 1 with every tile 0 rows wide, and the first tile instruction (tilezero) raises #UD, a SIGILL
 * (what stopped the engine on an AMX host; tests/serving/test_cpu_kernels.py shows the compiler's output).
 * Here ldtilecfg reads all 64 bytes, and tileloadd is ordered after the stores that fill its source
 * ("memory", as tilestored already is). */
#if defined(__AMX_TILE__) && defined(__GNUC__) && !defined(__clang__) && defined(__cplusplus)
#include <immintrin.h>

typedef struct { unsigned char bytes[64]; } ctxpress_tile_config_bytes;

#undef _tile_loadconfig
#define _tile_loadconfig(config) \
    __asm__ volatile ("ldtilecfg\t%X0" :: "m" (*(const ctxpress_tile_config_bytes *) (config)))

#undef _tile_loadd_internal
#define _tile_loadd_internal(dst, base, stride) \
    __asm__ volatile ("{tileloadd\t(%0,%1,1), %%tmm"#dst"|tileloadd\t%%tmm"#dst", [%0+%1*1]}" \
                      :: "r" ((const void *) (base)), "r" ((long) (stride)) : "memory")
#endif
