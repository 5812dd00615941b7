#!/usr/bin/env python3
"""tessera-generate for T5 through the user path on the HF T5 fixture (../shared/fixtures/hf/t5):
import-hf then greedy generation from the checkpoint, and straight from the HF folder (single and
sharded files): the output ids equal HF's generate() in expected.json token for token (start token,
then max_new_tokens greedy tokens); sampling, beam search and --serve exit 2 naming T5.
Prints "generate_t5: ok" only when every check passed.
"""
import json
import os
import subprocess
import sys
import tempfile

BIN = os.environ.get("TESSERA_BIN_DIR", "build/bin")
SHARED = os.environ.get("TESSERA_SHARED_DIR", "../shared")
T5 = os.path.join(SHARED, "fixtures", "hf", "t5")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, flush=True)


def run(args):
    return subprocess.run([os.path.join(BIN, "tessera-generate")] + args, capture_output=True, text=True, timeout=300)


def main():
    if not os.path.exists(os.path.join(T5, "expected.json")):
        print("FAIL: HF T5 fixture missing: " + T5)
        return 1
    expected = json.load(open(os.path.join(T5, "expected.json")))["generate"]["greedy"]
    ids, n_new = expected["kwargs"]["input_ids"], expected["kwargs"]["max_new_tokens"]
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "t5-ckpt")
        p = subprocess.run([os.path.join(BIN, "tessera-convert"), "import-hf", "--input", os.path.join(T5, "hf"),
                            "--output", ckpt], capture_output=True, text=True)
        check(p.returncode == 0, "t5 import-hf failed: " + p.stderr[-1000:])
        prompts = os.path.join(tmp, "prompts.jsonl")
        with open(prompts, "w") as f:
            for x in ids:
                f.write(json.dumps({"prompt_ids": x}) + "\n")
        args = ["--prompts-file", prompts, "--max-new-tokens", str(n_new)]
        for load in (ckpt, os.path.join(T5, "hf"), os.path.join(T5, "hf-sharded")):
            p = run(["--load", load] + args)
            check(p.returncode == 0, "tessera-generate --load %s exited %d: %s" % (load, p.returncode, p.stderr[-1500:]))
            rows = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
            got = [r["output_ids"] for r in rows]
            check(got == expected["output_ids"], "t5 greedy from %s: %s != HF %s" % (load, got, expected["output_ids"]))
            if got == expected["output_ids"]:
                print("t5 greedy from %s equals HF: %s" % (load, got))
        for extra in (["--temperature", "0.7"], ["--num-beams", "2"], ["--serve"]):
            p = run(["--load", ckpt] + args + extra)
            check(p.returncode == 2 and "t5" in (p.stderr + p.stdout),
                  "t5 with %s: expected exit 2 naming t5, got %d: %s" % (extra, p.returncode, p.stderr[-500:]))
    if failures:
        return 1
    print("generate_t5: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
