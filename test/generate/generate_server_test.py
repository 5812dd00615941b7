#!/usr/bin/env python3
"""tessera-generate --serve on 127.0.0.1 (an ephemeral port) with the HF GPT-2 fixture and the GPT-2
tokenizer: valid requests (greedy equals the batch CLI), malformed JSON, huge tokens_to_generate,
wrong types, empty prompts, an oversized body, a wrong method, concurrent clients, and that it still
serves afterwards (and never exited). Usage: generate_server_test.py single | tp2 MPIEXEC.
Prints "generate_server <mode>: ok" only when every check passed."""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

BIN = os.environ.get("TESSERA_BIN_DIR", "build/bin")
SHARED = os.environ.get("TESSERA_SHARED_DIR", "../shared")
HF = os.path.join(SHARED, "fixtures", "hf", "gpt2", "hf")
TOK = os.path.join(SHARED, "data", "tokenizers", "gpt2")
SETS = ["--set", 'data.tokenizer_type="GPT2BPETokenizer"', "--set", 'data.vocab_file="%s/vocab.json"' % TOK,
        "--set", 'data.merge_file="%s/merges.txt"' % TOK]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, flush=True)


def request(port, body, method="PUT", raw=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    data = raw if raw is not None else json.dumps(body).encode()
    conn.request(method, "/api", body=data, headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    text = res.read().decode()
    conn.close()
    try:
        return res.status, json.loads(text)
    except ValueError:
        return res.status, text


def main():
    mode = sys.argv[1]
    cmd = [os.path.join(BIN, "tessera-generate"), "--load", HF, "--serve", "--port", "0"] + SETS
    if mode == "tp2":
        cmd = [sys.argv[2], "--oversubscribe", "--allow-run-as-root", "-np", "2"] + cmd + [
            "--set", "parallel.tensor_model_parallel_size=2"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    lines = []
    deadline = time.time() + 120
    while time.time() < deadline and port is None:
        line = server.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"serving PUT http://127\.0\.0\.1:(\d+)/api", line)
        if m:
            port = int(m.group(1))
    threading.Thread(target=lambda: [lines.append(l) for l in server.stdout], daemon=True).start()
    check(port is not None, "server did not start: " + "".join(lines[-20:]))
    if port is None:
        server.kill()
        sys.exit(1)
    try:
        # The batch CLI's greedy answer (one rank) is what the server must reply.
        cli = subprocess.run([os.path.join(BIN, "tessera-generate"), "--load", HF, "--prompt", "Hello world",
                              "--prompt", "The quick brown fox jumps", "--max-new-tokens", "6"] + SETS,
                             capture_output=True, text=True, timeout=300)
        check(cli.returncode == 0, "batch CLI: " + cli.stderr[-500:])
        expected = [json.loads(l)["text"] for l in cli.stdout.splitlines() if l.strip()]
        valid = {"prompts": ["Hello world", "The quick brown fox jumps"], "tokens_to_generate": 6, "top_k": 1,
                 "logprobs": True}
        status, body = request(port, valid)
        check(status == 200 and body.get("text") == expected, "greedy reply %s %s != CLI %s" % (status, body, expected))
        if status == 200:
            check(len(body["segments"]) == 2 and "".join(body["segments"][0]) == body["text"][0], "segments join to text")
            check(len(body["logprobs"]) == 2 and all(x <= 0 for x in body["logprobs"][0]), "logprobs returned")
            check(len(body["logprobs"][0]) == len(body["segments"][0]) - 1, "a logprob per token after the first")
        status, body = request(port, {"prompts": ["Hello"], "tokens_to_generate": 4, "temperature": 0.7, "top_p": 0.9,
                                      "top_p_decay": 0.5, "top_p_bound": 0.2, "random_seed": 3})
        check(status == 200 and body.get("logprobs") is None, "sampled request: %s %s" % (status, body))
        status, body = request(port, {"prompts": ["Hello world"], "tokens_to_generate": 4, "beam_width": 2,
                                      "length_penalty": 1.0})
        check(status == 200 and len(body.get("text", [])) == 1, "beam request: %s %s" % (status, body))
        bad = [("malformed JSON", None, b'{"prompts": ["a"'),
               ("not an object", ["a"], None),
               ("huge tokens_to_generate", {"prompts": ["a"], "tokens_to_generate": 10 ** 12}, None),
               ("tokens beyond the positions", {"prompts": ["a"], "tokens_to_generate": 1000}, None),
               ("string tokens_to_generate", {"prompts": ["a"], "tokens_to_generate": "5"}, None),
               ("prompts not a list", {"prompts": "a"}, None),
               ("prompt not a string", {"prompts": [5]}, None),
               ("float top_k", {"prompts": ["a"], "top_k": 1.5}, None),
               ("string logprobs", {"prompts": ["a"], "logprobs": "yes"}, None),
               ("negative temperature", {"prompts": ["a"], "temperature": -1}, None),
               ("top_k with top_p", {"prompts": ["a"], "top_k": 5, "top_p": 0.5}, None),
               ("empty prompts", {"prompts": []}, None),
               ("empty prompt", {"prompts": [""]}, None),
               ("missing prompts", {"tokens_to_generate": 3}, None),
               ("too many prompts", {"prompts": ["a"] * 129}, None),
               ("beam with two prompts", {"prompts": ["a", "b"], "beam_width": 2}, None),
               ("unknown key", {"prompts": ["a"], "temprature": 1.0}, None),
               ("stop_token outside the vocabulary", {"prompts": ["a"], "stop_token": 10 ** 6}, None)]
        for name, body, raw in bad:
            status, reply = request(port, body, raw=raw)
            check(status == 400 and isinstance(reply, dict) and reply.get("message"),
                  "%s: expected 400 with a message, got %s %s" % (name, status, reply))
        # An oversized body is refused from its Content-Length, before it is read.
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{"
                      % (2 << 20))
            head = s.recv(4096).decode(errors="replace")
        check(head.startswith("HTTP/1.1 413"), "oversized body: %s" % head[:100])
        status, _ = request(port, None, method="GET", raw=b"")
        check(status == 405, "GET /api: %s" % status)
        status, body = request(port, {"prompts": [""], "add_BOS": True, "tokens_to_generate": 2, "top_k": 1})
        check(status == 200, "empty prompt with add_BOS: %s %s" % (status, body))
        # Concurrent clients: served one at a time, each gets the right answer.
        replies = [None] * 6

        def client(i):
            replies[i] = request(port, valid)
        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(replies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(all(r and r[0] == 200 and r[1]["text"] == expected for r in replies), "concurrent replies: %s" % replies)
        # Still serving, and never exited.
        status, body = request(port, valid)
        check(status == 200 and body.get("text") == expected, "after the bad requests: %s" % status)
        check(server.poll() is None, "the server exited: " + "".join(lines[-20:]))
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    if failures:
        print("generate_server %s: %d failures" % (mode, len(failures)))
        sys.exit(1)
    print("generate_server %s: ok" % mode)


if __name__ == "__main__":
    main()
