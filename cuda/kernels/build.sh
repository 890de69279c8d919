#!/bin/sh
# build.sh OUTDIR — compile cuda/kernels/all.cu to PTX with nvcc (CUDA 11.8):
# OUTDIR/gorun_sm80.ptx (compute_80) and OUTDIR/gorun_sm90.ptx (compute_90).
# Each file's first line names the SHA-256 of the sources it was built from
# (stamp.sh -n), so a stale PTX shows without nvcc. The rest depends on the
# sources and the nvcc version, and nearly always byte for byte: nvcc 11.8
# now and then orders a few independent instructions of gorun_bn_apply
# differently run to run (see README.md, make kernels-check).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
NVCC=${NVCC:-nvcc}
sum=$("$here/stamp.sh" -n)
for cc in 80 90; do
	# Compile from inside the directory with a relative name, so no absolute
	# path can reach the output.
	(cd "$here" && "$NVCC" -ptx -arch=compute_$cc -O3 -fmad=false -std=c++14 \
		-o "$out/gorun_sm$cc.ptx.nvcc" all.cu)
	{ printf '// gorun kernel sources sha256 %s\n' "$sum"; cat "$out/gorun_sm$cc.ptx.nvcc"; } >"$out/gorun_sm$cc.ptx.tmp"
	rm "$out/gorun_sm$cc.ptx.nvcc"
	mv "$out/gorun_sm$cc.ptx.tmp" "$out/gorun_sm$cc.ptx"
done
