"""What runs beside the node, out of the cluster, each with the super-admin kubeconfig: CoreDNS,
metrics-server (the metrics.k8s.io APIService), the Kubeflow Training Operator (PyTorchJob), JobSet,
Kubeflow Trainer v2 (TrainJob), the MPI Operator (MPIJob v2beta1) and Kueue. Each one's CRDs and
webhook configurations come from its own Go module at the release versions.toml declares; their
webhooks are served on the node's address with certificates from a CA made here (the controllers'
own rotation off), reached through a Service whose endpoint is the node."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from pathlib import Path

from kubecluster.api import (
    Kubectl,
    Object,
    config_map,
    namespace,
    outside_service,
    secret,
    service_account,
)
from kubecluster.build import module_dir
from kubecluster.formats import Data, corefile_text, write_file, yaml_text
from kubecluster.host import place_fixed
from kubecluster.layout import INIT_IMAGE, Cluster
from kubecluster.owned import stop_owned
from kubecluster.processes import NoCluster, in_netns, run, running, say, start_component, succeeds, wait_for

KUEUE_FRAMEWORKS = ("batch/job", "kubeflow.org/pytorchjob", "kubeflow.org/mpijob", "jobset.x-k8s.io/jobset",
                    "trainer.kubeflow.org/trainjob")  # fmt: skip
"""The integrations torchdeck submits, which start gives Kueue (its own default leaves
kubeflow.org/pytorchjob out from v0.19)."""
SERVICE_ACCOUNT_DIR = "/run/secrets/kubernetes.io/serviceaccount"


def healthy(cluster: Cluster, port: int) -> bool:
    """Whether the controller's health probe on the namespace's 127.0.0.1:PORT says ready."""
    return succeeds(in_netns(cluster, ["curl", "-fsS", f"http://127.0.0.1:{port}/readyz"]))


def with_private_tmp(tmp: Path, command: Sequence[str | Path]) -> list[str | Path]:
    """COMMAND with TMP mounted as its own /tmp (controller-runtime reads its webhook certificates from
    /tmp/k8s-webhook-server/serving-certs), in a mount namespace of its own."""
    script = 'mount --bind "$1" /tmp && shift && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", tmp, *command]


def as_pod(tmp: Path, account_dir: Path, command: Sequence[str | Path]) -> list[str | Path]:
    """As with_private_tmp, and what the kubelet gives a pod: the service account's token, namespace and
    CA where a pod reads them, and the cluster's DNS in /etc/resolv.conf."""
    script = (f'mount --bind "$1" /tmp && mount -t tmpfs tmpfs /run && mkdir -p {SERVICE_ACCOUNT_DIR}'
              f' && mount --bind "$2" {SERVICE_ACCOUNT_DIR} && mount --bind "$2/resolv.conf" /etc/resolv.conf'
              ' && shift 2 && exec "$@"')  # fmt: skip
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", tmp, account_dir, *command]


# ---- CoreDNS, metrics-server, the Training Operator ------------------------------------------------


def start_addons(cluster: Cluster) -> None:
    kubectl, programs, admin = Kubectl(cluster), cluster.programs, cluster.admin_kubeconfig
    # CoreDNS out of the cluster, answering for cluster.local on the node's address (pods' resolver)
    corefile = corefile_text((".:53", [
        f"bind {cluster.control.ip}",
        "errors",
        ("kubernetes cluster.local in-addr.arpa ip6.arpa",
         [f"kubeconfig {admin}", "pods insecure", "fallthrough in-addr.arpa ip6.arpa"]),
        "cache 5",
    ]))  # fmt: skip
    write_file(cluster.conf / "Corefile", corefile)
    start_component(cluster, "coredns", [programs.coredns / "coredns", "-conf", cluster.conf / "Corefile"])
    # metrics-server out of the cluster, reached by the API server's aggregator through a Service
    # without a selector whose endpoint is the node's address: its own APIService and RBAC objects
    metrics = module_dir("sigs.k8s.io/metrics-server", cluster.versions.metrics_server) / "manifests" / "base"
    start_component(cluster, "metrics-server", [
        programs.metrics_server / "metrics-server", f"--kubeconfig={admin}", f"--authentication-kubeconfig={admin}",
        f"--authorization-kubeconfig={admin}", f"--bind-address={cluster.control.ip}", "--secure-port=4443",
        f"--cert-dir={cluster.state / 'metrics-server'}", "--kubelet-insecure-tls",
        "--kubelet-preferred-address-types=InternalIP", "--metric-resolution=15s"])  # fmt: skip
    kubectl("apply", "-f", metrics / "rbac.yaml", "-f", metrics / "apiservice.yaml")
    kubectl.apply(outside_service("kube-system", "metrics-server", cluster.control.ip, [(443, 4443)]))
    start_training_operator(cluster, kubectl)
    wait_for(
        cluster, 60, "metrics.k8s.io", lambda: kubectl.condition("apiservice", "v1beta1.metrics.k8s.io", "Available")
    )
    wait_for(cluster, 60, "the Training Operator", lambda: healthy(cluster, 8081))


def pytorch_init_container() -> list[Data]:
    """The operator's own init container (wait until the master's name resolves), with one change: the
    name asked is the master's full name in the pod's namespace. Debian's static busybox nslookup fails
    when any search domain answers NXDOMAIN (as svc.cluster.local rightly does), where the Alpine
    busybox of upstream's default image does not. A Go template the operator fills in."""
    wait = ('domain=$(sed -n "s/^search \\([^ ]*\\).*/\\1/p" /etc/resolv.conf); err=1;'
            'for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}.$domain.; then err=0 && break; fi;'
            'echo waiting for master; sleep 2; done; exit $err')  # fmt: skip
    return [{
        "name": "init-pytorch",
        "image": "{{.InitContainerImage}}",
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
        "command": ["sh", "-c", wait],
    }]  # fmt: skip


def start_training_operator(cluster: Cluster, kubectl: Kubectl) -> None:
    """The Training Operator out of the cluster (PyTorchJob only): its CRD and validating webhook from its
    own module; its webhook certificates, which it makes itself, in a /tmp of its own."""
    base = module_dir("github.com/kubeflow/training-operator", cluster.versions.training_operator) / "manifests/base"
    kubectl.create([namespace("kubeflow")])
    # its PyTorchJob CRD only: mpijobs.kubeflow.org is the MPI Operator's (v2beta1), as Kubeflow installs them together
    kubectl("apply", "--server-side", "-f", base / "crds" / "kubeflow.org_pytorchjobs.yaml")
    kubectl.create([secret("kubeflow", "training-operator-webhook-cert")])
    kubectl.apply(outside_service("kubeflow", "training-operator", cluster.control.ip, [(443, 9443)]))
    # what the operator's kustomization does to its webhook: name it as the operator expects, point it at
    # the operator's Service
    hooks = kubectl.read("-f", base / "webhook" / "manifests.yaml")
    for hook in hooks:
        meta = hook["metadata"]
        if isinstance(meta, dict) and meta.get("name") == "validating-webhook-configuration":
            meta["name"] = "validator.training-operator.kubeflow.org"
        for entry in _webhooks_of(hook):
            entry["clientConfig"]["service"].update(name="training-operator", namespace="kubeflow")
    kubectl.apply(hooks)
    tmp = cluster.state / "operator-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    template = cluster.conf / "pytorch-init-container.yaml"
    write_file(template, yaml_text(pytorch_init_container()))
    operator: list[str | Path] = [cluster.programs.training_operator / "training-operator.v1", "--metrics-bind-address=127.0.0.1:8088",
                "--health-probe-bind-address=127.0.0.1:8081", "--enable-scheme=pytorchjob",
                f"--pytorch-init-container-image={INIT_IMAGE}",
                f"--pytorch-init-container-template-file={template}"]  # fmt: skip
    env = {"MY_POD_NAMESPACE": "kubeflow", "KUBECONFIG": str(cluster.admin_kubeconfig)}
    start_component(cluster, "training-operator", with_private_tmp(tmp, operator), env=env)
    # in a cluster the kubelet mounts the certificate Secret the operator fills where it reads its
    # certificates; out of one, this does: the operator waits for those files before it starts
    certs = tmp / "k8s-webhook-server" / "serving-certs"
    wait_for(
        cluster,
        60,
        "the Training Operator's webhook certificate",
        lambda: bool(_operator_secret(kubectl).get("tls.key")),
    )
    wait_for(cluster, 60, "the Training Operator's certificate files", lambda: copy_webhook_certificate(kubectl, certs))


def _webhooks_of(configuration: Object) -> list[dict]:  # type: ignore[type-arg]
    hooks = configuration.get("webhooks")
    return [hook for hook in hooks if isinstance(hook, dict)] if isinstance(hooks, list) else []


def _operator_secret(kubectl: Kubectl) -> dict[str, str]:
    found = kubectl.get("secret", "training-operator-webhook-cert", "kubeflow")
    data = found.get("data")
    return dict(data) if isinstance(data, dict) else {}


def copy_webhook_certificate(kubectl: Kubectl, folder: Path) -> bool:
    """The Secret's three files from one read of it, each written whole (a rename) and tls.crt last: the
    operator starts its webhook server as soon as tls.crt exists, and its rotator may still rewrite the
    Secret (two reconciles race), so the copy succeeds only when the Secret, read again, still holds
    what was copied."""
    folder.mkdir(parents=True, exist_ok=True)
    before = kubectl.get("secret", "training-operator-webhook-cert", "kubeflow")
    data = before.get("data")
    keys = ("ca.crt", "tls.key", "tls.crt")
    if not isinstance(data, dict) or not all(data.get(key) for key in keys):
        return False
    for key in keys:
        partial = folder / f"{key}.new"
        partial.write_bytes(base64.b64decode(data[key]))
        partial.replace(folder / key)
    time.sleep(1)
    after = kubectl.get("secret", "training-operator-webhook-cert", "kubeflow")
    return _version(after) == _version(before)


def _version(found: object) -> object:
    meta = found.get("metadata") if isinstance(found, dict) else None
    return meta.get("resourceVersion") if isinstance(meta, dict) else None


# ---- JobSet, Kubeflow Trainer v2, the MPI Operator, Kueue --------------------------------------------


def make_webhook_ca(cluster: Cluster) -> Path:
    folder = cluster.pki / "webhooks"
    folder.mkdir(parents=True, exist_ok=True)
    run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=torchdeck-webhook-ca",
         "-keyout", folder / "ca.key", "-out", folder / "ca.crt"])  # fmt: skip
    return folder


def serving_certs(cluster: Cluster, service: str, namespace_name: str) -> Path:
    """A certificate for the Service SERVICE.NAMESPACE.svc in a folder mounted as that controller's /tmp
    (controller-runtime reads /tmp/k8s-webhook-server/serving-certs/tls.{crt,key}); the folder."""
    ca, tmp = cluster.pki / "webhooks", cluster.state / f"{service}-tmp"
    folder = tmp / "k8s-webhook-server" / "serving-certs"
    folder.mkdir(parents=True, exist_ok=True)
    host = f"{service}.{namespace_name}.svc"
    run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={host}", "-keyout", folder / "tls.key",
         "-out", folder / "tls.csr"])  # fmt: skip
    names = [f"DNS:{host}", f"DNS:{host}.cluster.local", f"IP:{cluster.control.ip}"]
    write_file(folder / "ext", "subjectAltName=" + ",".join(names) + "\n")
    run(["openssl", "x509", "-req", "-in", folder / "tls.csr", "-CA", ca / "ca.crt", "-CAkey", ca / "ca.key",
         "-CAcreateserial", "-days", "30", "-extfile", folder / "ext", "-out", folder / "tls.crt"])  # fmt: skip
    (folder / "ca.crt").write_bytes((ca / "ca.crt").read_bytes())
    return tmp


def apply_webhooks(cluster: Cluster, kubectl: Kubectl, service: tuple[str, str], prefix: str, source: Path) -> None:
    """The module's webhook configurations (a file, or a kustomization folder), named with PREFIX,
    pointed at SERVICE (namespace, name) and trusting the cluster's webhook CA."""
    bundle = base64.b64encode((cluster.pki / "webhooks" / "ca.crt").read_bytes()).decode()
    found = kubectl.read("-k" if source.is_dir() else "-f", source)
    configurations = [c for c in found if str(c.get("kind", "")).endswith("WebhookConfiguration")]
    for configuration in configurations:
        meta = configuration["metadata"]
        name = str(meta["name"]) if isinstance(meta, dict) else ""
        configuration["metadata"] = {"name": name if name.startswith(prefix) else prefix + name}
        for hook in _webhooks_of(configuration):
            hook["clientConfig"]["caBundle"] = bundle
            hook["clientConfig"]["service"].update(name=service[1], namespace=service[0])
    kubectl.apply(configurations)


def _health(port: int) -> dict[str, Data]:
    return {"healthProbeBindAddress": f"127.0.0.1:{port}"}


def start_jobset(cluster: Cluster, kubectl: Kubectl) -> None:
    """JobSet: Trainer v2 makes one per TrainJob."""
    components = module_dir("sigs.k8s.io/jobset", cluster.versions.jobset) / "config" / "components"
    kubectl.create([namespace("jobset-system")])
    kubectl("apply", "--server-side", "-k", components / "crd")
    kubectl.apply(outside_service("jobset-system", "jobset-webhook-service", cluster.control.ip, [(443, 9444)]))
    apply_webhooks(cluster, kubectl, ("jobset-system", "jobset-webhook-service"), "jobset-",
                   components / "webhook" / "manifests.yaml")  # fmt: skip
    config = {"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
              "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
              "webhook": {"port": 9444}, "health": _health(8084), "metrics": {"bindAddress": "0"}}  # fmt: skip
    write_file(cluster.conf / "jobset.yaml", yaml_text(config))
    tmp = serving_certs(cluster, "jobset-webhook-service", "jobset-system")
    command: list[str | Path] = [
        cluster.programs.jobset / "jobset",
        "--config",
        cluster.conf / "jobset.yaml",
        "--zap-devel=false",
    ]
    start_component(
        cluster, "jobset", with_private_tmp(tmp, command), env={"KUBECONFIG": str(cluster.admin_kubeconfig)}
    )


def start_trainer(cluster: Cluster, kubectl: Kubectl) -> Path:
    """Kubeflow Trainer v2 with the TrainJobStatus gate: its status server (port 10443) behind the
    Service and certificate of its webhooks, as upstream deploys it, and the Secret it reads the CA
    from; its manifests folder (the torch runtime is applied once its webhook answers)."""
    base = module_dir("github.com/kubeflow/trainer/v2", cluster.versions.trainer) / "manifests" / "base"
    service = ("kubeflow-system", "kubeflow-trainer-controller-manager")
    kubectl.create([namespace(service[0])])
    kubectl("apply", "--server-side", "-k", base / "crds")
    tmp = serving_certs(cluster, service[1], service[0])
    certs = tmp / "k8s-webhook-server" / "serving-certs"
    files = {name: (certs / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}
    kubectl.create([secret(service[0], "kubeflow-trainer-webhook-cert", files)])
    kubectl.apply(outside_service(*service, cluster.control.ip, [(443, 9445), (10443, 10443)]))
    apply_webhooks(cluster, kubectl, service, "", base / "webhook")
    config = {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "health": {**_health(8085), "readinessEndpointName": "readyz", "livenessEndpointName": "healthz"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": 9445},
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False, "webhookServiceName": service[1],
                           "webhookSecretName": "kubeflow-trainer-webhook-cert"},
        "statusServer": {"port": 10443},
        "featureGates": {"TrainJobStatus": True},
    }  # fmt: skip
    write_file(cluster.conf / "trainer.yaml", yaml_text(config))
    # (its status server reads the cluster's token issuer from its own service account token)
    account = pod_identity(cluster, kubectl, "trainer", *service)
    command: list[str | Path] = [
        cluster.programs.trainer / "trainer-controller-manager",
        "--config",
        cluster.conf / "trainer.yaml",
    ]
    start_component(
        cluster, "trainer", as_pod(tmp, account, command), env={"KUBECONFIG": str(cluster.admin_kubeconfig)}
    )
    return base


def pod_identity(cluster: Cluster, kubectl: Kubectl, name: str, namespace_name: str, account: str) -> Path:
    """The folder a pod of ACCOUNT would have at /run/secrets/kubernetes.io/serviceaccount (its token,
    namespace and CA), with the resolv.conf a pod in NAMESPACE has."""
    folder = cluster.state / f"{name}-serviceaccount"
    folder.mkdir(parents=True, exist_ok=True)
    kubectl.create([service_account(namespace_name, account)])
    token = kubectl("-n", namespace_name, "create", "token", account, "--duration", "720h")
    write_file(folder / "token", token.strip(), mode=0o600)
    write_file(folder / "namespace", namespace_name)
    (folder / "ca.crt").write_bytes((cluster.pki / "ca.crt").read_bytes())
    search = " ".join((f"{namespace_name}.svc.cluster.local", "svc.cluster.local", "cluster.local"))
    write_file(folder / "resolv.conf", f"nameserver {cluster.control.ip}\nsearch {search}\n")
    return folder


def start_mpi_operator(cluster: Cluster, kubectl: Kubectl) -> None:
    """The MPI Operator (v2beta1): no webhook; it elects a leader in its lock namespace and serves its
    health check on :8080 (fixed)."""
    source = module_dir("github.com/kubeflow/mpi-operator", cluster.versions.mpi_operator)
    kubectl.create([namespace("mpi-operator")])
    kubectl("apply", "--server-side", "-f", source / "manifests" / "base" / "kubeflow.org_mpijobs.yaml")
    # (it exits at once where the CRD is not served yet)
    wait_for(cluster, 30, "the MPIJob CRD", lambda: kubectl.condition("crd", "mpijobs.kubeflow.org", "Established"))
    start_component(cluster, "mpi-operator", [
        cluster.programs.mpi_operator / "mpi-operator", "--kubeConfig", cluster.admin_kubeconfig,
        "--lock-namespace", "mpi-operator", "--monitoring-port", "0", "--kube-api-qps", "50",
        "--kube-api-burst", "100"])  # fmt: skip


def mpi_leading(cluster: Cluster, kubectl: Kubectl) -> bool:
    if not running(cluster, "mpi-operator"):
        return False
    leases = json.loads(kubectl("-n", "mpi-operator", "get", "lease", "-o", "json")).get("items") or []
    specs = [lease.get("spec") for lease in leases if isinstance(lease, dict)]
    return any(isinstance(spec, dict) and spec.get("holderIdentity") for spec in specs)


def kueue_config(cluster: Cluster, kubectl: Kubectl, frameworks: Sequence[str]) -> None:
    """Kueue's configuration with these integrations, as the file it runs with and as the ConfigMap its
    manifests install (kueue-system/kueue-manager-config), where a user may read which job kinds it
    manages."""
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": _health(8086),
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": 9446},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(frameworks)},
    }
    text = yaml_text(config)
    write_file(cluster.conf / "kueue.yaml", text)
    kubectl.apply([config_map("kueue-system", "kueue-manager-config", {"controller_manager_config.yaml": text})],
                  server_side=True)  # fmt: skip


def _start_kueue_process(cluster: Cluster) -> None:
    # (--kubeconfig, not KUBECONFIG: its visibility server delegates authentication to the cluster through it)
    # (FailureRecoveryPolicy: it deletes by force a pod stuck on an unreachable node that says it is
    # safe to, which torchdeck's cluster.node_loss marks; alpha in v0.19, off by default)
    command: list[str | Path] = [cluster.programs.kueue / "kueue", "--config", cluster.conf / "kueue.yaml",
               "--kubeconfig", cluster.admin_kubeconfig, "--feature-gates=FailureRecoveryPolicy=true"]  # fmt: skip
    start_component(cluster, "kueue", with_private_tmp(cluster.state / "kueue-webhook-service-tmp", command))


def start_kueue(cluster: Cluster, kubectl: Kubectl) -> None:
    """Kueue with the integrations torchdeck submits, and its visibility API (pending positions)."""
    components = module_dir("sigs.k8s.io/kueue", cluster.versions.kueue) / "config" / "components"
    kubectl.create([namespace("kueue-system")])
    kubectl("apply", "--server-side", "-k", components / "crd")
    kubectl.apply([
        *outside_service("kueue-system", "kueue-webhook-service", cluster.control.ip, [(443, 9446)]),
        *outside_service("kueue-system", "visibility-server", cluster.control.ip, [(443, 8082)]),
    ])  # fmt: skip
    apply_webhooks(cluster, kubectl, ("kueue-system", "kueue-webhook-service"), "kueue-",
                   components / "webhook" / "manifests.yaml")  # fmt: skip
    visibility = components / "visibility"
    kubectl("apply", "-f", visibility / "apiservice_v1beta2.yaml", "-f", visibility / "apiservice_v1beta1.yaml")
    kueue_config(cluster, kubectl, KUEUE_FRAMEWORKS)
    webhook_certs = serving_certs(cluster, "kueue-webhook-service", "kueue-system") / "k8s-webhook-server/serving-certs"
    # with its certificate rotation off, Kueue reads its metrics server's certificate from a fixed path
    # and its visibility server's (the APIService skips verifying it, as upstream's does)
    visibility_certs = serving_certs(cluster, "visibility-server", "kueue-system") / "k8s-webhook-server/serving-certs"
    place_fixed(cluster, Path("/visibility"), visibility_certs / "tls.crt", visibility_certs / "tls.key")
    place_fixed(cluster, Path("/etc/kueue/metrics/certs"), webhook_certs / "tls.crt", webhook_certs / "tls.key")
    _start_kueue_process(cluster)


def start_controllers(cluster: Cluster) -> None:
    kubectl = Kubectl(cluster)
    make_webhook_ca(cluster)
    start_jobset(cluster, kubectl)
    trainer_base = start_trainer(cluster, kubectl)
    start_mpi_operator(cluster, kubectl)
    start_kueue(cluster, kubectl)
    wait_for(cluster, 60, "JobSet", lambda: healthy(cluster, 8084))
    wait_for(cluster, 60, "Kubeflow Trainer", lambda: healthy(cluster, 8085))
    wait_for(cluster, 60, "Kueue", lambda: healthy(cluster, 8086))
    wait_for(cluster, 60, "the MPI Operator", lambda: mpi_leading(cluster, kubectl))
    wait_for(cluster, 60, "Kueue's visibility API",
             lambda: kubectl.condition("apiservice", "v1beta2.visibility.kueue.x-k8s.io", "Available"))  # fmt: skip
    # the Trainer's torch runtime, as its manifests/base/runtimes install it (once its webhook answers)
    kubectl("apply", "--server-side", "-f", trainer_base / "runtimes" / "torch_distributed.yaml")


def upstream_kueue_frameworks(cluster: Cluster) -> list[str]:
    """The integrations Kueue's own manifests enable: the uncommented entries of integrations.frameworks
    in its config/components/manager/controller_manager_config.yaml."""
    path = (
        module_dir("sigs.k8s.io/kueue", cluster.versions.kueue)
        / "config/components/manager/controller_manager_config.yaml"
    )
    found: list[str] = []
    section = None
    for line in path.read_text().splitlines():
        if line.startswith("integrations:"):
            section = "integrations"
        elif section == "integrations" and line.startswith("  frameworks:"):
            section = "frameworks"
        elif section == "frameworks" and line[:1] not in ("", " "):
            break
        elif section == "frameworks" and line.startswith('  - "'):
            found.append(line.removeprefix('  - "').partition('"')[0])
    return found


def kueue_integrations(cluster: Cluster, which: str) -> None:
    """Kueue run again with its own default integrations, or with those torchdeck submits (what start
    gives it)."""
    if not cluster.kubeconfig.is_file():
        raise NoCluster("not started")
    frameworks = upstream_kueue_frameworks(cluster) if which == "default" else list(KUEUE_FRAMEWORKS)
    if not frameworks:
        raise NoCluster(f"no integrations read from Kueue {cluster.versions.kueue}'s own configuration")
    kubectl = Kubectl(cluster)
    kueue_config(cluster, kubectl, frameworks)
    stop_owned(15, [cluster.pid_file("kueue")])
    _start_kueue_process(cluster)
    wait_for(cluster, 60, "Kueue", lambda: healthy(cluster, 8086))
    say(f"Kueue runs with: {' '.join(frameworks)}")
