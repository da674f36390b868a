"""HTTP helpers of the OpenAI API tests: curl for raw SSE, one POST on a fresh connection, the
error shape, a completion's text and usage."""
import http.client
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import check  # noqa: E402

KEY, OTHER = "alice-key-0001", "bob-key-000001"


def curl(port, path, body=None, key=KEY, extra=()):
    cmd = ["curl", "-sN", "-D", "-", "--max-time", "60", f"http://127.0.0.1:{port}{path}"]
    if key:
        cmd += ["-H", f"Authorization: Bearer {key}"]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    cmd += list(extra)
    out = subprocess.run(cmd, capture_output=True, timeout=90).stdout
    head, _, rest = out.partition(b"\r\n\r\n")
    return head.decode(errors="replace"), rest


def post(port, path, body, key=KEY, timeout=60):
    """(status, lower-cased headers, body bytes) of one POST on a fresh connection."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=data, headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def check_error(what, got, status, err_type):
    """`got` = post(...): status and OpenAI's {"error": {message, type, param, code}} shape."""
    st, headers, body = got
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        e = None
    check(st == status, f"{what}: HTTP {status} ({st} {body[:120]!r})")
    check(headers.get("content-type", "").startswith("application/json"),
          f"{what}: JSON content type ({headers.get('content-type')})")
    check(isinstance(e, dict) and set(e) >= {"message", "type", "param", "code"} and
          e["type"] == err_type and e["code"] == status and e["message"],
          f"{what}: OpenAI error shape with type {err_type} ({body[:200]!r})")


def completion(port, key=KEY, **fields):
    body = {"prompt": "Once upon a time", "ignore_eos": True, **fields}
    st, _, raw = post(port, "/v1/completions", body, key=key)
    out = json.loads(raw) if st == 200 else {}
    return st, out.get("choices", [{}])[0].get("text"), out.get("usage", {})
