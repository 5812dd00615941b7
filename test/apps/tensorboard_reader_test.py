#!/usr/bin/env python3
"""TensorBoard event files from tessera-train (logging.tensorboard_dir), read back by a reader written
here from the TFRecord and protobuf wire-format specs (no tensorflow/tensorboard/protobuf package):
every record's length and data CRC (masked CRC-32C) must check, the first event must be
file_version "brain.Event:2", and every scalar must equal metrics_file's value rounded to float32
(TensorBoard's simple_value is a float). A corrupted byte must be caught by the CRC check.

usage: tensorboard_reader_test.py BIN_DIR MPIEXEC WORK_DIR
"""
import glob
import json
import math
import os
import shutil
import struct
import subprocess
import sys

BIN, MPIEXEC, WORK = os.path.abspath(sys.argv[1]), sys.argv[2], os.path.abspath(sys.argv[3])
failures = []


def check(ok, what):
    """what: the claim, then "|| " and the output that only a failure shows."""
    print(("ok   " + what.split("|| ")[0]) if ok else ("FAIL " + what), flush=True)
    if not ok:
        failures.append(what)


def crc32c(data):  # bitwise CRC-32C (Castagnoli, reflected polynomial 0x82F63B78)
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    """TFRecord: uint64 length, uint32 masked crc of the length bytes, data, uint32 masked crc of data."""
    out, pos = [], 0
    while pos < len(blob):
        if pos + 12 > len(blob):
            raise ValueError("truncated record header at byte %d" % pos)
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if length_crc != masked(header):
            raise ValueError("length CRC mismatch at byte %d" % pos)
        data = blob[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        if len(data) != length or data_crc != masked(data):
            raise ValueError("data CRC mismatch at byte %d" % pos)
        out.append(data)
        pos += 16 + length
    return out


def varint(buf, pos):
    value, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def fields(buf):
    """Protobuf wire format -> list of (field number, wire type, value)."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unexpected wire type %d" % wire)
        out.append((number, wire, value))
    return out


def parse_event(data):
    """Event: wall_time=1 (double), step=2 (int64), file_version=3 (string), summary=5 (Summary:
    value=1 repeated Value: tag=1 string, simple_value=2 float)."""
    event = {"step": 0, "scalars": {}}
    for number, wire, value in fields(data):
        if number == 1 and wire == 1:
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            event["step"] = value
        elif number == 3 and wire == 2:
            event["file_version"] = value.decode()
        elif number == 5 and wire == 2:
            for n, w, v in fields(value):
                if n != 1 or w != 2:
                    continue
                tag, scalar = None, None
                for n2, w2, v2 in fields(v):
                    if n2 == 1 and w2 == 2:
                        tag = v2.decode()
                    elif n2 == 2 and w2 == 5:
                        scalar = struct.unpack("<f", v2)[0]
                event["scalars"][tag] = scalar
    return event


def f32(x):
    return float("nan") if x is None else struct.unpack("<f", struct.pack("<f", x))[0]


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


check(crc32c(b"123456789") == 0xE3069283, "reader's CRC-32C of '123456789' is 0xE3069283")

shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
common = ["--set", "model.num_layers=2", "--set", "model.hidden_size=32", "--set", "model.num_attention_heads=4",
          "--set", "model.seq_length=16", "--set", "model.max_position_embeddings=16", "--set", "data.mock_data=true",
          "--set", "data.vocab_size=64", "--set", "training.micro_batch_size=1", "--set", "training.global_batch_size=2",
          "--set", "training.train_iters=4", "--set", "training.eval_interval=2", "--set", "training.eval_iters=1",
          "--set", "training.device=cpu", "--set", "training.precision=fp32", "--set", "logging.log_interval=1",
          "--set", "optimizer.lr_warmup_iters=1"]
for ranks in [1, 2]:
    name = "np%d" % ranks
    tb, metrics = os.path.join(WORK, name, "tb"), os.path.join(WORK, name + ".jsonl")
    os.makedirs(os.path.join(WORK, name))
    args = [MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-np", str(ranks), os.path.join(BIN, "tessera-train")]
    p = subprocess.run(args + common + ["--set", "logging.tensorboard_dir=" + tb, "--set", "logging.metrics_file=" + metrics],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    check(p.returncode == 0, name + ": tessera-train exits 0|| " + p.stdout[-300:])
    files = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
    check(len(files) == 1, name + ": one event file (the output rank's): %s" % files)
    if len(files) != 1:
        continue
    blob = open(files[0], "rb").read()
    try:
        events = [parse_event(r) for r in records(blob)]
    except ValueError as e:
        check(False, name + ": records and CRCs check: %s" % e)
        continue
    check(len(events) == 1 + 4 + 2 + 1,
          name + ": %d records: file_version + 4 iterations + 2 evaluations + the test split" % len(events))
    check(events[0].get("file_version") == "brain.Event:2", name + ": first event is file_version brain.Event:2")
    check(all(e.get("wall_time", 0) > 1.6e9 for e in events), name + ": every event has a wall_time")
    rows = [json.loads(line) for line in open(metrics)]
    train_events = [e for e in events[1:] if "lm loss" in e["scalars"]]
    eval_events = [e for e in events[1:] if "lm loss validation" in e["scalars"]]
    train_rows = [r for r in rows if "lm_loss" in r]
    eval_rows = [r for r in rows if "eval_loss" in r]
    test_events = [e for e in events[1:] if "lm loss test" in e["scalars"]]
    test_rows = [r for r in rows if "test_loss" in r]
    check(len(test_events) == len(test_rows) == 1, name + ": one test-split event and metrics row at the end")
    check(len(train_events) == len(train_rows) == 4 and len(eval_events) == len(eval_rows) == 2,
          name + ": as many iteration / evaluation events as metrics rows")
    pairs = {"lm loss": "lm_loss", "learning-rate": "learning_rate", "grad-norm": "grad_norm", "loss-scale": "loss_scale",
             "throughput/tokens-per-second": "tokens_per_second", "throughput/tflops-per-gpu": "tflops_per_gpu",
             "iteration-time-ms": "elapsed_ms", "mem-max-allocated-bytes": "peak_memory_bytes"}
    compared = 0
    for e, r in zip(train_events, train_rows):
        check(e["step"] == r["iteration"], name + ": step %d = iteration %d" % (e["step"], r["iteration"]))
        for tag, key in pairs.items():
            ok = tag in e["scalars"] and same(e["scalars"][tag], f32(r[key]))
            compared += ok
            if not ok:
                check(False, name + ": iteration %d %s = %s, metrics_file %s = %s" % (r["iteration"], tag,
                      e["scalars"].get(tag), key, r[key]))
    for e, r in zip(eval_events, eval_rows):
        for tag, key in {"lm loss validation": "eval_loss", "lm loss validation ppl": "eval_perplexity"}.items():
            ok = e["step"] == r["iteration"] and same(e["scalars"][tag], f32(r[key]))
            compared += ok
            if not ok:
                check(False, name + ": eval at %d %s = %s, metrics_file %s = %s" % (r["iteration"], tag,
                      e["scalars"][tag], key, r[key]))
    for e, r in zip(test_events, test_rows):
        for tag, key in {"lm loss test": "test_loss", "lm loss test ppl": "test_perplexity"}.items():
            ok = e["step"] == r["iteration"] and same(e["scalars"][tag], f32(r[key]))
            compared += ok
            if not ok:
                check(False, name + ": test split at %d %s = %s, metrics_file %s = %s" % (r["iteration"], tag,
                      e["scalars"][tag], key, r[key]))
    check(compared == 4 * len(pairs) + 2 * 2 + 2, name + ": %d scalars equal metrics_file's (float32)" % compared)
    check(train_rows[-1]["peak_memory_bytes"] > 0, name + ": peak memory is reported (%d bytes)" % train_rows[-1]["peak_memory_bytes"])
    # The CRC check can fail: one flipped byte inside the last record's data is caught.
    corrupt = bytearray(blob)
    corrupt[-10] ^= 0x01
    try:
        records(bytes(corrupt))
        check(False, name + ": a flipped byte is caught by the data CRC")
    except ValueError:
        check(True, name + ": a flipped byte is caught by the data CRC")

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
