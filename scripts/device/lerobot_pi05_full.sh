#!/usr/bin/env bash
# Run on a GPU machine (device tool) from the repo root, with LeRobot 0.6.1's wheels in .whl/
# (docs/checkpoints.md says which): LeRobot's stock full-size pi05 saved by LeRobot, imported by
# `lamp import`, compiled for cuda, and compared with LeRobot's own inference on the same GPU
# (bench/lerobot_pi05_full.py). SMOKE=1 runs the same path at tiny widths on a CPU. Results go
# to $OUT (or ./out).
set -euo pipefail
out="$(realpath -m "${OUT:-out}")"
work="${WORK:-/tmp/lerobot_full}"
mkdir -p "$out" "$work/tok"
py="${PYTHON:-python3}"
# lamp_ros from this tree, with its metadata (the checkpoint formats are entry points)
mkdir -p "$work/meta" && "$py" setup.py -q egg_info --egg-base "$work/meta" > /dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$work/meta${PYTHONPATH:+:$PYTHONPATH}"
if [ "${SMOKE:-0}" = 1 ]; then
  flags=(--smoke --device cpu); target=cpu
else
  flags=(); target=cuda
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
fi
cp test/data/checkpoints/tokenizer.model "$work/tok/"
echo '{"tokenizer_class": "GemmaTokenizer", "add_bos_token": true, "add_eos_token": false}' \
  > "$work/tok/tokenizer_config.json"
ckpt="$work/pi05_lerobot"
rm -rf "$ckpt" "$work/artifact"
"$py" bench/lerobot_pi05_full.py "${flags[@]}" make --out "$ckpt" \
  --tokenizer-out "$work/tokenizer.model" --tokenizer-dir "$work/tok" 2>&1 | tee "$out/make.log"
"$py" bench/lerobot_pi05_full.py peak --record "$out/peak.jsonl" --reference "$ckpt" \
  "$py" -m lamp_ros.cli import "$ckpt" --tokenizer "$work/tokenizer.model" --target "$target" \
  --out "$work/pi05_lerobot.yaml" 2>&1 | tee "$out/import.log"
# the import itself at full size, before compiling: lamp's eager policy against LeRobot
"$py" bench/lerobot_pi05_full.py "${flags[@]}" eager --checkpoint "$ckpt" \
  --spec "$work/pi05_lerobot.yaml" --out "$out/eager.json" 2>&1 | tee "$out/eager.log"
rc=0
"$py" bench/lerobot_pi05_full.py peak --record "$out/peak.jsonl" --reference "$ckpt" \
  "$py" -m lamp_ros.cli compile "$work/pi05_lerobot.yaml" --out "$work/artifact" \
  > "$out/compile.log" 2>&1 || rc=$?
tail -n 14 "$out/compile.log"
[ "$rc" = 0 ] || [ "$rc" = 3 ]  # a parity failure still leaves the artifact to compare
cp "$work/artifact/evidence/parity.json" "$out/parity.json"
cp "$work/artifact/evidence/build.json" "$out/build.json"
"$py" bench/lerobot_pi05_full.py "${flags[@]}" compare --checkpoint "$ckpt" \
  --artifact "$work/artifact" --out "$out/compare.json" 2>&1 | tee "$out/compare.log"
