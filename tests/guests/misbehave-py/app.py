"""misbehave, in Python: a hostile guest for the containment tests. The request's name says what
it does: ``ok`` returns, ``loop`` spins forever, ``oom`` allocates until it is stopped, ``raise``
raises, ``forbidden`` reads what its manifest does not permit."""

from krec_guest import Action, Reconciler, Validator, Verdict, export
from krec_guest.kinds import Secret


class Misbehave(Reconciler):
    def reconcile(self, req, ctx):
        if req.name == "loop":
            while True:
                pass
        if req.name == "oom":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        if req.name == "raise":
            raise RuntimeError("misbehave was asked to raise")
        if req.name == "forbidden":
            ctx.get(Secret, "anything", "kube-system")
        return Action.done()


class Judge(Validator):
    def validate(self, req, ctx):
        if req.name == "loop":
            while True:
                pass
        return Verdict.allow()


WitWorld = export(reconciler=Misbehave, validator=Judge)
