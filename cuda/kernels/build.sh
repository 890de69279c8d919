#!/bin/sh
# build.sh OUTDIR — compile cuda/kernels/all.cu to PTX with nvcc (CUDA 11.8):
# OUTDIR/gorun_sm80.ptx (compute_80) and OUTDIR/gorun_sm90.ptx (compute_90).
# The output depends only on the sources and the nvcc version.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
NVCC=${NVCC:-nvcc}
for cc in 80 90; do
	# Compile from inside the directory with a relative name, so no absolute
	# path can reach the output.
	(cd "$here" && "$NVCC" -ptx -arch=compute_$cc -O3 -fmad=false -std=c++14 \
		-o "$out/gorun_sm$cc.ptx.tmp" all.cu)
	mv "$out/gorun_sm$cc.ptx.tmp" "$out/gorun_sm$cc.ptx"
done
