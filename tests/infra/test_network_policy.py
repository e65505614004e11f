"""infra/k8s/network-policy.yaml: the namespace denies by default and opens only the paths the topology uses.

The rules are read with PyYAML and evaluated as Kubernetes does (a connection passes when an ingress rule of a
policy selecting the destination admits it and, for a source in the namespace, an egress rule of a policy
selecting the source does; a pod no policy selects for a direction is open in it). Before the file existed every
pod of the cluster reached Triton, PostgreSQL and the metrics."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

K8S = Path(__file__).resolve().parents[2] / "infra" / "k8s"
NAMESPACE = "ctxpress"
OUTSIDE = None  # a client beyond the cluster (the developers' editors)
Pod = tuple[str, dict[str, str]]  # (namespace, labels)


@functools.cache
def _parsed() -> tuple[dict[str, Any], ...]:
    # Parsed once per run (libyaml's safe loader where PyYAML has it), not once per evaluated connection.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(d for f in sorted(K8S.glob("*.yaml")) for d in yaml.load_all(f.read_text(), loader) if d)


def _docs() -> list[dict[str, Any]]:
    return copy.deepcopy(list(_parsed()))  # a test may change what it reads


def _policies() -> list[dict[str, Any]]:
    return [d for d in _docs() if d["kind"] == "NetworkPolicy"]


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        if expr["operator"] != "In":
            raise AssertionError(f"the evaluator knows 'In' only, not {expr['operator']}")
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _peer_admits(peer: dict[str, Any], pod: Pod | None) -> bool:
    if "ipBlock" in peer:
        assert peer["ipBlock"].get("except") is None
        return pod is None  # only used for clients beyond the cluster in this evaluator
    if pod is None:
        return False
    namespace, labels = pod
    if "namespaceSelector" in peer:
        ns_labels = {"kubernetes.io/metadata.name": namespace}
        if not _matches(peer["namespaceSelector"], ns_labels):
            return False
    elif namespace != NAMESPACE:
        return False
    return _matches(peer.get("podSelector", {}), labels)


def _rule_admits(rule: dict[str, Any], peers_key: str, pod: Pod | None, port: int) -> bool:
    ports = rule.get("ports")
    if ports is not None and not any(p["port"] == port and p.get("protocol", "TCP") == "TCP" for p in ports):
        return False
    peers = rule.get(peers_key)
    return peers is None or any(_peer_admits(peer, pod) for peer in peers)


def _side_allows(direction: str, subject: dict[str, str], other: Pod | None, port: int) -> bool:
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [p for p in _policies() if direction in p["spec"]["policyTypes"]
                 and _matches(p["spec"]["podSelector"], subject)]
    if not selecting:
        return True
    return any(_rule_admits(rule, peers_key, other, port) for p in selecting for rule in p["spec"].get(key, []))


def reaches(source: Pod | None, dest: dict[str, str], port: int) -> bool:
    """Whether ``source`` (None: beyond the cluster) may open TCP ``port`` on a pod of the namespace labelled
    ``dest``."""
    if not _side_allows("Ingress", dest, source, port):
        return False
    if source is not None and source[0] == NAMESPACE:
        return _side_allows("Egress", source[1], (NAMESPACE, dest), port)
    return True


def app(name: str, namespace: str = NAMESPACE) -> Pod:
    return namespace, {"app": name}


INTRUDERS = [app("intruder"), ("default", {"app": "completion-worker"}), ("other", {}), OUTSIDE]


def test_the_namespace_denies_by_default() -> None:
    deny = [p for p in _policies() if p["spec"]["podSelector"] == {} and not p["spec"].get("ingress")
            and not p["spec"].get("egress")]
    assert deny and set(deny[0]["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert all(p["metadata"]["namespace"] == NAMESPACE for p in _policies())
    workloads = {d["spec"]["template"]["metadata"]["labels"]["app"] for d in _docs()
                 if d["kind"] in {"Deployment", "StatefulSet"}}
    assert workloads >= {"triton", "postgres", "nats", "completion-worker", "index-worker", "gateway", "prometheus"}


@pytest.mark.parametrize("source", INTRUDERS, ids=lambda s: "outside" if s is None else f"{s[0]}/{s[1]}")
def test_triton_postgres_and_the_metrics_are_not_reachable_from_arbitrary_pods(source: Pod | None) -> None:
    for dest, port in (("triton", 8001), ("triton", 8002), ("triton", 8000), ("postgres", 5432),
                       ("completion-worker", 9400), ("prometheus", 9090), ("grafana", 3000), ("nats", 6222),
                       ("gateway", 9400), ("index-worker", 9400)):
        assert not reaches(source, {"app": dest}, port), (dest, port)


def test_the_paths_the_topology_uses_are_open() -> None:
    for client in ("gateway", "completion-worker", "index-worker", "bridge"):
        assert reaches(app(client), {"app": "nats"}, 4222), client
    assert reaches(OUTSIDE, {"app": "nats"}, 4222)  # the editors
    assert reaches(OUTSIDE, {"app": "bridge"}, 8012)
    assert reaches(app("nats"), {"app": "nats"}, 6222)
    for worker in ("completion-worker", "index-worker"):
        assert reaches(app(worker), {"app": "triton"}, 8001), worker
        assert reaches(app(worker), {"app": "postgres"}, 5432), worker
    assert reaches(app("grafana"), {"app": "prometheus"}, 9090)
    assert not reaches(app("gateway"), {"app": "triton"}, 8001)  # the gateway forwards; it never runs a prompt
    assert not reaches(app("gateway"), {"app": "postgres"}, 5432)
    assert not reaches(app("bridge"), {"app": "triton"}, 8001)


def test_prometheus_reaches_every_port_a_pod_asks_it_to_scrape() -> None:
    scraped = [(d["spec"]["template"]["metadata"]["labels"]["app"],
                int(d["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]))
               for d in _docs() if d["kind"] in {"Deployment", "StatefulSet"}
               and d["spec"]["template"]["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true"]
    assert {name for name, _ in scraped} >= {"triton", "completion-worker"}
    for name, port in scraped:
        assert reaches(app("prometheus"), {"app": name}, port), (name, port)
