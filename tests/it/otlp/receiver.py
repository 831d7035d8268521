"""An OTLP/HTTP collector for tests/it/otlp/: decodes each body with the OpenTelemetry
project's own message types (the `opentelemetry-proto` package, pinned in .ci/run) and
appends it to a file, one JSON object a line: {"path", "body"} with ids in hex.

usage: receiver.py OUT MODE   (MODE: ok, slow: 10 s before each answer, 503: always 503)
Prints its port on the first line of standard output; binds 127.0.0.1 only.
"""
import base64, json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

OUT, MODE = sys.argv[1], sys.argv[2]
TYPES = {
    "/v1/logs": ExportLogsServiceRequest,
    "/v1/metrics": ExportMetricsServiceRequest,
    "/v1/traces": ExportTraceServiceRequest,
}
LOCK = threading.Lock()
IDS = {"traceId", "spanId", "parentSpanId"}


def hex_ids(value):
    if isinstance(value, dict):
        return {k: (base64.b64decode(v).hex() if k in IDS else hex_ids(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [hex_ids(v) for v in value]
    return value


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        kind = TYPES.get(self.path)
        if kind is None or self.headers.get("Content-Type") != "application/x-protobuf":
            return self.answer(404)
        message = kind()
        message.ParseFromString(body)
        record = {
            "path": self.path,
            "auth": self.headers.get("Authorization"),
            "body": hex_ids(MessageToDict(message)),
        }
        with LOCK, open(OUT, "a") as out:
            out.write(json.dumps(record) + "\n")
        if MODE == "slow":
            time.sleep(10)
        self.answer(503 if MODE == "503" else 200)

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
