#!/usr/bin/env python3
"""A SchedulerExtender for the placement example's `prod` environment (docs/placement.md).

It answers kalypso's POSTs with both a filter and a score: cluster types whose `capacity`
label is below 25 are "full" and dropped; the others score their capacity (0-100). Run it,
then render prod:

    python3 examples/placement/extender.py 8099 &
    kalypso render examples/placement --env prod --out out/prod
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Extender(BaseHTTPRequestHandler):
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        kept, failed, scores = [], {}, {}
        for candidate in request["candidates"]:
            capacity = int(candidate["labels"].get("capacity", "0"))
            if capacity < 25:
                failed[candidate["name"]] = f"full (capacity {capacity})"
            else:
                kept.append(candidate["name"])
                scores[candidate["name"]] = min(capacity, 100)
        body = json.dumps({"clusterTypes": kept, "failed": failed, "scores": scores}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8099
    HTTPServer(("127.0.0.1", port), Extender).serve_forever()
