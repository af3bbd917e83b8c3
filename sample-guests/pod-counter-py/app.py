"""pod-counter, in Python: labels every ReplicaSet with the number of its pods (``pod-count``).

The same reconciler as the Rust ``pod-counter`` (controller-runtime's example: ``For(ReplicaSet)``,
``Owns(Pod)``): pods are selected by the ReplicaSet's ``spec.selector`` in its namespace, and the
ReplicaSet is only updated when the count changed.
"""

from krec_guest import Action, Context, Invalid, Reconciler, Request, export, log
from krec_guest.kinds import Pod, ReplicaSet
from krec_guest.selectors import selector_string

#: The label this reconciler maintains.
POD_COUNT_LABEL = "pod-count"


class PodCounter(Reconciler):
    def reconcile(self, req: Request, ctx: Context) -> Action:
        rs = ctx.get_opt(ReplicaSet, req.name, req.namespace)
        if rs is None:
            log.debug(f"ReplicaSet {req} is gone")
            return Action.done()
        try:
            selector = selector_string((rs.get("spec") or {}).get("selector"))
        except Invalid as err:
            log.warn(f"ReplicaSet {req}: {err}; not counting")
            return Action.done()
        if selector is None:
            # The API server rejects such ReplicaSets; an empty selector would match every pod.
            log.warn(f"ReplicaSet {req} has an empty spec.selector; not counting")
            return Action.done()
        count = str(len(ctx.list(Pod, namespace=req.namespace, labels=selector)))

        labels = rs["metadata"].setdefault("labels", {})
        if labels.get(POD_COUNT_LABEL) == count:
            return Action.done()
        log.info(f"ReplicaSet {req}: {POD_COUNT_LABEL}={count}")
        labels[POD_COUNT_LABEL] = count
        ctx.update(rs)
        return Action.done()


WitWorld = export(reconciler=PodCounter)
