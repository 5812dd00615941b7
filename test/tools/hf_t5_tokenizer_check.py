"""Checks the SentencePiece ids of test/unit/tokenizers/sentencepiece_test.cpp against Hugging Face's
T5 tokenizer on the GPU machine (transformers there; sentencepiece when the slow tokenizer is used).
Usage: python3 test/tools/hf_t5_tokenizer_check.py [share/tokenizers/t5-austen/spiece.model]
Exit 0 when every case equals the test's ids followed by </s> (1)."""
import os
import shutil
import sys
import tempfile

import transformers

model = sys.argv[1] if len(sys.argv) > 1 else "share/tokenizers/t5-austen/spiece.model"
cases = {
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.":
        [208, 52, 11, 832, 125, 158, 24, 4, 72, 41, 871, 21, 3, 35, 11, 45, 13, 88, 238, 15, 83, 18, 4, 95, 4, 4, 120, 9,
         11, 179, 739, 3, 117, 23, 15, 310, 9, 11, 630, 6],
    "Elizabeth  Bennet smiled;   Mr. Darcy did not.": [301, 538, 590, 21, 22, 81, 6, 451, 177, 27, 6],
    "It is a truth <extra_id_0> acknowledged.": [208, 52, 11, 832, 1099, 871, 21, 6],
}
failures = 0
for cls_name in ("T5Tokenizer", "T5TokenizerFast"):
    try:
        # transformers 5 builds a tokenizer from a folder (converting spiece.model); a bare
        # vocab_file argument gives an empty vocabulary there.
        folder = tempfile.mkdtemp()
        shutil.copy(model, os.path.join(folder, "spiece.model"))
        tok = getattr(transformers, cls_name).from_pretrained(folder, extra_ids=100, legacy=False)
    except Exception as e:  # noqa: BLE001 - report which class could not be built, go on
        print(f"{cls_name}: not available here ({type(e).__name__}: {e})")
        continue
    for text, ids in cases.items():
        got = tok(text).input_ids
        ok = got == ids + [1]
        failures += 0 if ok else 1
        print(f"{cls_name} {'ok  ' if ok else 'DIFF'} {text[:40]!r}: {got if not ok else len(got)}")
try:
    import sentencepiece as spm  # the library HF's slow T5Tokenizer wraps
    sp = spm.SentencePieceProcessor(model_file=model)
    for text, ids in list(cases.items())[:2]:
        got = sp.encode(text)
        failures += 0 if got == ids else 1
        print(f"sentencepiece {'ok  ' if got == ids else 'DIFF'} {text[:40]!r}: {got if got != ids else len(got)}")
except ImportError:
    print("sentencepiece (python): not installed here")
print("hf_t5_tokenizer_check:", "PASS" if failures == 0 else f"{failures} differ")
sys.exit(1 if failures else 0)
