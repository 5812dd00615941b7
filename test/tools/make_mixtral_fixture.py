"""Tiny random Mixtral fixture for Tessera's MoE HF import/export tests (issue 19, acceptance 4).

Builds a MixtralForCausalLM (2 layers, hidden 64, 4 heads, 2 KV heads, 4 experts, top-2,
expert FFN 96, vocab 256; float32, fixed seed) and writes, under OUTDIR/mixtral/:
  hf/                 config.json + model.safetensors in the hub's Mixtral layout
                      (block_sparse_moe.gate / block_sparse_moe.experts.E.{w1,w2,w3})
  hf-sharded/         the same tensors in several shards with model.safetensors.index.json
  expected.safetensors  input.input_ids and output.logits (HF forward, fp32, CPU)
  expected.json       versions, seed, greedy generate output, and what save_pretrained wrote
Transformers 5 keeps the experts fused in memory (gate_up_proj / down_proj) and may save them so;
this script always writes the per-expert hub layout that published Mixtral checkpoints use, and
checks that transformers loads it back to the same logits (so the layout is the one HF reads).
Usage: python3 make_mixtral_fixture.py OUTDIR [SEED]   (no network needed; CPU is enough)
"""
import json, os, shutil, sys
import torch
from safetensors.torch import save_file, load_file
import transformers as tf

out = os.path.join(sys.argv[1], "mixtral")
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1234
torch.manual_seed(seed)
L, H, NH, KV, E, K, FF, V = 2, 64, 4, 2, 4, 2, 96, 256
cfg = tf.MixtralConfig(vocab_size=V, hidden_size=H, intermediate_size=FF, num_hidden_layers=L,
                       num_attention_heads=NH, num_key_value_heads=KV, max_position_embeddings=256,
                       num_local_experts=E, num_experts_per_tok=K, router_aux_loss_coef=0.02,
                       rms_norm_eps=1e-5, rope_theta=1e6, sliding_window=None, tie_word_embeddings=False)
rp = getattr(cfg, "rope_parameters", None)
if isinstance(rp, dict):
    rp["rope_theta"] = 1e6
model = tf.MixtralForCausalLM(cfg).eval()
# Random init leaves the norms at 1: perturb them so a swapped norm would show in the logits.
with torch.no_grad():
    for n, p in model.named_parameters():
        if n.endswith("layernorm.weight") or n == "model.norm.weight":
            p.add_(0.1 * torch.randn_like(p))
        if n.endswith("gate.weight") or "router" in n:
            p.mul_(20.0)  # spread the router scores so top-2 choices are not near ties

native = os.path.join(out, "native")
model.save_pretrained(native, safe_serialization=True)
saved = {}
for f in sorted(os.listdir(native)):
    if f.endswith(".safetensors"):
        saved.update(load_file(os.path.join(native, f)))
print("save_pretrained wrote", {k: tuple(v.shape) for k, v in saved.items() if "layers.0." in k})

def hub_layout(sd):
    """Per-expert Mixtral names from whatever layout the model / save_pretrained used."""
    res = {}
    for k, v in sd.items():
        if ".experts." not in k and not k.endswith(".gate.weight") and ".router." not in k:
            res[k] = v.contiguous()
    for i in range(L):
        pre = f"model.layers.{i}."
        legacy = pre + "block_sparse_moe.experts.0.w1.weight"
        if legacy in sd:
            for k, v in sd.items():
                if k.startswith(pre + "block_sparse_moe."):
                    res[k] = v.contiguous()
            continue
        gu = [k for k in sd if k.startswith(pre) and k.endswith("experts.gate_up_proj")]
        dn = [k for k in sd if k.startswith(pre) and k.endswith("experts.down_proj")]
        gt = [k for k in sd if k.startswith(pre) and (k.endswith("mlp.gate.weight") or k.endswith("block_sparse_moe.gate.weight") or k.endswith("router.weight"))]
        assert len(gu) == 1 and len(dn) == 1 and len(gt) == 1, (i, gu, dn, gt)
        g, d = sd[gu[0]], sd[dn[0]]
        if g.shape[1:] == (H, 2 * FF):
            g = g.transpose(1, 2)
        if d.shape[1:] == (FF, H):
            d = d.transpose(1, 2)
        assert g.shape == (E, 2 * FF, H) and d.shape == (E, H, FF), (g.shape, d.shape)
        res[pre + "block_sparse_moe.gate.weight"] = sd[gt[0]].contiguous()
        for e in range(E):
            b = pre + f"block_sparse_moe.experts.{e}."
            res[b + "w1.weight"] = g[e, :FF].contiguous()
            res[b + "w3.weight"] = g[e, FF:].contiguous()
            res[b + "w2.weight"] = d[e].contiguous()
    return res

hub = hub_layout({k: v.detach().clone() for k, v in model.state_dict().items()})
assert "lm_head.weight" in hub
d1, d2 = os.path.join(out, "hf"), os.path.join(out, "hf-sharded")
for d in (d1, d2):
    os.makedirs(d, exist_ok=True)
    for f in ("config.json", "generation_config.json"):
        if os.path.exists(os.path.join(native, f)):
            shutil.copy(os.path.join(native, f), d)
save_file(hub, os.path.join(d1, "model.safetensors"), metadata={"format": "pt"})
# shards of about 200 KB, split by tensor in sorted-name order, with the HF index file
shards, cur, size = [], {}, 0
for k in sorted(hub):
    nb = hub[k].numel() * 4
    if cur and size + nb > 200_000:
        shards.append(cur); cur, size = {}, 0
    cur[k] = hub[k]; size += nb
shards.append(cur)
wmap = {}
for j, s in enumerate(shards):
    fn = f"model-{j + 1:05d}-of-{len(shards):05d}.safetensors"
    save_file(s, os.path.join(d2, fn), metadata={"format": "pt"})
    wmap.update({k: fn for k in s})
json.dump({"metadata": {"total_size": sum(v.numel() * 4 for v in hub.values())}, "weight_map": wmap},
          open(os.path.join(d2, "model.safetensors.index.json"), "w"), indent=2)

ids = torch.randint(0, V, (2, 21))
prompt = torch.randint(0, V, (2, 5))
with torch.no_grad():
    logits = model(input_ids=ids).logits.float()
    back = {}
    for d in (d1, d2, native):
        try:
            m2 = tf.MixtralForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
            back[os.path.basename(d)] = float((m2(input_ids=ids).logits - logits).abs().max())
        except Exception as ex:  # reported, and the run fails below
            back[os.path.basename(d)] = repr(ex)
    gen = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12,
                         do_sample=False, pad_token_id=0)
print("reload max |dlogit|", back)
ok = all(v == 0.0 for v in back.values())
save_file({"input.input_ids": ids.contiguous(), "output.logits": logits.contiguous()},
          os.path.join(out, "expected.safetensors"))
meta = {"transformers": tf.__version__, "torch": torch.__version__, "seed": seed,
        "save_pretrained_layer0_keys": sorted(k for k in saved if "layers.0." in k),
        "reload_max_abs_diff": back,
        "generate": {"greedy": {"kwargs": {"input_ids": prompt.tolist(), "attention_mask": torch.ones_like(prompt).tolist(),
                                           "max_new_tokens": 12, "do_sample": False, "pad_token_id": 0},
                                "output_ids": gen.tolist()}}}
json.dump(meta, open(os.path.join(out, "expected.json"), "w"), indent=1)
print("config.json", open(os.path.join(d1, "config.json")).read())
assert ok, back
shutil.rmtree(native)
print("wrote", out, "logits", tuple(logits.shape), "greedy", gen.tolist())
