"""Does transformers load Tessera's Mixtral export and reproduce the fixture's outputs?

Usage: python3 hf_mixtral_export_check.py EXPORT_DIR FIXTURE_DIR  (FIXTURE_DIR: test/fixtures/hf/mixtral)
EXPORT_DIR: `tessera-convert export-hf` of an import of the fixture (e.g. at TP=2 x EP=2). Loads
it with AutoModelForCausalLM (CPU, fp32), checks the class is MixtralForCausalLM, the logits on the
fixture's ids match expected.safetensors within 1e-4 and greedy generate gives the stored tokens.
Prints one line per check and "mixtral export check: ok" when all pass (exit 0), else exit 1.
"""
import json, os, sys
import torch
import transformers as tf
from safetensors.torch import load_file

export, fixture = sys.argv[1], sys.argv[2]
model = tf.AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).eval()
ok = type(model).__name__ == "MixtralForCausalLM"
print("class", type(model).__name__, "ok" if ok else "FAIL")
exp = load_file(os.path.join(fixture, "expected.safetensors"))
with torch.no_grad():
    logits = model(input_ids=exp["input.input_ids"]).logits
diff = float((logits - exp["output.logits"]).abs().max())
print(f"logits max |export - fixture| {diff:.3g}", "ok" if diff <= 1e-4 else "FAIL")
ok &= diff <= 1e-4
g = json.load(open(os.path.join(fixture, "expected.json")))["generate"]["greedy"]
kw = {k: (torch.tensor(v) if isinstance(v, list) else v) for k, v in g["kwargs"].items()}
with torch.no_grad():
    out = model.generate(**kw).tolist()
same = out == g["output_ids"]
print("greedy generate", "ok" if same else f"FAIL {out} vs {g['output_ids']}")
ok &= same
print("mixtral export check:", "ok" if ok else "FAIL")
sys.exit(0 if ok else 1)
