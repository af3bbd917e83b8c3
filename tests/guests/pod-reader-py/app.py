"""pod-reader, in Python: reconciles every Pod by reading it and deciding on its labels and
containers, writing nothing — the benchmark's Python guest beside kopf operators doing the same
(``bench/kopf/pod_reader.py``)."""

from krec_guest import Action, Reconciler, export
from krec_guest.kinds import Pod


class PodReader(Reconciler):
    def reconcile(self, req, ctx):
        pod = ctx.get_opt(Pod, req.name, req.namespace)
        if pod is None:
            return Action.done()
        generation = (pod["metadata"].get("labels") or {}).get("generation")
        containers = len((pod.get("spec") or {}).get("containers") or [])
        if generation == "stale" and containers == 0:
            return Action.requeue()
        return Action.done()


WitWorld = export(reconciler=PodReader)
