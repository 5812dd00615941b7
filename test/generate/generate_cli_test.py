#!/usr/bin/env python3
"""tessera-generate through the user path on the HF GPT-2 and Llama fixtures (../shared/fixtures/hf/).

  single   (label unit): import-hf then generate from the checkpoint, and generate straight from the
           HF folder: greedy and beam outputs equal HF's expected.json token for token; the same
           tokens without the KV cache; a left-padded batch of different prompt lengths equals each
           prompt alone; seeded sampling is reproducible; bad input exits 2 naming the file/key.
           Llama (RoPE, GQA, RMSNorm, SwiGLU): greedy equals HF's expected.json through import-hf
           and --load of the HF folder; greedy and beam equal with and without the KV cache; a
           left-padded batch equals each prompt alone (RoPE at per-row positions). ALiBi (a random
           small GPT): greedy, beam and a left-padded batch equal with and without the KV cache.
  parallel MPIEXEC (label mpi): TP=2 and PP=2 equal TP=1 (greedy, top-k and top-p sampling with
           decay; the GPT-2 and Llama fixtures); DP > 1 and sequence parallelism are refused with
           exit code 2.
Prints "generate_cli <mode>: ok" only when every check passed.
"""
import json
import os
import subprocess
import sys
import tempfile

BIN = os.environ.get("TESSERA_BIN_DIR", "build/bin")
SHARED = os.environ.get("TESSERA_SHARED_DIR", "../shared")
FIXTURE = os.path.join(SHARED, "fixtures", "hf", "gpt2")
LLAMA = os.path.join(SHARED, "fixtures", "hf", "llama")
# A small random ALiBi GPT (no fixture has ALiBi): std 0.2 weights give peaked, tie-free logits.
ALIBI = ["--random-init"] + [x for kv in ("model.num_layers=2", "model.hidden_size=64", "model.num_attention_heads=4",
                                          "model.max_position_embeddings=64", "model.seq_length=64",
                                          'model.position_embedding_type="alibi"', "model.init_method_std=0.2",
                                          "model.hidden_dropout=0.0", "model.attention_dropout=0.0")
                             for x in ("--set", kv)]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, flush=True)


def run(args, mpi=None, np=1):
    cmd = ([mpi, "--oversubscribe", "--allow-run-as-root", "-np", str(np)] if mpi else []) + \
          [os.path.join(BIN, "tessera-generate")] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p


def generate(args, **kw):
    p = run(args, **kw)
    if p.returncode != 0:
        failures.append("tessera-generate %s exited %d: %s" % (" ".join(args), p.returncode, p.stderr[-2000:]))
        print("FAIL: " + failures[-1], flush=True)
        return []
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def prompts_file(tmp, rows, name="prompts.jsonl"):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


def llama_single(tmp):
    """Llama fixture: HF greedy parity through both user paths; KV cache on/off; left padding."""
    expected = json.load(open(os.path.join(LLAMA, "expected.json")))["generate"]["greedy"]
    ids, n_new = expected["kwargs"]["input_ids"], expected["kwargs"]["max_new_tokens"]
    hf = os.path.join(LLAMA, "hf")
    ckpt = os.path.join(tmp, "llama-ckpt")
    p = subprocess.run([os.path.join(BIN, "tessera-convert"), "import-hf", "--input", hf, "--output", ckpt],
                       capture_output=True, text=True)
    check(p.returncode == 0, "llama import-hf failed: " + p.stderr[-1000:])
    greedy_file = prompts_file(tmp, [{"prompt_ids": x} for x in ids], "llama_greedy.jsonl")
    g_args = ["--prompts-file", greedy_file, "--max-new-tokens", str(n_new)]
    for load in (ckpt, hf):
        rows = generate(["--load", load] + g_args)
        check([r["output_ids"] for r in rows] == expected["output_ids"], "llama greedy from %s: %s != HF %s" % (
            load, [r["output_ids"] for r in rows], expected["output_ids"]))
    rows = generate(["--load", ckpt, "--no-kv-cache"] + g_args)
    check([r["output_ids"] for r in rows] == expected["output_ids"], "llama greedy without KV cache differs")
    b_args = ["--prompts-file", prompts_file(tmp, [{"prompt_ids": ids[0]}], "llama_beam.jsonl"), "--max-new-tokens", "8",
              "--num-beams", "3", "--length-penalty", "1.5"]
    with_cache, without = generate(["--load", ckpt] + b_args), generate(["--load", ckpt, "--no-kv-cache"] + b_args)
    check(with_cache and with_cache == without, "llama beam with / without KV cache: %s != %s" % (with_cache, without))
    # Left padding: RoPE positions count from each row's first token.
    mixed = prompts_file(tmp, [{"prompt_ids": ids[0]}, {"prompt_ids": ids[1][3:]}], "llama_mixed.jsonl")
    alone = prompts_file(tmp, [{"prompt_ids": ids[1][3:]}], "llama_alone.jsonl")
    for extra in ([], ["--no-kv-cache"]):
        both = generate(["--load", ckpt, "--prompts-file", mixed, "--max-new-tokens", "10"] + extra)
        one = generate(["--load", ckpt, "--prompts-file", alone, "--max-new-tokens", "10"] + extra)
        check(len(both) == 2 and one and both[1]["output_ids"] == one[0]["output_ids"],
              "llama left-padded row %s differs from the prompt alone" % extra)


def alibi_single(tmp):
    """A random ALiBi GPT: the KV cache changes nothing (greedy, beam, a left-padded batch)."""
    mixed = prompts_file(tmp, [{"prompt_ids": [11, 22, 33, 44, 55, 66]}, {"prompt_ids": [7, 8, 9]}], "alibi.jsonl")
    for extra in (["--max-new-tokens", "12"], ["--max-new-tokens", "8", "--num-beams", "3"]):
        with_cache = generate(ALIBI + ["--prompts-file", mixed] + extra)
        without = generate(ALIBI + ["--prompts-file", mixed, "--no-kv-cache"] + extra)
        check(with_cache and [r["output_ids"] for r in with_cache] == [r["output_ids"] for r in without],
              "alibi %s with / without KV cache: %s != %s" % (extra, [r["output_ids"] for r in with_cache],
                                                             [r["output_ids"] for r in without]))
    alone = prompts_file(tmp, [{"prompt_ids": [7, 8, 9]}], "alibi_alone.jsonl")
    both = generate(ALIBI + ["--prompts-file", mixed, "--max-new-tokens", "12"])
    one = generate(ALIBI + ["--prompts-file", alone, "--max-new-tokens", "12"])
    check(len(both) == 2 and one and both[1]["output_ids"] == one[0]["output_ids"],
          "alibi left-padded row differs from the prompt alone")


def main():
    mode = sys.argv[1]
    expected = json.load(open(os.path.join(FIXTURE, "expected.json")))["generate"]
    greedy, beam = expected["greedy"], expected["beam4_lp1.5"]
    hf = os.path.join(FIXTURE, "hf")
    with tempfile.TemporaryDirectory() as tmp:
        greedy_file = prompts_file(tmp, [{"prompt_ids": ids} for ids in greedy["kwargs"]["input_ids"]], "greedy.jsonl")
        beam_file = prompts_file(tmp, [{"prompt_ids": ids} for ids in beam["kwargs"]["input_ids"]], "beam.jsonl")
        g_args = ["--prompts-file", greedy_file, "--max-new-tokens", str(greedy["kwargs"]["max_new_tokens"])]
        b_args = ["--prompts-file", beam_file, "--max-new-tokens", str(beam["kwargs"]["max_new_tokens"]),
                  "--num-beams", str(beam["kwargs"]["num_beams"]), "--length-penalty", str(beam["kwargs"]["length_penalty"])]
        if mode == "single":
            ckpt = os.path.join(tmp, "ckpt")
            p = subprocess.run([os.path.join(BIN, "tessera-convert"), "import-hf", "--input", hf, "--output", ckpt],
                               capture_output=True, text=True)
            check(p.returncode == 0, "import-hf failed: " + p.stderr[-1000:])
            for load in (ckpt, hf):
                rows = generate(["--load", load] + g_args)
                check([r["output_ids"] for r in rows] == greedy["output_ids"], "greedy from %s: %s != HF %s" % (
                    load, [r["output_ids"] for r in rows], greedy["output_ids"]))
                check(all(len(r["logprobs"]) == greedy["kwargs"]["max_new_tokens"] for r in rows), "one logprob per new token")
                check(all(r["logprobs"] and max(r["logprobs"]) < 0 for r in rows), "logprobs are log-probabilities")
                rows = generate(["--load", load] + b_args)
                check([r["output_ids"] for r in rows] == beam["output_ids"], "beam from %s: %s != HF %s" % (
                    load, [r["output_ids"] for r in rows], beam["output_ids"]))
            # Without the KV cache: the same tokens.
            rows = generate(["--load", ckpt, "--no-kv-cache"] + g_args)
            check([r["output_ids"] for r in rows] == greedy["output_ids"], "greedy without KV cache differs")
            rows = generate(["--load", ckpt, "--no-kv-cache"] + b_args)
            check([r["output_ids"] for r in rows] == beam["output_ids"], "beam without KV cache differs")
            # Left padding: a batch of different lengths equals each prompt alone (greedy and sampled).
            a, b = greedy["kwargs"]["input_ids"][0], greedy["kwargs"]["input_ids"][1][3:]
            mixed = prompts_file(tmp, [{"prompt_ids": a}, {"prompt_ids": b}], "mixed.jsonl")
            alone_a = prompts_file(tmp, [{"prompt_ids": a}], "a.jsonl")
            alone_b = prompts_file(tmp, [{"prompt_ids": b}], "b.jsonl")
            for extra in ([], ["--no-kv-cache"]):
                both = generate(["--load", ckpt, "--prompts-file", mixed, "--max-new-tokens", "10"] + extra)
                one_a = generate(["--load", ckpt, "--prompts-file", alone_a, "--max-new-tokens", "10"] + extra)
                one_b = generate(["--load", ckpt, "--prompts-file", alone_b, "--max-new-tokens", "10"] + extra)
                check(len(both) == 2 and both[0]["output_ids"] == one_a[0]["output_ids"] and
                      both[1]["output_ids"] == one_b[0]["output_ids"],
                      "left-padded batch %s differs from the prompts alone" % extra)
                if len(both) == 2 and one_b:
                    diff = max(abs(x - y) for x, y in zip(both[1]["logprobs"], one_b[0]["logprobs"]))
                    check(diff < 1e-4, "padded row's logprobs differ by %g" % diff)
            # Seeded sampling: reproducible, and the seed matters.
            s_args = ["--load", ckpt, "--prompts-file", mixed, "--max-new-tokens", "10", "--top-k", "50", "--temperature", "2"]
            s1 = generate(s_args + ["--seed", "7"])
            s2 = generate(s_args + ["--seed", "7"])
            s3 = generate(s_args + ["--seed", "8"])
            check(s1 and s1 == s2, "the same seed gives different samples")
            check(s1 and s1 != s3, "different seeds give the same samples")
            # Stop token: a sequence ends at it (the greedy row 0 generates 30847 second).
            rows = generate(["--load", ckpt, "--prompts-file", alone_a, "--max-new-tokens", "10", "--stop-token", "30847"])
            check(rows and rows[0]["output_ids"] == a + [26730, 30847], "stop token: %s" % (rows and rows[0]["output_ids"]))
            # --add-bos prepends the end-of-document token (HF eos_token_id 50256).
            p = run(["--load", hf, "--prompts-file", alone_a, "--max-new-tokens", "2", "--add-bos"])
            rows = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
            check(p.returncode == 0 and rows and rows[0]["output_ids"][:7] == [50256] + a, "--add-bos: %s" % p.stderr[-500:])
            # Bad input: exit 2 with a message naming the file / key.
            bad = os.path.join(tmp, "bad.jsonl")
            open(bad, "w").write('{"prompt_ids": [1, 2]}\n{"prompt_ids": "x"}\n')
            p = run(["--load", ckpt, "--prompts-file", bad])
            check(p.returncode == 2 and "bad.jsonl:2" in p.stderr, "bad prompts file: rc %d %s" % (p.returncode, p.stderr[-300:]))
            p = run(["--load", ckpt, "--prompt", "hello"])
            check(p.returncode == 2 and "tokenizer" in p.stderr, "text prompt without tokenizer: rc %d" % p.returncode)
            p = run(["--load", ckpt, "--prompts-file", alone_a, "--max-new-tokens", "500"])
            check(p.returncode == 2 and "positions" in p.stderr, "too many tokens: rc %d %s" % (p.returncode, p.stderr[-300:]))
            p = run(["--load", ckpt, "--prompts-file", alone_a, "--top-k", "5", "--top-p", "0.5"])
            check(p.returncode == 2 and "top_k" in p.stderr, "top-k with top-p: rc %d" % p.returncode)
            p = run(["--load", ckpt, "--prompts-file", alone_a, "--set", 'parallel.recompute_granularity="full"'])
            check(p.returncode == 2 and "recompute_granularity" in p.stderr, "recomputation refused: rc %d %s" % (
                p.returncode, p.stderr[-300:]))
            p = run(["--load", os.path.join(tmp, "missing"), "--prompts-file", alone_a])
            check(p.returncode == 2 and "missing" in p.stderr, "missing checkpoint: rc %d" % p.returncode)
            llama_single(tmp)
            alibi_single(tmp)
        else:
            mpi = sys.argv[2]
            mixed = prompts_file(tmp, [{"prompt_ids": greedy["kwargs"]["input_ids"][0]},
                                       {"prompt_ids": greedy["kwargs"]["input_ids"][1][2:]}], "mixed.jsonl")
            cases = [["--prompts-file", mixed, "--max-new-tokens", "12"],
                     ["--prompts-file", mixed, "--max-new-tokens", "12", "--top-k", "20", "--temperature", "3", "--seed", "3"],
                     ["--prompts-file", mixed, "--max-new-tokens", "12", "--top-p", "0.95", "--top-p-decay", "0.9",
                      "--top-p-bound", "0.5", "--temperature", "5", "--seed", "5"],
                     b_args]
            llama_expected = json.load(open(os.path.join(LLAMA, "expected.json")))["generate"]["greedy"]
            llama_ids = llama_expected["kwargs"]["input_ids"]
            llama_mixed = prompts_file(tmp, [{"prompt_ids": llama_ids[0]}, {"prompt_ids": llama_ids[1][2:]}], "lmixed.jsonl")
            llama_hf = os.path.join(LLAMA, "hf")
            cases = [(hf, c) for c in cases] + [
                (llama_hf, ["--prompts-file", llama_mixed, "--max-new-tokens", "12"]),
                (llama_hf, ["--prompts-file", llama_mixed, "--max-new-tokens", "12", "--top-k", "20", "--temperature",
                            "3", "--seed", "3"]),
                (llama_hf, ["--prompts-file", llama_mixed, "--max-new-tokens", "8", "--num-beams", "3"])]
            for hf_dir, case in cases:
                ref = generate(["--load", hf_dir] + case)
                check(ref != [], "TP=1 reference ran")
                for layout in (["parallel.tensor_model_parallel_size=2"], ["parallel.pipeline_model_parallel_size=2"]):
                    sets = [x for kv in layout for x in ("--set", kv)]
                    rows = generate(["--load", hf_dir] + case + sets, mpi=mpi, np=2)
                    check([r["output_ids"] for r in rows] == [r["output_ids"] for r in ref],
                          "%s %s %s: %s != TP=1 %s" % (os.path.basename(os.path.dirname(hf_dir)), layout,
                                                       " ".join(case[2:]), [r["output_ids"] for r in rows],
                                                    [r["output_ids"] for r in ref]))
            p = run(["--load", hf, "--prompts-file", mixed], mpi=mpi, np=2)
            # Each rank exits 2 through MPI_Abort; mpirun reports a non-zero code (usually 2, 1 on some aborts).
            check(p.returncode != 0 and "data-parallel size 1" in p.stderr, "DP=2 refused: rc %d %s" % (p.returncode, p.stderr[-300:]))
            p = run(["--load", hf, "--prompts-file", mixed, "--set", "parallel.tensor_model_parallel_size=2", "--set",
                     "parallel.sequence_parallel=true"], mpi=mpi, np=2)
            check(p.returncode != 0 and "sequence_parallel" in p.stderr, "SP refused: rc %d %s" % (p.returncode, p.stderr[-300:]))
    if failures:
        print("generate_cli %s: %d failures" % (mode, len(failures)))
        sys.exit(1)
    print("generate_cli %s: ok" % mode)


if __name__ == "__main__":
    main()
