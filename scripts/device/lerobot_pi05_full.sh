#!/usr/bin/env bash
# Run on a GPU machine (device tool) from the repo root, with LeRobot 0.6.1's wheels in .whl/
# (docs/checkpoints.md says which): LeRobot's stock full-size pi05 saved by LeRobot, imported by
# `lamp import`, compiled for cuda, and compared with LeRobot's own inference on the same GPU
# (bench/lerobot_pi05_full.py). SMOKE=1 (scripts/device/lib.sh) runs the same path at tiny
# widths on a CPU. Results go to $OUT (or ./out), scratch to $WORK/lerobot_full (WORK: default
# /tmp). PYTHON names a Python with LeRobot 0.6.1 (Python 3.12+), default python3.
# smoke: SMOKE=1 bash scripts/device/lerobot_pi05_full.sh
# smoke-needs: lerobot
set -euo pipefail
. scripts/device/lib.sh
work="$work/lerobot_full"
mkdir -p "$work/tok"
py="${PYTHON:-python3}"
# lamp_ros from this tree, with its metadata (the checkpoint formats are entry points): the
# metadata right after the tree (lib.sh put $PWD first)
mkdir -p "$work/meta" && "$py" setup.py -q egg_info --egg-base "$work/meta" > /dev/null
export PYTHONPATH="$PWD:$work/meta${PYTHONPATH#"$PWD"}"
if smoke; then
  flags=(--smoke --device cpu); target=cpu
else
  flags=(); target=cuda
fi
card
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
