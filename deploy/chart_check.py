"""Install the chart's validation tools into .tools/ and validate deploy/helm/groupgate with them, offline.

    python deploy/chart_check.py tools   # helm and kubeconform (Go module proxy), the Kubernetes JSON schemas
    python deploy/chart_check.py check   # helm lint, helm template of every variant, kubeconform -strict

`make chart-tools` and `make chart-check` run these. Everything comes from package registries:

- helm and kubeconform are built with `go install` from the Go module proxy into .tools/bin;
- the Kubernetes JSON schemas are those the PyPI package kubernetes-validate ships (one folder per Kubernetes
  version); their references point at "/api/_definitions.json", which this script rewrites to the file beside
  them so that kubeconform resolves them from disk;
- the ServiceMonitor and PodMonitor schemas are the openAPIV3Schema of prometheus-operator's CRDs, read from
  its Go module (jsonnet/prometheus-operator/*-crd.json), made strict (no unknown fields) as the built-in
  kinds' schemas are.

The check renders the default values and each file in deploy/helm/groupgate/ci/ for every version in
KUBE_VERSIONS and validates every object; a kind without a schema is an error, never skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "groupgate"
TOOLS = ROOT / ".tools"
BIN = TOOLS / "bin"
SCHEMAS = TOOLS / "schemas"
STAMPS = TOOLS / "stamps"

HELM = ("helm.sh/helm/v3/cmd/helm", "v3.22.0")
KUBECONFORM = ("github.com/yannh/kubeconform/cmd/kubeconform", "v0.8.0")
KUBERNETES_VALIDATE = "1.37.0"  # PyPI; ships the schemas of Kubernetes 1.28 .. 1.37
PROMETHEUS_OPERATOR = ("github.com/prometheus-operator/prometheus-operator", "v0.85.0")
PROMETHEUS_CRDS = ("servicemonitors", "podmonitors")
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest with schemas.
KUBE_VERSIONS = ("1.28.0", "1.37.0")
RELEASE = "gg"


class ToolsMissing(RuntimeError):
    pass


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, **kw)


def _stamp(name: str) -> Path:
    return STAMPS / name


def _go_env() -> dict[str, str]:
    # Module cache files writable, so that the cache can be removed like any directory.
    return {**os.environ, "GOBIN": str(BIN), "GOFLAGS": (os.environ.get("GOFLAGS", "") + " -modcacherw").strip()}


def install_go_tool(package: str, version: str) -> None:
    name = package.rsplit("/", 1)[1]
    stamp = _stamp(f"{name}-{version}")
    if stamp.exists() and (BIN / name).exists():
        return
    t0 = time.monotonic()
    _run(["go", "install", f"{package}@{version}"], env=_go_env(), cwd=TOOLS)
    stamp.write_text(f"{package}@{version}\n")
    print(f"installed {name} {version} in {time.monotonic() - t0:.1f} s")


def install_kubernetes_schemas() -> None:
    stamp = _stamp(f"kubernetes-validate-{KUBERNETES_VALIDATE}-{'-'.join(KUBE_VERSIONS)}")
    if stamp.exists():
        return
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        _run([
            sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
            "-d", tmp, f"kubernetes-validate=={KUBERNETES_VALIDATE}",
        ])
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as z:
            for version in KUBE_VERSIONS:
                prefix = f"kubernetes_validate/kubernetes-json-schema/v{version}-local-strict/"
                out = SCHEMAS / f"v{version}"
                if out.exists():
                    shutil.rmtree(out)
                out.mkdir(parents=True)
                names = [n for n in z.namelist() if n.startswith(prefix) and n.endswith(".json")]
                if not names:
                    raise SystemExit(f"kubernetes-validate {KUBERNETES_VALIDATE} has no schemas for {version}")
                for n in names:
                    # References through the package's own registry (an "$id" under kubernetes.io and
                    # "/api/_definitions.json") -> the definitions file beside them, resolved from disk.
                    schema = json.loads(z.read(n).decode().replace('"/api/_definitions.json#', '"_definitions.json#'))
                    schema.pop("$id", None)
                    (out / n[len(prefix):]).write_text(json.dumps(schema))
    stamp.write_text("ok\n")
    print(f"installed the Kubernetes schemas {', '.join(KUBE_VERSIONS)} in {time.monotonic() - t0:.1f} s")


def _strict(schema: Any) -> Any:
    """An openAPIV3Schema with additionalProperties false wherever properties are listed and nothing else
    says unknown fields are kept, as the built-in kinds' strict schemas are."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def install_crd_schemas() -> None:
    module, version = PROMETHEUS_OPERATOR
    stamp = _stamp(f"prometheus-operator-{version}")
    if stamp.exists():
        return
    t0 = time.monotonic()
    info = json.loads(_run(["go", "mod", "download", "-json", f"{module}@{version}"],
                           env=_go_env(), cwd=TOOLS, capture_output=True).stdout)
    for crd_name in PROMETHEUS_CRDS:
        crd = json.loads((Path(info["Dir"]) / "jsonnet" / "prometheus-operator" / f"{crd_name}-crd.json").read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            out = SCHEMAS / "crds" / group / f"{kind.lower()}_{v['name']}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(_strict(v["schema"]["openAPIV3Schema"]), indent=1))
    stamp.write_text("ok\n")
    print(f"installed the {', '.join(PROMETHEUS_CRDS)} schemas in {time.monotonic() - t0:.1f} s")


def install() -> None:
    for d in (BIN, SCHEMAS, STAMPS):
        d.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    install_go_tool(*HELM)
    install_go_tool(*KUBECONFORM)
    install_kubernetes_schemas()
    install_crd_schemas()
    print(f"chart tools ready in .tools/ ({time.monotonic() - t0:.1f} s)")


# --- the check ---------------------------------------------------------------------------------------------


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        raise ToolsMissing(f"{path} is missing: run `make chart-tools` (installs helm, kubeconform and the schemas)")
    return str(path)


def schema_dir(version: str) -> Path:
    d = SCHEMAS / f"v{version}"
    if not (d / "_definitions.json").exists() or not (SCHEMAS / "crds").is_dir():
        raise ToolsMissing(f"the schemas in {SCHEMAS} are missing: run `make chart-tools`")
    return d


def variants() -> list[Path | None]:
    """None: the chart's default values; then each file of ci/."""
    return [None, *sorted((CHART / "ci").glob("*.yaml"))]


def helm_template(values: Path | None, kube_version: str = KUBE_VERSIONS[-1], extra: list[str] | None = None,
                  check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [tool("helm"), "template", RELEASE, str(CHART), "--namespace", "groupgate", "--kube-version", kube_version]
    if values is not None:
        cmd += ["-f", str(values)]
    return subprocess.run(cmd + (extra or []), check=check, text=True, capture_output=True)


def kubeconform(manifests: str, kube_version: str) -> subprocess.CompletedProcess[str]:
    d = schema_dir(kube_version)
    return subprocess.run(
        [
            tool("kubeconform"), "-strict", "-summary", "-kubernetes-version", kube_version,
            "-schema-location", f"file://{d}/{{{{.ResourceKind}}}}{{{{.KindSuffix}}}}.json",
            "-schema-location", f"file://{SCHEMAS}/crds/{{{{.Group}}}}/{{{{.ResourceKind}}}}_{{{{.ResourceAPIVersion}}}}.json",
            "-",
        ],
        input=manifests, text=True, capture_output=True,
    )


def check() -> int:
    failures = 0
    for values in variants():
        label = "default values" if values is None else str(values.relative_to(ROOT))
        lint = [tool("helm"), "lint", "--strict", str(CHART)] + ([] if values is None else ["-f", str(values)])
        r = subprocess.run(lint, text=True, capture_output=True)
        print(f"helm lint --strict ({label}): {'ok' if r.returncode == 0 else 'FAILED'}")
        if r.returncode:
            print(r.stdout + r.stderr)
            failures += 1
        for version in KUBE_VERSIONS:
            t = helm_template(values, version, check=False)
            if t.returncode:
                print(f"helm template ({label}, Kubernetes {version}): FAILED\n{t.stderr}")
                failures += 1
                continue
            k = kubeconform(t.stdout, version)
            print(f"kubeconform -strict ({label}, Kubernetes {version}): {k.stdout.strip().splitlines()[-1]}")
            if k.returncode:
                print(k.stdout + k.stderr)
                failures += 1
    print("chart check: " + ("ok" if not failures else f"{failures} failure(s)"))
    return 1 if failures else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["tools", "check"])
    args = p.parse_args()
    try:
        if args.command == "tools":
            install()
            return 0
        return check()
    except ToolsMissing as e:
        print(f"chart check: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
