"""moto in server mode on 127.0.0.1: a real HTTP endpoint that boto3 reaches
through AWS_ENDPOINT_URL, as the product's own code does in the cloud.

moto 5 lacks three things the EKS tests need; ``MotoGaps`` adds them on the
server side, where the product cannot tell them from AWS:

- EKS add-ons (CreateAddon, DescribeAddon, ListAddons, DeleteAddon): moto
  has no add-on routes; they are added to its EKS service, ACTIVE at once.
- EC2 vCPU quotas in Service Quotas: moto knows the VPC ones only; a test
  sets the EC2 ones it needs (``gaps.quotas[code] = value``).
- An API server: moto's clusters have a made-up endpoint and CA; with
  ``gaps.cluster_endpoint`` set (a kmock emulator's URL) new clusters get that
  endpoint and a well-formed CA, so the kubeconfig torchdeck writes reaches it.
- Policy conditions: moto holds a condition on a key the request does not carry
  to be true, and a statement whose condition fails to be a DENY, so a bucket
  policy's ``Deny ... if aws:SecureTransport is false`` refused every call. In AWS
  a condition on a missing key fails (short of ``...IfExists``) and such a
  statement simply does not apply; here too.
- Faults: ``gaps.fail("eks", "CreateNodegroup", "ThrottlingException", times=2)``
  makes the next calls answer that error, as AWS does under load; ``gaps.calls``
  counts every call by (service, action) so a test sees the retries.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
import os
import socket
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _service_error(code: str, message: str) -> Exception:
    """An error moto serialises in the calling service's protocol (its class must live outside moto)."""
    from moto.core.exceptions import ServiceException

    class AwsServiceError(ServiceException):
        pass

    return AwsServiceError(code, message)


class MotoGaps:
    """Server-side additions to moto (see the module docstring)."""

    def __init__(self) -> None:
        self.addons: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
        self.quotas: dict[str, float] = {}
        self.faults: dict[tuple[str, str], list[tuple[str, str, int | None]]] = {}
        self.calls: collections.Counter = collections.Counter()
        self.cluster_endpoint: str | None = None
        self.fsx_ready_after: int | None = 2
        self.fsx_looks: dict[str, int] = {}
        self.lock = threading.Lock()

    def fail(
        self, service: str, action: str, code: str, times: int = 1, message: str = "", status: int | None = None
    ) -> None:
        """The next ``times`` calls of ``action`` answer ``code`` (HTTP ``status``; default: what
        moto's model says, or 400), as AWS does under load or in an outage."""
        with self.lock:
            self.faults.setdefault((service, action), []).extend([(code, message or code, status)] * times)

    def reset(self) -> None:
        with self.lock:
            self.faults.clear()
            self.calls.clear()
            self.quotas.clear()
            self.cluster_endpoint = None
            self.fsx_ready_after = 2
            self.fsx_looks.clear()

    def install(self) -> None:
        from moto.core.responses import ActionResult, BaseResponse
        from moto.eks import urls as eks_urls
        from moto.eks.responses import EKSResponse
        from moto.servicequotas.models import ServiceQuotasBackend

        gaps = self
        original_call = BaseResponse.call_action

        def call_action(response: BaseResponse):
            action = response._get_action() or ""
            key = (response.service_name or "", action)
            with gaps.lock:
                gaps.calls[key] += 1
                pending = gaps.faults.get(key)
                fault = pending.pop(0) if pending else None
            if fault is not None:
                code, message, forced = fault
                status, headers, body = response.serialized(ActionResult(_service_error(code, message)))
                return forced or (400 if status == 200 else status), headers, body
            return original_call(response)

        BaseResponse.call_action = call_action  # type: ignore[method-assign,assignment]

        from moto.iam.access_control import IAMPolicyStatement, PermissionResult

        original_permitted = IAMPolicyStatement.is_action_permitted

        def is_action_permitted(statement, action, resource="*", principal=None, incoming_condition_values=None):
            conditions = statement._statement.get("Condition") or {}
            given = incoming_condition_values or {}
            missing = any(
                k not in given for op, keys in conditions.items() if not op.endswith("IfExists") for k in keys
            )
            if conditions and (missing or not statement._check_conditions(incoming_condition_values)):
                return PermissionResult.NEUTRAL  # AWS: a statement applies only where its condition holds
            return original_permitted(statement, action, resource, principal, incoming_condition_values)

        IAMPolicyStatement.is_action_permitted = is_action_permitted  # type: ignore[method-assign,assignment]

        original_quota = ServiceQuotasBackend.get_service_quota

        def get_service_quota(backend, service_code: str, quota_code: str) -> dict[str, Any]:
            if service_code == "ec2" and quota_code in gaps.quotas:
                return {
                    "ServiceCode": "ec2",
                    "QuotaCode": quota_code,
                    "QuotaName": quota_code,
                    "Value": gaps.quotas[quota_code],
                    "Unit": "None",
                    "Adjustable": True,
                    "GlobalQuota": False,
                }
            return original_quota(backend, service_code, quota_code)

        ServiceQuotasBackend.get_service_quota = get_service_quota  # type: ignore[method-assign,assignment]

        dispatch = EKSResponse.dispatch
        eks_urls.url_paths.setdefault("{0}/clusters/(?P<name>[^/]+)/addons$", dispatch)
        eks_urls.url_paths.setdefault("{0}/clusters/(?P<name>[^/]+)/addons/(?P<addonName>[^/]+)$", dispatch)

        def where(response: EKSResponse) -> tuple[tuple[str, str, str], str]:
            cluster = response._get_param("clusterName") or response.uri_match.get("name", "")
            if cluster not in response.eks_backend.clusters:
                raise _service_error("ResourceNotFoundException", f"No cluster found for name: {cluster}.")
            return (response.current_account, response.region, cluster), cluster

        def create_addon(response: EKSResponse):
            key, cluster = where(response)
            name = response._get_param("addonName")
            now = dt.datetime.now(dt.timezone.utc)
            with gaps.lock:
                addons = gaps.addons.setdefault(key, {})
                if name in addons:
                    raise _service_error("ResourceInUseException", f"Addon already exists with name: {name}")
                addons[name] = {
                    "addonName": name,
                    "clusterName": cluster,
                    "status": "ACTIVE",
                    "addonVersion": response._get_param("addonVersion") or "v1.0.0-eksbuild.1",
                    "addonArn": f"arn:aws:eks:{response.region}:{response.current_account}:addon/{cluster}/{name}/x",
                    "serviceAccountRoleArn": response._get_param("serviceAccountRoleArn"),
                    "tags": response._get_param("tags") or {},
                    "createdAt": now,
                    "modifiedAt": now,
                    "health": {"issues": []},
                }
                return ActionResult({"addon": addons[name]})

        def describe_addon(response: EKSResponse):
            key, cluster = where(response)
            name = response._get_param("addonName")
            addon = gaps.addons.get(key, {}).get(name)
            if addon is None:
                raise _service_error("ResourceNotFoundException", f"No addon: {name} found in cluster: {cluster}")
            return ActionResult({"addon": addon})

        def list_addons(response: EKSResponse):
            key, _ = where(response)
            return ActionResult({"addons": sorted(gaps.addons.get(key, {}))})

        def delete_addon(response: EKSResponse):
            key, cluster = where(response)
            name = response._get_param("addonName")
            with gaps.lock:
                addon = gaps.addons.get(key, {}).pop(name, None)
            if addon is None:
                raise _service_error("ResourceNotFoundException", f"No addon: {name} found in cluster: {cluster}")
            return ActionResult({"addon": {**addon, "status": "DELETING"}})

        from moto.eks.models import Cluster

        original_init = Cluster.__init__

        def cluster_init(cluster, *args: Any, **kwargs: Any) -> None:
            original_init(cluster, *args, **kwargs)
            # EKS makes a security group for every cluster and reports it and the VPC; moto does neither
            _, region, account = cluster.arn.split(":")[2:5]
            vpc_config = cluster.resources_vpc_config or {}
            subnets = vpc_config.get("subnetIds") or []
            if subnets:
                from moto.ec2.models import ec2_backends

                ec2 = ec2_backends[account][region]
                vpc_id = ec2.get_subnet(subnets[0]).vpc_id
                group = ec2.create_security_group(
                    f"eks-cluster-sg-{cluster.name}", "EKS created security group", vpc_id
                )
                cluster.resources_vpc_config = {**vpc_config, "vpcId": vpc_id, "clusterSecurityGroupId": group.id}
            if gaps.cluster_endpoint:
                cluster.endpoint = gaps.cluster_endpoint
                pem = "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"
                cluster.certificate_authority = {"data": base64.b64encode(pem.encode()).decode()}

        Cluster.__init__ = cluster_init  # type: ignore[method-assign,assignment]

        from moto.eks.models import EKSBackend

        original_delete = EKSBackend.delete_cluster

        def delete_cluster(backend, name: str):
            deleted = original_delete(backend, name)
            group = (deleted.resources_vpc_config or {}).get("clusterSecurityGroupId")
            if group:  # EKS deletes the group it made with the cluster
                from moto.ec2.models import ec2_backends

                ec2_backends[backend.account_id][backend.region_name].delete_security_group(group_id=group)
            return deleted

        EKSBackend.delete_cluster = delete_cluster  # type: ignore[method-assign,assignment]

        for fn in (create_addon, describe_addon, list_addons, delete_addon):
            setattr(EKSResponse, fn.__name__, fn)

        # FSx: a Lustre file system is CREATING for a few looks, then AVAILABLE with a mount name (moto
        # reports no lifecycle at all); ``fsx_ready_after = None`` keeps it CREATING for ever
        from moto.fsx.models import FileSystem

        original_to_dict = FileSystem.to_dict

        def fsx_to_dict(fs) -> dict[str, Any]:
            out = original_to_dict(fs)
            with gaps.lock:
                looks = gaps.fsx_looks[fs.file_system_id] = gaps.fsx_looks.get(fs.file_system_id, -1) + 1
            ready = gaps.fsx_ready_after is not None and looks >= gaps.fsx_ready_after
            out["Lifecycle"] = "AVAILABLE" if ready else "CREATING"
            if out.get("FileSystemType") == "LUSTRE":
                out["LustreConfiguration"] = {
                    **(out.get("LustreConfiguration") or {}),
                    "MountName": fs.file_system_id.replace("fs-", "")[:8],
                }
            return out

        FileSystem.to_dict = fsx_to_dict  # type: ignore[method-assign,assignment]


@pytest.fixture(scope="session")
def moto_gaps() -> MotoGaps:
    # AWS's managed policies (AmazonEKSClusterPolicy...) exist in every account; moto loads them on request
    os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "true"
    gaps = MotoGaps()
    gaps.install()
    return gaps


@pytest.fixture(scope="session")
def moto_endpoint(moto_gaps: MotoGaps) -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def aws_env(moto_endpoint: str, moto_gaps: MotoGaps, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment for boto3 (in this process and in subprocesses) to use moto."""
    moto_gaps.reset()
    moto_gaps.addons.clear()
    # every test starts from an empty account (moto's own reset endpoint)
    urllib.request.urlopen(urllib.request.Request(moto_endpoint + "/moto-api/reset", method="POST"), timeout=30).read()
    values = {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(key, raising=False)
    return values
