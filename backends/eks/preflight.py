"""What AWS says about a cluster plan before anything is created: whose
credentials these are (STS), the instance catalogue of the region and its
zones (EC2's describe_instance_types and describe_instance_type_offerings,
priced from the shipped table), the vCPU quotas of the instance families
(Service Quotas) against what the plan needs, the existing VPC's subnets, a
cluster of that name already there, and the cost per hour."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .aws_objects import Answer
from .plan import (
    ClusterPlan,
    CostLine,
    InstanceType,
    NodegroupPlan,
    cost_per_hour,
    made_by_torchdeck,
    shipped_catalogue,
)
from .session import AwsError, AwsSession

# EC2's vCPU quotas by instance family: (on-demand code, spot code, name). The
# longest matching prefix of the type's family picks one; the rest are standard.
QUOTAS: dict[str, tuple[str, str, str]] = {
    "standard": ("L-1216C47A", "L-34B43A08", "Standard (A, C, D, H, I, M, R, T, Z) instances"),
    "g": ("L-DB2E81BA", "L-3819A6DF", "G and VT instances"),
    "vt": ("L-DB2E81BA", "L-3819A6DF", "G and VT instances"),
    "p": ("L-417A185B", "L-7212CCBC", "P instances"),
    "inf": ("L-1945791B", "L-B5D1601B", "Inf instances"),
    "trn": ("L-2C3B7624", "L-6B0D517C", "Trn instances"),
    "x": ("L-7295265B", "L-E3A00192", "X instances"),
    "f": ("L-74FC7D96", "L-88CF9481", "F instances"),
    "dl": ("L-6E869C2A", "L-85EED4F7", "DL instances"),
}
DESCRIBE_BATCH = 100  # describe_instance_types takes 100 names at most


def quota_class(instance_type: str) -> str:
    """The quota an instance type counts against: g5.xlarge -> g, inf2.xlarge -> inf, m5.large -> standard."""
    family = instance_type.split(".")[0]
    letters = family[: len(family) - len(family.lstrip("abcdefghijklmnopqrstuvwxyz"))]
    return letters if letters in QUOTAS else "standard"


@dataclass
class Finding:
    """One preflight result: ``level`` is ok, warn or error."""

    level: str
    text: str
    hint: str = ""


@dataclass
class Catalogue:
    """The instance types of a region, and the zones that offer each."""

    types: dict[str, InstanceType]
    zones_of: dict[str, set[str]]
    zones: list[str]
    live: bool
    """From EC2 (True), or the shipped table with every zone assumed (False)."""
    region: str = ""

    def offered_everywhere(self, zones: list[str] | None = None) -> list[InstanceType]:
        zones = zones or self.zones
        return [t for name, t in sorted(self.types.items()) if set(zones) <= self.zones_of.get(name, set())]


def _from_ec2(item: Answer, shipped: dict[str, InstanceType]) -> InstanceType:
    """One of EC2's instance types (describe_instance_types) in the catalogue's terms."""
    name = item.text("InstanceType")
    gpus = item.children("GpuInfo", "Gpus")
    count = sum(int(g.number("Count")) for g in gpus)
    model = " ".join(filter(None, [gpus[0].text("Manufacturer"), gpus[0].text("Name")])) if gpus else ""
    total_mib = item.number("GpuInfo", "TotalGpuMemoryInMiB")
    known = shipped.get(name)
    return InstanceType(
        name=name,
        vcpus=int(item.number("VCpuInfo", "DefaultVCpus")),
        memory_gib=round(item.number("MemoryInfo", "SizeInMiB") / 1024, 1),
        price=known.price if known else None,
        gpus=count,
        gpu_model=model,
        gpu_memory_gib=round(total_mib / count / 1024, 1) if count else 0.0,
        efa=item.flag("NetworkInfo", "EfaSupported"),
    )


def availability_zones(aws: AwsSession) -> list[str]:
    """The region's zones that are available to this account."""
    answer = aws.call("ec2", "describe_availability_zones", Filters=[{"Name": "state", "Values": ["available"]}])
    return sorted(
        z["ZoneName"]
        for z in answer.get("AvailabilityZones", [])
        if z.get("ZoneType", "availability-zone") == "availability-zone"
    )


def live_catalogue(aws: AwsSession, zones: list[str] | None = None, only: set[str] | None = None) -> Catalogue:
    """Types offered in the zones: the shipped table's and every GPU type; or just the ``only`` ones
    (the preflight's: describing every type of a region takes a few seconds)."""
    zones = zones or availability_zones(aws)
    zones_of: dict[str, set[str]] = {}
    for offer in aws.pages(
        "ec2",
        "describe_instance_type_offerings",
        "InstanceTypeOfferings",
        LocationType="availability-zone",
        Filters=[{"Name": "location", "Values": list(zones)}],
    ):
        zones_of.setdefault(offer["InstanceType"], set()).add(offer["Location"])
    shipped = shipped_catalogue()
    names = sorted(zones_of if only is None else set(zones_of) & set(only))
    types: dict[str, InstanceType] = {}
    for start in range(0, len(names), DESCRIBE_BATCH):
        batch = names[start : start + DESCRIBE_BATCH]
        for item in aws.pages("ec2", "describe_instance_types", "InstanceTypes", InstanceTypes=batch):
            kind = _from_ec2(Answer(item), shipped)
            if only is not None or kind.name in shipped or kind.gpus:
                types[kind.name] = kind
    return Catalogue(types, zones_of, list(zones), live=True, region=aws.region or "")


def shipped_only(zones: list[str]) -> Catalogue:
    """The catalogue without AWS: the shipped table, every zone assumed to offer every type."""
    types = shipped_catalogue()
    return Catalogue(types, {name: set(zones) for name in types}, list(zones), live=False)


@dataclass
class PreflightReport:
    """What ``torchdeck cluster plan`` prints, and the wizard shows before create."""

    account: str = ""
    identity: str = ""
    findings: list[Finding] = field(default_factory=list)
    cost: list[CostLine] = field(default_factory=list)
    total_per_hour: float = 0.0
    notes: list[str] = field(default_factory=list)
    existing_cluster: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)


def _quota(aws: AwsSession, code: str) -> float | None:
    try:
        answer = aws.call("service-quotas", "get_service_quota", ServiceCode="ec2", QuotaCode=code)
    except AwsError as exc:
        if exc.code in (
            "NoSuchResourceException",
            "ResourceNotFoundException",
            "AccessDeniedException",
            "AccessDenied",
        ):
            return None
        raise
    return Answer(answer).number("Quota", "Value")


def vcpus_needed(plan: ClusterPlan, types: dict[str, InstanceType]) -> dict[tuple[str, bool], tuple[int, int]]:
    """(quota class, spot) -> (vCPUs at desired sizes, vCPUs at max sizes)."""
    need: dict[tuple[str, bool], tuple[int, int]] = {}
    for ng in plan.nodegroups:
        info = types.get(ng.instance_type)
        if info is None:
            continue
        key = (quota_class(ng.instance_type), ng.spot)
        desired, most = need.get(key, (0, 0))
        need[key] = (desired + ng.desired * info.vcpus, most + ng.max_size * info.vcpus)
    return need


def preflight(aws: AwsSession, plan: ClusterPlan) -> PreflightReport:
    """Every check, in the order a person would make them; a failed AWS call is a finding, not a crash,
    except for credentials (nothing else can be checked without them)."""
    report = PreflightReport()
    who = aws.call("sts", "get_caller_identity")
    report.account, report.identity = who.get("Account", ""), who.get("Arn", "")
    report.findings.append(Finding("ok", f"credentials: {report.identity} (account {report.account})"))
    catalogue = _catalogue(aws, plan, report)
    types = {**shipped_catalogue(), **catalogue.types}
    report.findings += _quota_findings(aws, plan, types)
    if plan.vpc_id:
        report.findings += _subnet_findings(aws, plan)
    report.findings.append(_existing_cluster(aws, plan, report))
    report.cost, report.total_per_hour, report.notes = cost_per_hour(plan, types)
    return report


def _catalogue(aws: AwsSession, plan: ClusterPlan, report: PreflightReport) -> Catalogue:
    """The plan's types as EC2 offers them in its zones (the shipped table where EC2 cannot be read),
    with a finding for each zone, type, GPU or EFA the plan asks of it and it lacks."""
    try:
        zones = plan.zones or availability_zones(aws)
        catalogue = live_catalogue(aws, zones, {ng.instance_type for ng in plan.nodegroups})
    except AwsError as exc:
        report.findings.append(Finding("warn", f"cannot read the instance catalogue: {exc.message}", exc.hint))
        return shipped_only(plan.zones)
    known_zones = set().union(*catalogue.zones_of.values()) if catalogue.zones_of else set()
    for zone in plan.zones:
        if zone not in known_zones:
            report.findings.append(
                Finding(
                    "error",
                    f"zone {zone} offers no instance types to this account",
                    "pick zones from: " + ", ".join(sorted(known_zones)),
                )
            )
    for ng in plan.nodegroups:
        report.findings += _nodegroup_findings(ng, catalogue, zones, plan.region)
    return catalogue


def _nodegroup_findings(ng: NodegroupPlan, catalogue: Catalogue, zones: list[str], region: str) -> list[Finding]:
    """Whether the nodegroup's type is offered in every zone, and has the GPUs and EFA it asks for."""
    findings = []
    offered = catalogue.zones_of.get(ng.instance_type, set())
    missing = [z for z in zones if z not in offered]
    if not offered:
        findings.append(
            Finding(
                "error",
                f"{ng.name}: {ng.instance_type} is not offered in {region}",
                "pick a type that `torchdeck cluster types` lists",
            )
        )
    elif missing:
        findings.append(
            Finding(
                "error",
                f"{ng.name}: {ng.instance_type} is not offered in {', '.join(missing)}",
                f"use zones where it is: {', '.join(sorted(offered))}",
            )
        )
    else:
        findings.append(Finding("ok", f"{ng.name}: {ng.instance_type} is offered in every zone"))
    info = catalogue.types.get(ng.instance_type)
    if info is not None and ng.gpu and not info.gpus:
        findings.append(
            Finding("error", f"{ng.name}: {ng.instance_type} has no GPU", "pick a GPU type, or make it a CPU nodegroup")
        )
    if info is not None and ng.efa and not info.efa:
        findings.append(
            Finding("error", f"{ng.name}: {ng.instance_type} does not support EFA", "drop efa, or pick an EFA type")
        )
    return findings


def _quota_findings(aws: AwsSession, plan: ClusterPlan, types: dict[str, InstanceType]) -> list[Finding]:
    """The vCPUs the plan needs of each quota class (on demand, spot) against the account's quota."""
    findings = []
    for (klass, spot), (desired, most) in sorted(vcpus_needed(plan, types).items()):
        on_demand, spot_code, label = QUOTAS[klass]
        code = spot_code if spot else on_demand
        what = f"{'spot' if spot else 'on-demand'} {label}"
        try:
            limit = _quota(aws, code)
        except AwsError as exc:
            findings.append(Finding("warn", f"cannot read the quota for {what}: {exc.message}", exc.hint))
            continue
        if limit is None:
            findings.append(
                Finding(
                    "warn",
                    f"quota for {what} ({code}) is unknown: {desired} vCPUs needed",
                    "check it in the Service Quotas console",
                )
            )
        elif desired > limit:
            findings.append(
                Finding(
                    "error",
                    f"the plan needs {desired} vCPUs of {what}; the quota is {limit:g}",
                    f"request an increase of {code} in the Service Quotas console (it takes hours to days)",
                )
            )
        elif most > limit:
            findings.append(
                Finding(
                    "warn",
                    f"{what}: {desired} vCPUs fit the quota of {limit:g}, but the max sizes need {most}",
                    f"request an increase of {code}, or lower max",
                )
            )
        else:
            findings.append(Finding("ok", f"{what}: {most} vCPUs needed at most, quota {limit:g}"))
    return findings


def _subnet_findings(aws: AwsSession, plan: ClusterPlan) -> list[Finding]:
    """Whether the plan's subnets exist, in its VPC and in the zones it names them for."""
    findings = []
    try:
        ids = list(plan.subnets.values())
        found = {s["SubnetId"]: s for s in aws.call("ec2", "describe_subnets", SubnetIds=ids).get("Subnets", [])}
    except AwsError as exc:
        found = {}
        findings.append(
            Finding(
                "error",
                f"the subnets are not there: {exc.message}",
                "check --subnet ids (aws ec2 describe-subnets)",
            )
        )
    wrong = []
    for zone, sid in plan.subnets.items():
        subnet = found.get(sid)
        if subnet is None:
            continue
        if subnet.get("VpcId") != plan.vpc_id:
            wrong.append(Finding("error", f"subnet {sid} is in {subnet.get('VpcId')}, not {plan.vpc_id}"))
        elif subnet.get("AvailabilityZone") != zone:
            wrong.append(
                Finding(
                    "error",
                    f"subnet {sid} is in {subnet.get('AvailabilityZone')}, not {zone}",
                    "write ZONE=SUBNET as describe-subnets shows them",
                )
            )
    findings += wrong
    if found and not wrong:
        findings.append(Finding("ok", f"VPC {plan.vpc_id}: subnets in {', '.join(sorted(plan.subnets))}"))
    return findings


def _existing_cluster(aws: AwsSession, plan: ClusterPlan, report: PreflightReport) -> Finding:
    """A cluster of the plan's name: torchdeck's (create reuses it), someone else's (refused), or none."""
    existing = aws.find("eks", "describe_cluster", name=plan.name)
    if not existing:
        return Finding("ok", f"no cluster named {plan.name} in {plan.region} yet")
    cluster = existing["cluster"]
    report.existing_cluster = cluster
    if made_by_torchdeck(cluster, plan.name):
        return Finding(
            "warn",
            f"cluster {plan.name} exists ({cluster.get('status')}), made by torchdeck",
            "create reuses it and adds what is missing",
        )
    return Finding(
        "error",
        f"a cluster named {plan.name} exists in {plan.region}, not made by torchdeck",
        f"pick another name, or `torchdeck cluster connect --name {plan.name}` to use it as it is",
    )
