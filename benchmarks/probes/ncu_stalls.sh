# Why the top rungs' warps wait: ncu's full set on one call at 4096^3 of cuda-pipeline (bfloat16, TF32) and
# cuda-double-buffer (float32), each alone (linear_call.py: no checks first). Into DIR: NAME-details.txt (the
# sections) and NAME-sass.csv.gz (every SASS instruction with its stall samples: where the warps wait).
#
#     bash benchmarks/probes/ncu_stalls.sh DIR [NAME:VARIANT:DTYPE[:NAME=VALUE,...] ...]
set -u
DIR=$1 && shift && mkdir -p "$DIR"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
jobs=("$@") && [ $# -gt 0 ] || jobs=(bf16:cuda-pipeline:bfloat16 tf32:cuda-pipeline:float32 f32:cuda-double-buffer:float32)
for job in "${jobs[@]}"; do
  IFS=: read -r name variant dtype params <<< "$job"
  ps=() && for p in ${params//,/ }; do ps+=(-p "$p"); done
  start=$SECONDS
  $NCU --target-processes all --kernel-name regex:matmul_nt --launch-skip 1 --launch-count 1 --set full -f \
    -o "/tmp/$name" python3 benchmarks/probes/linear_call.py "$variant" "$dtype" "${ps[@]}" > "$DIR/$name-run.txt" 2>&1
  echo "$name: ncu exit $? after $((SECONDS - start)) s"
  $NCU -i "/tmp/$name.ncu-rep" --page details > "$DIR/$name-details.txt" 2>&1
  $NCU -i "/tmp/$name.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$DIR/$name-sass.csv.gz"
done
