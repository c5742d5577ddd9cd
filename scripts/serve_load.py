#!/usr/bin/env python3
"""A mixed load against a running `ladder serve` (or a disaggregated pair's
decode server): some clients send long prompts with short answers (prefill
bursts), others stream long generations from short prompts. Closed loop:
each client sends its next request as soon as its last one finished.

Reports, as one JSON line: the streams' inter-token latency (the gap
between consecutive streamed events, each usually one token) at p50 and
p99, generated tokens/s of the streams, prompt tokens/s of the long-prompt
clients, and their time to answer at p50.

  scripts/serve_load.py --url http://127.0.0.1:8080 --duration 60
"""
import argparse
import http.client
import json
import random
import threading
import time
import urllib.parse


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def post(url, body, stream):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    return conn, resp


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--duration", type=float, default=60, help="seconds of load")
    ap.add_argument("--prefill-clients", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=768, help="long prompts (bytes)")
    ap.add_argument("--stream-clients", type=int, default=4)
    ap.add_argument("--output-tokens", type=int, default=128, help="streamed generations")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    lock = threading.Lock()
    gaps, answers = [], []
    counts = {"stream_tokens": 0, "prompt_tokens": 0, "errors": 0}
    first_error = []
    end = time.monotonic() + a.duration

    def prefill_client(i):
        rng = random.Random(a.seed * 1000 + i)
        while time.monotonic() < end:
            prompt = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(a.prompt_tokens))
            t0 = time.monotonic()
            try:
                conn, resp = post(a.url, {"prompt": prompt, "max_tokens": 4, "temperature": 0}, False)
                usage = json.loads(resp.read())["usage"]
                conn.close()
            except Exception as e:  # counted; the load goes on
                with lock:
                    counts["errors"] += 1
                    first_error.append(str(e))
                continue
            with lock:
                answers.append(time.monotonic() - t0)
                counts["prompt_tokens"] += usage["prompt_tokens"]

    def stream_client(i):
        while time.monotonic() < end:
            body = {"prompt": f"Stream {i}:", "max_tokens": a.output_tokens, "temperature": 0,
                    "stream": True}
            try:
                conn, resp = post(a.url, body, True)
                last, mine, n = None, [], 0
                for line in resp:
                    if not line.startswith(b"data: {"):
                        continue
                    now = time.monotonic()
                    if b'"text":""' in line:  # the finish event carries no token
                        continue
                    n += 1
                    if last is not None:
                        mine.append(now - last)
                    last = now
                conn.close()
            except Exception as e:
                with lock:
                    counts["errors"] += 1
                    first_error.append(str(e))
                continue
            with lock:
                gaps.extend(mine)
                counts["stream_tokens"] += n

    threads = [threading.Thread(target=prefill_client, args=(i,)) for i in range(a.prefill_clients)]
    threads += [threading.Thread(target=stream_client, args=(i,)) for i in range(a.stream_clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    print(json.dumps({
        "itl_p50_ms": round(1000 * percentile(gaps, 50), 1),
        "itl_p99_ms": round(1000 * percentile(gaps, 99), 1),
        "stream_tokens_per_s": round(counts["stream_tokens"] / wall, 1),
        "prompt_tokens_per_s": round(counts["prompt_tokens"] / wall, 1),
        "long_prompt_answer_p50_s": round(percentile(answers, 50), 3),
        "long_prompts": len(answers),
        "errors": counts["errors"],
        "first_error": first_error[0] if first_error else None,
        "seconds": round(wall, 1),
    }))


if __name__ == "__main__":
    main()
