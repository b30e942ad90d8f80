#!/usr/bin/env bash
# Moving the default model (98 MB) to the GPU machine, whose calls carry at most 64 MiB:
#   here:   bash scripts/carry-model.sh split [SIZE] -> .model/partaa, .model/partab (ignored)
#           (SIZE of the first part, default 49M; 54M leaves ~12 MB beside the second
#           part for carried binaries)
#   there:  one call carrying .model/partaa and another carrying .model/partab, each
#           running `bash scripts/carry-model.sh take`, back to back (the machine keeps
#           its files only while it stays warm); the second one assembles and checks it.
set -euo pipefail
cd "$(dirname "$0")/.."
name=SmolLM2-135M-Instruct.Q4_1.gguf
models="${LOWBIT_CACHE:-$HOME/.cache/lowbit}/models"
case "${1:-}" in
  split)
    rm -rf .model && mkdir -p .model
    split -b "${2:-49M}" "$models/$name" .model/part
    ls -l .model ;;
  take)
    mkdir -p "$models"
    mv .model/part* "$models/"
    if [ -f "$models/partaa" ] && [ -f "$models/partab" ]; then
      cat "$models/partaa" "$models/partab" >"$models/$name" && rm "$models/partaa" "$models/partab"
      head -c 4 "$models/$name" | grep -q GGUF && echo "carry-model: $models/$name ($(stat -c %s "$models/$name") bytes)"
    else
      echo "carry-model: $(ls "$models") so far"
    fi ;;
  *) echo "usage: scripts/carry-model.sh split|take" >&2; exit 2 ;;
esac
