"""Shared pieces of the black-box Python tests (server, CLI, load generator): start `linfer serve`
on loopback with free ports, generate Python gRPC stubs with protoc at test time, a
character-level test tokenizer, and check() / finish()."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

_passed = 0
_failed = 0


def check(cond, what):
    global _passed, _failed
    if cond:
        _passed += 1
    else:
        _failed += 1
        print("FAIL:", what, flush=True)
    return cond


def finish():
    """Prints the tally and returns the exit code."""
    print(f"{_passed} passed, {_failed} failed", flush=True)
    return 1 if _failed else 0


class Server:
    """`linfer serve --port 0 --http_port 0` on 127.0.0.1; use as a context manager."""

    def __init__(self, binary, model_dir, *extra, start_timeout=60, env=None):
        """env: variables added to this process's environment for the server."""
        self.log = tempfile.NamedTemporaryFile(prefix="linfer-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [binary, "serve", "--model", model_dir, "--bind", "127.0.0.1", "--port", "0",
             "--http_port", "0", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, text=True,
            env={**os.environ, **env} if env else None)
        self.grpc_port = self.http_port = None
        got = threading.Event()
        threading.Thread(target=self._read_stdout, args=(got,), daemon=True).start()
        if not got.wait(start_timeout) or self.grpc_port is None:
            self.kill()
            raise RuntimeError(f"linfer serve did not report its ports:\n{self.stderr()}")
        self.address = f"127.0.0.1:{self.grpc_port}"

    def _read_stdout(self, got):
        for line in self.proc.stdout:
            m = re.search(r"on 127\.0\.0\.1:(\d+) \(gRPC\), HTTP port (-?\d+)", line)
            if m and self.grpc_port is None:
                self.grpc_port, self.http_port = int(m.group(1)), int(m.group(2))
                got.set()
        got.set()  # stdout closed: the process ended

    def stderr(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()[-4000:]

    def metrics(self):
        url = f"http://127.0.0.1:{self.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def metric(self, name):
        """The sum over label sets of the samples `name` in /metrics (None when absent)."""
        values = []
        for line in self.metrics().splitlines():
            parts = line.rsplit(" ", 1)
            if len(parts) == 2 and (parts[0] == name or parts[0].startswith(name + "{")):
                values.append(float(parts[1]))
        return sum(values) if values else None

    def terminate(self, timeout=20):
        """SIGTERM, then wait; returns the exit code (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        os.unlink(self.log.name)


def wait_until(predicate, timeout, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def make_stubs(source_dir, out_dir):
    """protoc + grpc_python_plugin: linfer.v1 and minimal health / reflection stubs into out_dir,
    which is put on sys.path."""
    for tool in ["/usr/bin/protoc", "/usr/bin/grpc_python_plugin"]:
        if not os.path.exists(tool):
            raise RuntimeError(f"{tool} is missing: run deploy/setup.sh "
                               "(protobuf-compiler, protobuf-compiler-grpc)")
    proto_dir = os.path.join(source_dir, "proto")
    # Health and reflection go to linfer_testing/ (a `grpc/` folder would shadow the grpc
    # package); the service names come from the proto packages, which are the standard ones.
    extra = os.path.join(out_dir, "protos")
    os.makedirs(os.path.join(extra, "linfer_testing"), exist_ok=True)
    with open(os.path.join(extra, "linfer_testing", "health.proto"), "w") as f:
        f.write(HEALTH_PROTO)
    with open(os.path.join(extra, "linfer_testing", "reflection.proto"), "w") as f:
        f.write(REFLECTION_PROTO)
    protos = [os.path.join(proto_dir, "linfer", "v1", p)
              for p in sorted(os.listdir(os.path.join(proto_dir, "linfer", "v1")))
              if p.endswith(".proto")]
    protos += [os.path.join(extra, "linfer_testing", p)
               for p in ["health.proto", "reflection.proto"]]
    subprocess.run(
        ["/usr/bin/protoc", f"-I{proto_dir}", f"-I{extra}", f"--python_out={out_dir}",
         f"--grpc_python_out={out_dir}",
         "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin", *protos],
        check=True, timeout=60)
    sys.path.insert(0, out_dir)


# The subset of grpc/health/v1/health.proto the tests call (same package, names and numbers).
HEALTH_PROTO = """syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
"""

# The subset of grpc/reflection/v1alpha/reflection.proto needed to list services.
REFLECTION_PROTO = """syntax = "proto3";
package grpc.reflection.v1alpha;
message ServerReflectionRequest {
  string host = 1;
  oneof message_request { string list_services = 7; }
}
message ServiceResponse { string name = 1; }
message ListServiceResponse { repeated ServiceResponse service = 1; }
message ErrorResponse { int32 error_code = 1; string error_message = 2; }
message ServerReflectionResponse {
  string valid_host = 1;
  ServerReflectionRequest original_request = 2;
  oneof message_response {
    ListServiceResponse list_services_response = 6;
    ErrorResponse error_response = 7;
  }
}
service ServerReflection {
  rpc ServerReflectionInfo(stream ServerReflectionRequest) returns (stream ServerReflectionResponse);
}
"""


def char_tokenizer_model(fixture_dir, out_dir):
    """A copy of a 96-token fixture model with a tokenizer.json of single characters:
    id 0 is "\\n", ids 1..95 are the printable ASCII characters (no merges, Fuse decoder)."""
    shutil.copytree(fixture_dir, out_dir)
    vocab = {"\n": 0}
    for i, c in enumerate(range(32, 127)):
        vocab[chr(c)] = i + 1
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": None, "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    return out_dir
