#!/usr/bin/env bash
# Print the CMAKE_ARGS that build llama.cpp for this CPU without AMX, or nothing where AMX is absent.
#
# ggml's AMX matmul segfaults on some AMX machines (llama.cpp issue #20824, open; seen on this
# project's machines on the first decode of any Q4_0/Q4_1/Q8_0/Q4_K model). GGML_NATIVE's
# -march=native would compile it in, so on an AMX CPU we name this CPU's other features instead:
# the same AVX-512/VNNI kernels and weight repacking, minus AMX. Used by setup.sh and
# build_llamacpp.sh, so localspec and the llama.cpp tools it is compared with run the same kernels.
set -euo pipefail
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
case " $flags " in *" amx_int8 "*|*" amx_tile "*) ;; *) exit 0 ;; esac
has() { case " $flags " in *" $1 "*) echo ON ;; *) echo OFF ;; esac; }
avx512=OFF
[ "$(has avx512f)$(has avx512bw)$(has avx512vl)$(has avx512dq)$(has avx512cd)" = ONONONONON ] && avx512=ON
echo "-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
     "-DGGML_SSE42=$(has sse4_2) -DGGML_AVX=$(has avx) -DGGML_AVX2=$(has avx2) -DGGML_FMA=$(has fma)" \
     "-DGGML_F16C=$(has f16c) -DGGML_BMI2=$(has bmi2) -DGGML_AVX_VNNI=$(has avx_vnni)" \
     "-DGGML_AVX512=$avx512 -DGGML_AVX512_VBMI=$(has avx512vbmi) -DGGML_AVX512_VNNI=$(has avx512_vnni)" \
     "-DGGML_AVX512_BF16=$(has avx512_bf16)"
