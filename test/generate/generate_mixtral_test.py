#!/usr/bin/env python3
"""tessera-generate for a mixture of experts through the user path on the repo's HF Mixtral fixture
(test/fixtures/hf/mixtral): straight from the HF folder (single and sharded files), and from an
import-hf at EP=2 (mp_rank_00_000_00{0,1} files, loaded whole), with and without the KV cache:
greedy output ids equal transformers' generate() in expected.json token for token.
Prints "generate_mixtral: ok" only when every check passed.
"""
import json
import os
import subprocess
import sys
import tempfile

BIN = os.environ.get("TESSERA_BIN_DIR", "build/bin")
SRC = os.environ.get("TESSERA_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MIXTRAL = os.path.join(SRC, "test", "fixtures", "hf", "mixtral")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, flush=True)


def main():
    if not os.path.exists(os.path.join(MIXTRAL, "expected.json")):
        print("FAIL: HF Mixtral fixture missing: " + MIXTRAL)
        return 1
    expected = json.load(open(os.path.join(MIXTRAL, "expected.json")))["generate"]["greedy"]
    prompts, n_new = expected["kwargs"]["input_ids"], expected["kwargs"]["max_new_tokens"]
    with tempfile.TemporaryDirectory() as tmp:
        prompts_file = os.path.join(tmp, "prompts.jsonl")
        with open(prompts_file, "w") as f:
            for p in prompts:
                f.write(json.dumps({"prompt_ids": p}) + "\n")
        ckpt = os.path.join(tmp, "ep2")
        p = subprocess.run([os.path.join(BIN, "tessera-convert"), "import-hf", "--input", os.path.join(MIXTRAL, "hf"),
                            "--output", ckpt, "--expert-model-parallel-size", "2"], capture_output=True, text=True)
        check(p.returncode == 0, "mixtral import-hf at EP=2 failed: " + p.stderr[-1000:])
        check(os.path.exists(os.path.join(ckpt, "iter_0000000", "mp_rank_00_000_001.h5")), "no EP rank 1 file")
        for load in (os.path.join(MIXTRAL, "hf"), os.path.join(MIXTRAL, "hf-sharded"), ckpt):
            for cache in ([], ["--no-kv-cache"]):
                what = f"--load {os.path.basename(load)} {' '.join(cache)}"
                p = subprocess.run([os.path.join(BIN, "tessera-generate"), "--load", load, "--prompts-file", prompts_file,
                                    "--max-new-tokens", str(n_new), "--greedy", "--no-stop"] + cache,
                                   capture_output=True, text=True, timeout=300)
                check(p.returncode == 0, what + " failed: " + p.stderr[-1000:])
                rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{") and "output_ids" in l]
                got = [r["output_ids"] for r in rows]
                check(got == expected["output_ids"], f"{what}: {got} != transformers {expected['output_ids']}")
                print(f"{what}: {len(rows)} rows", "equal" if got == expected["output_ids"] else "DIFFERENT", flush=True)
    if failures:
        return 1
    print("generate_mixtral: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
