#!/bin/sh
# check.sh — make kernels-check: fail if the committed PTX is stale, then
# assemble it with ptxas for sm_80 and sm_90. Needs nvcc and ptxas (CUDA 11.8).
#
# The committed PTX is current when a fresh build.sh gives the same bytes or,
# failing that, the same first line (the sources' SHA-256) and the same
# instructions once register numbers are dropped and lines sorted: nvcc 11.8
# sometimes orders a few independent instructions of one kernel (seen:
# gorun_bn_apply, about one build in twenty) differently from run to run,
# which renumbers its registers without changing what it computes.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$here/build.sh" "$tmp"
nv=$(nvcc --version | grep -o 'release [0-9.]*')
norm() { sed -E 's/%[a-z]+[0-9]+/%R/g; s/%[a-z]+<[0-9]+>/%R<>/g' "$1" | LC_ALL=C sort; }
# kernels FILE DIFF: the .entry names of FILE holding the lines DIFF changes.
kernels() {
	grep -E '^[0-9]' "$2" | sed -E 's/^([0-9]+).*/\1/' |
		awk -v f="$1" 'BEGIN { n = 0; while ((getline l < f) > 0) { n++; if (l ~ /^\.visible \.entry /) { e = l; sub(/^\.visible \.entry /, "", e); sub(/\(.*/, "", e) } name[n] = e } }
			{ print name[$1] }' | sort -u | paste -sd, - | sed 's/,/, /g'
}
for f in gorun_sm80.ptx gorun_sm90.ptx; do
	old="$here/$f" new="$tmp/$f"
	if cmp -s "$old" "$new"; then
		continue
	fi
	diff "$old" "$new" >"$tmp/diff" || true
	if [ "$(head -n 1 "$old")" != "$(head -n 1 "$new")" ]; then
		echo "kernels-check: cuda/kernels/$f is stale: the kernel sources changed since it was built; run 'make kernels' and commit the PTX"
		exit 1
	fi
	norm "$old" >"$tmp/old.norm"
	norm "$new" >"$tmp/new.norm"
	if ! cmp -s "$tmp/old.norm" "$tmp/new.norm"; then
		echo "kernels-check: cuda/kernels/$f differs from what nvcc ($nv) builds from the same sources, in $(kernels "$old" "$tmp/diff"); run 'make kernels' with nvcc 11.8 and commit the PTX"
		head -n 20 "$tmp/diff"
		exit 1
	fi
	echo "kernels-check: cuda/kernels/$f: nvcc ($nv) ordered the instructions of $(kernels "$old" "$tmp/diff") differently this time; the same instructions, so current"
done
ptxas -arch=sm_80 -o "$tmp/sm80.cubin" "$here/gorun_sm80.ptx"
ptxas -arch=sm_90 -o "$tmp/sm90.cubin" "$here/gorun_sm90.ptx"
echo "kernels-check: PTX up to date; ptxas sm_80 and sm_90 OK"
