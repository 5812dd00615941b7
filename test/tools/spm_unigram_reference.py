#!/usr/bin/env python3
"""An independent reference for the SentencePiece ids in test/unit/tokenizers/sentencepiece_test.cpp.

Reads a unigram SentencePiece .model file with a hand-written protobuf wire-format reader (no
sentencepiece or protobuf package) and encodes ASCII text as SentencePiece's unigram model does:
nmt_nfkc normalisation of ASCII (trim, collapse whitespace, a "▁" dummy prefix, spaces -> "▁"),
then the Viterbi segmentation maximising the sum of piece scores over NORMAL and USER_DEFINED
pieces (an unknown character costs min score - 10, as sentencepiece's kUnkPenalty). Prints the ids
and pieces, and HF's T5Tokenizer input_ids (the ids, then </s>).

usage: spm_unigram_reference.py MODEL "text"
"""
import struct
import sys


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def pieces(path):
    out = []
    with open(path, "rb") as f:
        model = f.read()
    for number, _, value in fields(model):
        if number != 1:  # ModelProto.pieces
            continue
        piece, score, kind = "", 0.0, 1
        for n, _, v in fields(value):
            if n == 1:
                piece = v.decode("utf-8")
            elif n == 2:
                score = struct.unpack("<f", v)[0]
            elif n == 3:
                kind = v
        out.append((piece, score, kind))
    return out


def encode(model_pieces, text):
    normalized = "\u2581" + "\u2581".join(text.split())
    usable = {p: (i, s) for i, (p, s, kind) in enumerate(model_pieces) if kind in (1, 4)}
    unk = next(i for i, (_, _, kind) in enumerate(model_pieces) if kind == 2)
    unk_score = min(s for _, s, kind in model_pieces if kind == 1) - 10.0
    longest = max(len(p) for p in usable)
    n = len(normalized)
    best = [(-1e300, None, None)] * (n + 1)  # (score, start, id)
    best[0] = (0.0, None, None)
    for end in range(1, n + 1):
        for start in range(max(0, end - longest), end):
            if best[start][0] <= -1e299:
                continue
            piece = normalized[start:end]
            if piece in usable:
                pid, score = usable[piece]
            elif end - start == 1:
                pid, score = unk, unk_score
            else:
                continue
            total = best[start][0] + score
            if total > best[end][0]:
                best[end] = (total, start, pid)
    ids, end = [], n
    while end > 0:
        _, start, pid = best[end]
        ids.append(pid)
        end = start
    return ids[::-1]


def main():
    model_pieces = pieces(sys.argv[1])
    ids = encode(model_pieces, sys.argv[2])
    eos = next(i for i, (p, _, _) in enumerate(model_pieces) if p == "</s>")
    print("ids:", ids)
    print("pieces:", [model_pieces[i][0] for i in ids])
    print("HF T5Tokenizer input_ids:", ids + [eos])


if __name__ == "__main__":
    main()
