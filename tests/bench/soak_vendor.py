"""A loopback decision vendor that fails in every documented way, for the soak benchmark.

    python tests/bench/soak_vendor.py [--vendor typesafe] [--seed 0]

Serves ``tests/loopback/decision_vendors.py``'s vendor on ``127.0.0.1:<free port>``, prints
its base URL on the first line of stdout, and serves until stdin closes. Each request draws
its fault at random from :data:`FAULTS`: vendor error envelopes (400, 413, 429 with
``Retry-After``, 500, 503, 529), a proxy's HTML page, garbage JSON, a truncated body, a
closed connection, slow and hung replies, and well-formed replies with wrong-typed, missing
or renamed answers. Authentication and network failures need no fault: the soak sends them
with a wrong key and to a closed port.

It runs in its own process so that its threads, sockets and memory stay out of the soak's
measurements of the engine's process.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.loopback.decision_vendors import Fault, Received, VendorServer

#: A hung reply is released after this long (the client gave up long before), so hangs
#: do not pile up handler threads for the whole run.
HANG_S = 20.0

#: (fault or ``None`` for a normal reply, weight).
FAULTS: tuple[tuple[Fault | None, int], ...] = (
    (None, 40),
    (Fault.error(400), 3),  # invalid_request
    (Fault.error(413), 3),  # max_tokens_exceeded
    (Fault.error(429, retry_after=0.2), 4),  # rate_limit, retried inside the budget
    (Fault.error(500), 3),  # server
    (Fault.error(503), 3),  # overloaded
    (Fault.error(529), 3),  # overloaded (TypeSafe)
    (Fault.html(502), 3),  # a proxy's HTML page
    (Fault.garbage(), 3),  # 200 with JSON that is not JSON
    (Fault.truncate(), 3),
    (Fault.close(), 3),  # no response at all
    (Fault.slow(0.3), 3),
    (Fault.slow(1.5), 2),  # past the soak decider's 1 s budget: timeout
    (Fault.slow(HANG_S), 2),  # a hang
    (Fault.wrong_type("string"), 3),
    (Fault.wrong_type("out_of_range"), 3),
    (Fault.wrong_type("nan"), 3),
    (Fault.drop(), 3),  # an answer missing
    (Fault.rename(), 3),  # answers under other ids
)


class FaultyVendor(VendorServer):
    """A vendor server that draws a fault for every request and keeps no request log."""

    def __init__(self, vendor: str, seed: int) -> None:
        super().__init__(vendor)
        self._rng = random.Random(seed)
        self._faults = [fault for fault, _ in FAULTS]
        self._weights = [weight for _, weight in FAULTS]
        self._count = 0

    def admit(self, received: Received) -> tuple[int, Fault | None]:
        auth = self.spec.auth
        with self._lock:  # handler threads draw concurrently
            self._count += 1
            if received.headers.get(auth.header) != auth.prefix + self.api_key:
                return self._count - 1, None  # a wrong key gets its 401, as from a real vendor
            return self._count - 1, self._rng.choices(self._faults, self._weights)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vendor", default="typesafe")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    server = FaultyVendor(args.vendor, args.seed)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    print(server.base_url, flush=True)
    try:
        sys.stdin.read()  # the parent closes stdin (or exits) to stop us
    finally:
        server.stop()
        thread.join(timeout=5.0)


if __name__ == "__main__":
    main()
