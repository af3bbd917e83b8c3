"""Kinds: what a host call names an object's type by (the WIT ``gvk``), and the common ones.

Objects themselves are plain ``dict``s, as ``json.loads`` makes them and as kopf hands them to
its handlers: a reconciler reads ``pod["metadata"]["labels"]`` and sends back what it changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Kind:
    """A Kubernetes kind: ``Kind("apps/v1", "ReplicaSet")``; the core group is ``"v1"``."""

    api_version: str
    kind: str

    @property
    def group(self) -> str:
        """The API group, ``""`` for the core group."""
        group, _, version = self.api_version.rpartition("/")
        return group if version else ""

    @property
    def version(self) -> str:
        """The version within the group, e.g. ``v1``."""
        return self.api_version.rpartition("/")[2]

    @staticmethod
    def of(obj: Mapping[str, Any]) -> "Kind":
        """The kind of ``obj``, from its ``apiVersion`` and ``kind``."""
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str) or not kind:
            raise ValueError("the object has no apiVersion and kind")
        return Kind(api_version, kind)

    @staticmethod
    def from_gvk(group: str, version: str, kind: str) -> "Kind":
        """The kind of a group, version and kind."""
        return Kind(f"{group}/{version}" if group else version, kind)

    def __str__(self) -> str:
        return f"{self.api_version} {self.kind}"


Pod = Kind("v1", "Pod")
ConfigMap = Kind("v1", "ConfigMap")
Secret = Kind("v1", "Secret")
Service = Kind("v1", "Service")
ServiceAccount = Kind("v1", "ServiceAccount")
Namespace = Kind("v1", "Namespace")
Node = Kind("v1", "Node")
Event = Kind("v1", "Event")
PersistentVolumeClaim = Kind("v1", "PersistentVolumeClaim")
Deployment = Kind("apps/v1", "Deployment")
ReplicaSet = Kind("apps/v1", "ReplicaSet")
StatefulSet = Kind("apps/v1", "StatefulSet")
DaemonSet = Kind("apps/v1", "DaemonSet")
Job = Kind("batch/v1", "Job")
CronJob = Kind("batch/v1", "CronJob")
Lease = Kind("coordination.k8s.io/v1", "Lease")
