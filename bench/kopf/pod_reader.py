"""A kopf operator doing what tests/guests/pod-reader-py does: each Pod event read and decided
on, nothing written. The languages benchmark runs ten of these, one per process (how kopf
operators are deployed), beside ten Python guests in one krec host.

It counts the events it handled into the file named by POD_READER_COUNT, for the benchmark to
know when every Pod was seen."""

import os

import kopf

_count = 0
_fd = os.open(os.environ["POD_READER_COUNT"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    # Nothing written to the cluster: no Events, no progress annotations.
    settings.posting.enabled = False
    settings.persistence.progress_storage = kopf.StatusProgressStorage()


@kopf.on.event("v1", "pods")
def seen(body, **_):
    global _count
    generation = (body["metadata"].get("labels") or {}).get("generation")
    containers = len((body.get("spec") or {}).get("containers") or [])
    if generation == "stale" and containers == 0:
        return
    _count += 1
    os.pwrite(_fd, b"%012d" % _count, 0)
