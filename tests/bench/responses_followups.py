#!/usr/bin/python3
"""Follow-up latency on the Responses API: a conversation continued with previous_response_id
(the stored state is forked; only the new input is computed) against the same conversation
re-sent whole each turn (store false, the history as input items: what a client of a server
without stored state does). Streams each turn and times the first output_text delta (TTFT) and
the whole turn; prints one row per turn and the ratio at the last turn, both ways measured in
the same run on the same server.

usage: responses_followups.py LINFER_BINARY SOURCE_DIR [TURNS] [WORDS_PER_TURN] [REPEATS]
"""
import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server  # noqa: E402

BASE = {"model": "tiny", "temperature": 0, "max_output_tokens": 16, "ignore_eos": True,
        "reasoning": {"effort": "none"}, "stream": True}
WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from "
         "at which but have an they you were her she there been one all we their").split()


def turn_text(turn, words):
    return " ".join(WORDS[(turn * 7 + i) % len(WORDS)] for i in range(words))


def stream(port, body):
    """(seconds to the first text delta, seconds to the end, the final response)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    start = time.perf_counter()
    c.request("POST", "/v1/responses", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, final, buf = None, None, b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            for line in block.split(b"\n"):
                if not line.startswith(b"data: "):
                    continue
                e = json.loads(line[6:])
                if e["type"] == "response.output_text.delta" and first is None:
                    first = time.perf_counter() - start
                if e["type"] in ("response.completed", "response.incomplete"):
                    final = e["response"]
    c.close()
    if final is None:
        raise RuntimeError(f"turn failed: {buf[-300:]!r}")
    return first, time.perf_counter() - start, final


def conversation(port, turns, words, stored):
    rows, history, previous = [], [], None
    for t in range(turns):
        user = {"role": "user", "content": turn_text(t, words)}
        if stored:
            body = {**BASE, "input": [user]}
            if previous:
                body["previous_response_id"] = previous
        else:
            body = {**BASE, "input": history + [user], "store": False}
        ttft, total, r = stream(port, body)
        reply = "".join(c["text"] for o in r["output"] if o["type"] == "message"
                        for c in o["content"])
        history += [user, {"role": "assistant", "content": reply}]
        previous = r["id"]
        rows.append((r["usage"]["input_tokens"], r["usage"]["input_tokens_details"]["cached_tokens"],
                     ttft, total))
    return rows


def main():
    binary, source_dir = sys.argv[1], sys.argv[2]
    turns = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    words = int(sys.argv[4]) if len(sys.argv) > 4 else 60
    repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    model = os.path.join(source_dir, "models", "tiny")
    template = os.path.join(source_dir, "tests", "data", "chat_templates", "qwen3.5.jinja")
    with Server(binary, model, "--chat_template", template, "--log_stats_interval_s", "0",
                "--prefix_cache_mb", "0") as srv:
        conversation(srv.http_port, 2, words, True)  # warm-up
        runs = {True: [], False: []}
        for _ in range(repeats):  # interleaved, so both ways see the same machine
            for stored in (True, False):
                runs[stored].append(conversation(srv.http_port, turns, words, stored))
    print(f"{turns} turns of {words} words, {repeats} runs each way, median per turn "
          f"(tiny model, CPU; prefix cache off)")
    print("turn  input tokens  cached  TTFT stored ms  TTFT re-sent ms  ratio  turn stored ms  "
          "turn re-sent ms")
    for t in range(turns):
        med = lambda stored, k: statistics.median(run[t][k] for run in runs[stored])  # noqa: E731
        ttft_s, ttft_r = med(True, 2) * 1e3, med(False, 2) * 1e3
        print(f"{t + 1:4d}  {runs[False][0][t][0]:12d}  {runs[True][0][t][1]:6d}  {ttft_s:14.1f}  "
              f"{ttft_r:15.1f}  {ttft_r / ttft_s:5.2f}  {med(True, 3) * 1e3:14.1f}  "
              f"{med(False, 3) * 1e3:15.1f}")
    last = turns - 1
    ratio = (statistics.median(r[last][2] for r in runs[False]) /
             statistics.median(r[last][2] for r in runs[True]))
    print(f"last turn: re-sent TTFT / previous_response_id TTFT = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
