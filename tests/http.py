"""One TLS context for the suite's HTTP clients.

httpx builds a new ``SSLContext`` for every ``Client`` (and for every module-level ``httpx.get``
or ``httpx.post``), loading the CA bundle each time: ~20 ms of CPU. The suite makes thousands
(a server start alone polls ``/healthz`` dozens of times), and profiling a worker found more than a
third of its CPU there. Clients pass ``verify=TLS`` instead: built once, verifying as httpx's
default does (the same CA bundle), so a test that reaches a TLS server still checks it.
"""

from __future__ import annotations

import ssl

import certifi

#: httpx's default verification (certifi's CA bundle), built once for the whole run.
TLS: ssl.SSLContext = ssl.create_default_context(cafile=certifi.where())
