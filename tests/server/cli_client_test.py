#!/usr/bin/env python3
"""Black-box tests of the command-line client against a real `linfer serve` on loopback:
`generate --server` (token ids equal the local greedy `generate --model`; seeds; stop strings;
text streaming), `chat` over one session with piped stdin, `sessions list|create|get|fork|delete|
export|import`, API keys and TLS, and the "linfer: error: CODE: message" exits.
Usage: cli_client_test.py LINFER_BINARY FIXTURES_DIR [SOURCE_DIR]"""
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Server, char_tokenizer_model, check, finish  # noqa: E402

BINARY = None
PROMPT = [5, 17, 42, 3, 88, 11]


def linfer(*args, stdin=None, env=None, timeout=120):
    return subprocess.run([BINARY, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=env)


def tokens_of(r):
    try:
        return json.loads(r.stdout)["tokens"]
    except (ValueError, KeyError):
        return None


def sessions(addr, *args, env=None):
    r = linfer("sessions", "--server", addr, *args, env=env)
    rows = []
    for line in r.stdout.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    return r, rows


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_generate(addr, model_dir):
    ids = ",".join(map(str, PROMPT))
    local = linfer("generate", "--model", model_dir, "--tokens", ids, "--max_tokens", "12",
                   "--temperature", "0")
    remote = linfer("generate", "--server", addr, "--tokens", ids, "--max_tokens", "12",
                    "--temperature", "0")
    check(local.returncode == 0, f"local generate: {local.stderr}")
    check(remote.returncode == 0, f"remote generate: {remote.stderr}")
    check(tokens_of(remote) is not None and len(tokens_of(remote)) == 12,
          f"remote generate prints 12 ids: {remote.stdout!r}")
    check(tokens_of(remote) == tokens_of(local),
          f"greedy: server {tokens_of(remote)} == local {tokens_of(local)}")
    check("6 prompt" in remote.stderr and "12 generated" in remote.stderr
          and remote.stderr.startswith("linfer: length"), f"usage line: {remote.stderr!r}")
    # top_k 1 at temperature 1 is greedy; equal seeds give equal samples.
    topk = linfer("generate", "--server", addr, "--tokens", ids, "--max_tokens", "12",
                  "--temperature", "1", "--top_k", "1")
    check(tokens_of(topk) == tokens_of(local), f"top_k 1 is greedy: {topk.stdout} {topk.stderr}")
    seeded = [linfer("generate", "--server", addr, "--tokens", ids, "--max_tokens", "16",
                     "--temperature", "1.5", "--top_p", "0.95", "--min_p", "0.01", "--seed", "7")
              for _ in range(2)]
    check(all(r.returncode == 0 for r in seeded), f"seeded: {seeded[0].stderr}")
    check(tokens_of(seeded[0]) == tokens_of(seeded[1]), "same seed, same tokens")
    # Text prompts need a tokenizer; gdn_default has none.
    r = linfer("generate", "--server", addr, "hello")
    check(r.returncode == 1 and "linfer: error: INVALID_ARGUMENT:" in r.stderr
          and "tokenizer" in r.stderr, f"text prompt without tokenizer: {r.stderr!r}")


def test_chat(addr):
    r, rows = sessions(addr, "create", "chat-1")
    check(r.returncode == 0 and rows and rows[0]["session_id"] == "chat-1"
          and rows[0]["tokens"] == 0, f"sessions create: {r.stdout} {r.stderr}")
    stdin = "/tokens 1,2,3\n\n/tokens 4,5\n/exit\n/tokens 6\n"
    c = linfer("chat", "--server", addr, "--session", "chat-1", "--max_tokens", "4", stdin=stdin)
    check(c.returncode == 0, f"chat exit: {c.returncode} {c.stderr}")
    lines = c.stdout.splitlines()
    check(len(lines) == 2 and all(len(l.split()) == 4 for l in lines),
          f"chat: two replies of 4 ids: {c.stdout!r}")
    check(c.stderr.count("linfer: length") == 2, f"chat: a usage line per turn: {c.stderr!r}")
    r, rows = sessions(addr, "get", "chat-1")
    # History: 3 + 4 generated + 2 + 4 generated (the last generated token may still be pending).
    check(r.returncode == 0 and rows and rows[0]["turns"] == 2 and rows[0]["tokens"] >= 12,
          f"chat session grew: {r.stdout}")
    before = rows[0]["tokens"] if rows else 0
    c = linfer("chat", "--server", addr, "--session", "chat-1", "--max_tokens", "2",
               stdin="/tokens 7\n")
    r, rows = sessions(addr, "get", "chat-1")
    check(c.returncode == 0 and rows and rows[0]["tokens"] > before and rows[0]["turns"] == 3,
          f"chat continues the session: {r.stdout} {c.stderr}")
    # Without --session, chat creates one and names it; it is deleted at the end unless
    # --keep_session.
    before = {row["session_id"] for row in sessions(addr, "list")[1]}
    c = linfer("chat", "--server", addr, "--max_tokens", "2", stdin="/tokens 9,9\n")
    check(c.returncode == 0 and "on session s-" in c.stderr, f"chat new session: {c.stderr!r}")
    after = {row["session_id"] for row in sessions(addr, "list")[1]}
    check(after == before, f"chat's own session deleted at the end: {after - before}")
    c = linfer("chat", "--server", addr, "--max_tokens", "2", "--keep_session",
               stdin="/tokens 9,9\n")
    kept = {row["session_id"] for row in sessions(addr, "list")[1]} - before
    check(c.returncode == 0 and len(kept) == 1 and f"--session {next(iter(kept), '?')}" in c.stderr,
          f"--keep_session: {kept} {c.stderr!r}")
    for gone in kept:
        sessions(addr, "delete", gone)
    # A bad turn reports the error, the next one still runs, and the exit code is 1.
    c = linfer("chat", "--server", addr, "--session", "chat-1", "--max_tokens", "2",
               stdin="/tokens 1,x\n/tokens 100000\n/tokens 1\n")
    check(c.returncode == 1 and "linfer: error: INVALID_ARGUMENT:" in c.stderr
          and len(c.stdout.splitlines()) == 1, f"chat errors: {c.stdout!r} {c.stderr!r}")
    c = linfer("chat", "--server", addr, "--session", "nope", stdin="/tokens 1\n")
    check(c.returncode == 1 and "linfer: error: NOT_FOUND:" in c.stderr,
          f"chat unknown session: {c.stderr!r}")


def test_sessions(addr, tmp):
    r, rows = sessions(addr, "create", "cli-a")
    check(r.returncode == 0, f"create cli-a: {r.stderr}")
    g = linfer("generate", "--server", addr, "--session", "cli-a", "--tokens", "1,2,3,4",
               "--max_tokens", "3", "--temperature", "0")
    check(g.returncode == 0, f"generate on a session: {g.stderr}")
    r, rows = sessions(addr, "list")
    ids = {row["session_id"]: row for row in rows}
    check(r.returncode == 0 and "cli-a" in ids and "chat-1" in ids, f"list: {r.stdout}")
    a_tokens = ids.get("cli-a", {}).get("tokens")
    check(a_tokens and a_tokens >= 6, f"cli-a has history: {a_tokens}")
    r, rows = sessions(addr, "fork", "cli-a", "cli-b")
    check(r.returncode == 0 and rows and rows[0]["session_id"] == "cli-b"
          and rows[0]["tokens"] == a_tokens, f"fork: {r.stdout} {r.stderr}")
    r, rows = sessions(addr, "fork", "cli-a")
    check(r.returncode == 0 and rows and rows[0]["session_id"].startswith("s-"),
          f"fork picks an id: {r.stdout} {r.stderr}")
    blob = os.path.join(tmp, "cli-a.state")
    r, _ = sessions(addr, "export", "cli-a", "--file", blob)
    check(r.returncode == 0 and os.path.getsize(blob) > 0, f"export: {r.stderr}")
    r, rows = sessions(addr, "import", "cli-c", "--file", blob)
    check(r.returncode == 0 and rows and rows[0]["session_id"] == "cli-c"
          and rows[0]["tokens"] == a_tokens, f"import: {r.stdout} {r.stderr}")
    # The fork and the import continue exactly like the original (greedy).
    outs = [tokens_of(linfer("generate", "--server", addr, "--session", s, "--tokens", "7",
                             "--max_tokens", "5", "--temperature", "0"))
            for s in ["cli-a", "cli-b", "cli-c"]]
    check(outs[0] is not None and outs[0] == outs[1] == outs[2],
          f"original, fork and import continue alike: {outs}")
    r, _ = sessions(addr, "delete", "cli-b")
    check(r.returncode == 0, f"delete: {r.stderr}")
    r, rows = sessions(addr, "list")
    check("cli-b" not in {row["session_id"] for row in rows}, "deleted session is not listed")
    r, _ = sessions(addr, "get", "cli-b")
    check(r.returncode == 1 and r.stderr.startswith("linfer: error: NOT_FOUND:"),
          f"get deleted: {r.stderr!r}")
    r, _ = sessions(addr, "delete", "cli-b")
    check(r.returncode == 1 and "NOT_FOUND" in r.stderr, f"delete twice: {r.stderr!r}")
    junk = os.path.join(tmp, "junk.state")
    with open(junk, "wb") as f:
        f.write(b"not a state blob" * 10)
    r, _ = sessions(addr, "import", "cli-d", "--file", junk)
    check(r.returncode == 1 and "linfer: error: INVALID_ARGUMENT:" in r.stderr,
          f"import junk: {r.stderr!r}")
    r, _ = sessions(addr, "create", "bad id!")
    check(r.returncode == 1 and "INVALID_ARGUMENT" in r.stderr, f"bad id: {r.stderr!r}")
    r, _ = sessions(addr, "create", "cli-a")
    check(r.returncode == 1 and "ALREADY_EXISTS" in r.stderr, f"create twice: {r.stderr!r}")
    for args in [[], ["frobnicate"], ["get"], ["export", "cli-a"], ["list", "extra"]]:
        r, _ = sessions(addr, *args)
        check(r.returncode == 1 and "linfer: error:" in r.stderr, f"sessions {args}: {r.stderr!r}")


def test_errors(addr):
    ids = ",".join(map(str, PROMPT))
    cases = [
        (["--top_p", "2"], "INVALID_ARGUMENT", "top_p"),
        (["--max_tokens", "0"], "INVALID_ARGUMENT", "max_tokens"),
        (["--session", "missing"], "NOT_FOUND", "missing"),
    ]
    for extra, code, word in cases:
        r = linfer("generate", "--server", addr, "--tokens", ids, *extra)
        check(r.returncode == 1 and f"linfer: error: {code}:" in r.stderr and word in r.stderr
              and r.stdout == "", f"generate {extra}: {r.stdout!r} {r.stderr!r}")
    r = linfer("generate", "--server", addr, "--tokens", "1,2", "x")
    check(r.returncode == 1 and "not both" in r.stderr, f"text and ids: {r.stderr!r}")
    r = linfer("generate", "--server", addr)
    check(r.returncode == 1 and "prompt" in r.stderr, f"no prompt: {r.stderr!r}")
    r = linfer("generate", "--server", f"127.0.0.1:{free_port()}", "--tokens", "1",
               "--timeout_s", "10")
    check(r.returncode == 1 and "linfer: error: UNAVAILABLE:" in r.stderr,
          f"no server: {r.stderr!r}")
    # A deadline too far to represent is no deadline (it was an instant DEADLINE_EXCEEDED).
    r = linfer("generate", "--server", addr, "--tokens", ids, "--max_tokens", "2",
               "--timeout_s", "1e300")
    check(r.returncode == 0, f"--timeout_s 1e300: {r.stderr!r}")
    r = linfer("generate", "--server", addr, "--tokens", "1", "--tls_ca", "/nonexistent.pem")
    check(r.returncode == 1 and "tls_ca" in r.stderr, f"missing CA file: {r.stderr!r}")
    # Named before anything is sent: a file that holds no certificate (gRPC failed every call with
    # "empty address list"), a key that cannot go in a header (gRPC aborted the process), a
    # string field that is not UTF-8 (the server refused the message unread, naming nothing).
    r = linfer("generate", "--server", addr, "--tokens", "1", "--tls_ca", __file__)
    check(r.returncode == 1 and f"--tls_ca {__file__}: not a PEM certificate" in r.stderr,
          f"a CA file that is not PEM: {r.stderr!r}")
    for key in ["bad\nkey", "caf\u00e9"]:
        r = linfer("generate", "--server", addr, "--tokens", "1", "--api_key", key)
        check(r.returncode == 1 and "must be printable ASCII" in r.stderr,
              f"--api_key {key!r}: exit {r.returncode}: {r.stderr!r}")
    r = linfer("generate", "--server", addr, b"\xff\xfe hello")
    check(r.returncode == 1 and "text: input is not valid UTF-8" in r.stderr,
          f"a prompt that is not UTF-8: {r.stderr!r}")
    r = linfer("generate", "--server", addr, "--tokens", "1", "--stop", b"ok,\xc3")
    check(r.returncode == 1 and "stop.stop[1]: input is not valid UTF-8" in r.stderr,
          f"a stop string that is not UTF-8: {r.stderr!r}")


def test_serve_errors(model_dir, tmp):
    """`serve` start-up failures exit 1 with a message (they used to crash in ~Server)."""
    short = os.path.join(tmp, "short-keys.txt")
    with open(short, "w") as f:
        f.write("short\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        cases = [(["--port", str(busy.getsockname()[1])], "cannot listen"),
                 (["--api_keys_file", short], "at least 8 characters"),
                 (["--tls_cert", "/nonexistent.pem", "--tls_key", short], "/nonexistent.pem"),
                 (["--tls_cert", short], "together"),
                 (["--port", "65537"], "--port must be 0 to 65535; got 65537"),
                 (["--http_port", "-7"], "--http_port must be -1 to 65535; got -7"),
                 (["--session_disk_dir", short], f"--session_disk_dir {short}: not a directory")]
        # A bad certificate or key, or a pair that does not belong together, is named as such
        # (gRPC only failed to listen: "cannot listen (address already in use ...)").
        first, second = make_tls(os.path.join(tmp, "a")), make_tls(os.path.join(tmp, "b"))
        if first and second:
            cases += [(["--tls_cert", short, "--tls_key", first[1]], "not a PEM certificate"),
                      (["--tls_cert", first[0], "--tls_key", short], "not an unencrypted PEM"),
                      (["--tls_cert", first[0], "--tls_key", second[1]],
                       "is not the key of the certificate")]
        else:
            print("note: openssl unavailable or failed: TLS pair checks skipped")
        for extra, word in cases:
            base = ["serve", "--model", model_dir, "--http_port", "0"]
            if "--port" not in extra:
                base += ["--port", "0"]
            r = linfer(*base, *extra, timeout=60)
            check(r.returncode == 1 and "linfer: error:" in r.stderr and word in r.stderr,
                  f"serve {extra}: exit {r.returncode}: {r.stderr[-300:]!r}")
    # A directory another server uses is refused before the weights load (here from a model
    # directory that could not load: the lock is named, not the model).
    locked, empty = os.path.join(tmp, "locked"), os.path.join(tmp, "not-a-model")
    os.makedirs(locked, exist_ok=True)
    os.makedirs(empty, exist_ok=True)
    with open(os.path.join(locked, ".linfer.lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for flag in ["--session_disk_dir", "--prefix_cache_disk_dir"]:
            r = linfer("serve", "--model", empty, "--port", "0", "--http_port", "0", flag, locked,
                       timeout=60)
            check(r.returncode == 1 and
                  f"{flag} {locked}: another linfer server uses this directory" in r.stderr,
                  f"serve {flag} on a locked directory: exit {r.returncode}: {r.stderr[-300:]!r}")


def make_tls(tmp):
    """A self-signed certificate for 127.0.0.1, or None without openssl."""
    if shutil.which("openssl") is None:
        return None
    os.makedirs(tmp, exist_ok=True)
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", key, "-out",
                        cert], capture_output=True, timeout=60)
    return (cert, key) if r.returncode == 0 else None


def test_text(fixtures, tmp):
    """Text prompts over TLS with API keys, on a copy of gdn_default with a character tokenizer."""
    model = char_tokenizer_model(os.path.join(fixtures, "gdn_default"),
                                 os.path.join(tmp, "gdn_chars"))
    keys = os.path.join(tmp, "keys.txt")
    with open(keys, "w") as f:
        f.write("key-alice alice\nkey-bob-1 bob  # a comment\n")
    extra = ["--api_keys_file", keys]
    tls = make_tls(tmp)
    if tls is None:
        print("note: openssl unavailable or failed: text tests run without TLS")
    else:
        extra += ["--tls_cert", tls[0], "--tls_key", tls[1]]
    env = dict(os.environ, LINFER_API_KEY="key-alice")
    with Server(BINARY, model, *extra) as srv:
        conn = ["--server", srv.address] + (["--tls_ca", tls[0]] if tls else [])
        prompt = "Hello, linear attention"
        want_ids = tokens_of(linfer("generate", "--model", model, "--max_tokens", "10", "--tokens",
                                    ",".join(str(ord(c) - 31) for c in prompt),
                                    "--temperature", "0"))
        to_text = lambda ids: "".join("\n" if i == 0 else chr(i + 31) for i in ids)
        want = to_text(want_ids or [])
        r = linfer("generate", *conn, "--max_tokens", "10", "--temperature", "0", prompt, env=env)
        check(r.returncode == 0 and r.stdout == want + "\n",
              f"text generate streams the detokenized ids: {r.stdout!r} vs {want!r} {r.stderr}")
        stop = next((c for c in want[2:] if c not in "\n,"), None)
        if stop is not None:
            r = linfer("generate", *conn, "--max_tokens", "10", "--temperature", "0", "--stop", "qqq",
                       "--stop",
                       f"zzz,{stop}", prompt, env=env)
            cut = want[:want.index(stop)]
            check(r.returncode == 0 and r.stdout == (cut + "\n" if cut else "")
                  and r.stderr.startswith("linfer: stop (string"),
                  f"stop {stop!r}: {r.stdout!r} vs {cut!r}; {r.stderr!r}")
        r = linfer("detokenize", "--model", model, "--ids", "1,100000")
        check(r.returncode == 1 and "--ids[1] = 100000 is not a token" in r.stderr,
              f"detokenize names an id outside the vocabulary: {r.stdout!r} {r.stderr!r}")
        r = linfer("generate", *conn, "--tokens", "1", env=dict(os.environ, LINFER_API_KEY="x"))
        check(r.returncode == 1 and "UNAUTHENTICATED" in r.stderr, f"bad key: {r.stderr!r}")
        r = linfer("sessions", *conn, "create", "alice-1", env=env)
        check(r.returncode == 0, f"alice creates: {r.stderr}")
        r = linfer("sessions", *conn, "get", "alice-1", "--api_key", "key-bob-1", env=env)
        check(r.returncode == 1 and "NOT_FOUND" in r.stderr, f"bob cannot see it: {r.stderr!r}")
        c = linfer("chat", *conn, "--session", "alice-1", "--max_tokens", "5", env=env,
                   stdin="Hi there\nHow are you?\n")
        r = linfer("sessions", *conn, "get", "alice-1", env=env)
        row = json.loads(r.stdout) if r.returncode == 0 else {}
        check(c.returncode == 0 and c.stderr.count("5 generated") == 2,
              f"text chat: {c.stdout!r} {c.stderr!r}")
        # "Hi there\n" (9) + 5 generated + "How are you?\n" (13) + 5 generated.
        check(row.get("turns") == 2 and row.get("tokens", 0) >= 31, f"text chat session: {row}")
        if tls:
            r = linfer("sessions", "--server", srv.address, "list", env=env, timeout=30)
            check(r.returncode == 1 and "UNAVAILABLE" in r.stderr, f"plaintext to TLS: {r.stderr!r}")


def run_test(name, fn, *args):
    """Runs one group; an exception counts as a failure and the other groups still run."""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        check(False, f"{name}: {type(e).__name__}: {e}")


def main():
    global BINARY
    BINARY, fixtures = sys.argv[1], sys.argv[2]
    model_dir = os.path.join(fixtures, "gdn_default")
    tmp = tempfile.mkdtemp(prefix="linfer-cli-test-")
    try:
        with Server(BINARY, model_dir) as srv:
            run_test("generate", test_generate, srv.address, model_dir)
            run_test("chat", test_chat, srv.address)
            run_test("sessions", test_sessions, srv.address, tmp)
            run_test("errors", test_errors, srv.address)
            check(srv.terminate() == 0, f"server exits 0 on SIGTERM:\n{srv.stderr()}")
        run_test("serve errors", test_serve_errors, model_dir, tmp)
        run_test("text", test_text, fixtures, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
