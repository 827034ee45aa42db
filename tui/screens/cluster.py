"""The EKS cluster wizard: a plan typed field by field and checked as it is
typed (each field says what is wrong with it), the instance catalogue of the
region's zones to pick worker types from, the eksctl ClusterConfig and its
cost per hour beside it, then save, preflight and create, with the create's
phase, elapsed time and latest events in one view. It opens on the plan file
(cluster.yaml) where there is one."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import DataTable, Input, Select, Static

from torchdeck.backends.eks.plan import (
    DEFAULT_VERSION,
    EKS_VERSIONS,
    ClusterPlan,
    apply_labels,
    cost_per_hour,
    format_nodegroup,
    load_plan,
    parse_nodegroup,
    parse_subnets,
    plan_to_yaml,
    save_plan,
    validate_plan,
)
from torchdeck.backends.eks.preflight import Catalogue
from torchdeck.backends.errors import BackendError, SpecError

from ..messages import CatalogueLoaded, PreflightChecked
from .base import error_text
from .cloud_steps import CloudStepsScreen
from .confirm import ConfirmScreen
from .form import Field

FIELDS: list[Field] = [
    Field("name", "Cluster name", "torchdeck-demo", "Cluster name: lower-case letters, digits and '-'"),
    Field("region", "Region", "us-west-2", "The AWS region to create it in"),
    Field("zones", "Zones", "us-west-2a,us-west-2b", "Availability zones, comma-separated (two at least)"),
    Field("version", "Kubernetes", help="The Kubernetes version of the control plane"),
    Field(
        "vpc", "Existing VPC", "empty: eksctl makes one", "An existing VPC id (vpc-...); empty: eksctl makes a new VPC"
    ),
    Field(
        "subnets",
        "Private subnets",
        "us-west-2a=subnet-0abc,...",
        "With a VPC: its private subnets, ZONE=subnet-ID, comma-separated",
    ),
    Field("system", "System nodes", "system:m5.large:1:2:2", "The system nodegroup NAME:TYPE:MIN:DESIRED:MAX"),
    Field(
        "workers",
        "Workers",
        "gpu:g5.xlarge:0:1:2:gpu",
        "Worker nodegroups NAME:TYPE:MIN:DESIRED:MAX[:gpu,spot,efa], ';' between (a: add the catalogue's row)",
    ),
    Field("labels", "Node labels", "gpu:team=ml", "Node labels NODEGROUP:KEY=VALUE, comma-separated"),
    Field("volume", "Root volume GiB", "100", "Root volume per node, in GiB"),
    Field("bucket", "S3 bucket", "empty: no S3 access", "The S3 bucket for models (empty: no S3 service account)"),
    Field("prefix", "S3 key prefix", "torchdeck/", "The key prefix the service account may use"),
    Field("account", "Service account", "default/torchdeck-s3", "The S3 service account, NAMESPACE/NAME"),
]
PLAN_FIELDS = {
    "name": "name",
    "region": "region",
    "zones": "zones",
    "version": "version",
    "vpc_id": "vpc",
    "subnets": "subnets",
    "s3_bucket": "bucket",
    "s3_prefix": "prefix",
    "labels": "labels",
}


def field_for(error_field: str) -> str:
    """The form field a plan error belongs to."""
    if error_field.startswith("nodegroups[system]"):
        return "system"
    if error_field.startswith("nodegroups"):
        return "labels" if error_field.endswith(".labels") else "workers"
    return PLAN_FIELDS.get(error_field, error_field if any(f.id == error_field for f in FIELDS) else "")


def cost_text(plan: ClusterPlan, width: int = 26) -> Text:
    """The plan's cost per hour, a line per item, the total in bold and the notes dimmed."""
    lines, total, notes = cost_per_hour(plan)
    out = [
        Text(f"{line.what:<{width}} " + ("price unknown" if line.total is None else f"${line.total:,.2f}/h"))
        for line in lines
    ]
    out.append(Text(f"{'estimated total':<{width}} ${total:,.2f}/h (~${total * 24 * 30:,.0f}/month)", "bold"))
    out += [Text(f"note: {note}", "dim") for note in notes]
    return Text("\n").join(out)


class ClusterScreen(CloudStepsScreen["ClusterPlan"]):
    CSS_PATH = ["cloud.tcss", "cluster.tcss"]
    FORM = FIELDS
    SIDE_NAME = "types, plan and cost"
    BINDINGS = [
        Binding("f2", "side", "Plan"),
        Binding("ctrl+s", "save", "Save", priority=True),
        Binding("ctrl+t", "check", "Preflight", priority=True),
        Binding("ctrl+g", "create", "Create", priority=True),
        Binding("ctrl+l", "load_catalogue", "EC2 types", priority=True),
        Binding("a", "add_worker", "Add type as workers", show=False),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, plan_file: Path):
        super().__init__()
        self.plan_file = plan_file
        self.new_plan = True
        self.plan: ClusterPlan | None = None
        self.catalogue: Catalogue | None = None

    def field_widgets(self) -> dict[str, Widget]:
        return {
            "version": Select([(v, v) for v in EKS_VERSIONS], allow_blank=False, value=DEFAULT_VERSION, id="f-version"),
            "volume": Input(id="f-volume", restrict=r"[0-9]*"),
        }

    def side(self) -> ComposeResult:
        yield Static(id="catalogue-source")
        yield DataTable(id="catalogue", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="plan-pane"):
            yield Static(id="cost")
            yield Static(id="plan-yaml")

    def on_mount(self) -> None:
        table = self.query_one("#catalogue", DataTable)
        table.add_columns("type", "vCPUs", "memory", "GPUs", "EFA", "$/h")
        plan = None
        if self.plan_file.exists():
            try:
                plan = load_plan(self.plan_file)
            except SpecError as exc:
                self.form_error(f"{exc} - the form starts empty; saving overwrites the file")
        self.new_plan = plan is None
        self.show_title()
        self.fill(plan)
        from torchdeck.backends.eks.preflight import shipped_only

        self.show_catalogue(shipped_only(plan.zones if plan else []))
        self.query_one("#f-name", Input).focus()

    def title_text(self) -> str:
        return f"EKS cluster wizard - {self.plan_file}" + (" (new plan)" if self.new_plan else "")

    # -- the form ---------------------------------------------------------------------

    def fill(self, plan: ClusterPlan | None) -> None:
        if plan is None:
            values = {
                "region": "us-west-2",
                "zones": "us-west-2a,us-west-2b",
                "system": "system:m5.large:1:2:2",
                "workers": "cpu-workers:m5.2xlarge:1:2:4",
                "volume": "100",
                "prefix": "torchdeck/",
                "account": "default/torchdeck-s3",
            }
        else:
            system = next((g for g in plan.nodegroups if g.name == "system"), None)
            workers = [g for g in plan.nodegroups if g is not system]
            labels = [
                f"{g.name}:{k}={v}"
                for g in plan.nodegroups
                for k, v in g.labels.items()
                if not (g is system and (k, v) == ("role", "system"))
            ]
            values = {
                "name": plan.name,
                "region": plan.region,
                "zones": ",".join(plan.zones),
                "vpc": plan.vpc_id or "",
                "subnets": ",".join(f"{z}={s}" for z, s in plan.subnets.items()),
                "system": format_nodegroup(system) if system else "",
                "workers": "; ".join(format_nodegroup(g) for g in workers),
                "labels": ",".join(labels),
                "volume": str(plan.nodegroups[0].volume_gib if plan.nodegroups else 100),
                "bucket": plan.s3_bucket or "",
                "prefix": plan.s3_prefix,
                "account": f"{plan.namespace}/{plan.service_account}",
            }
            self.query_one("#f-version", Select).value = plan.version
        for field in FIELDS:
            if field.id != "version":
                self.set_value(field.id, values.get(field.id, ""))
        self.check_form()

    def build_plan(self) -> ClusterPlan:
        """The plan the form describes, checked (raises SpecError naming the field)."""

        def items(field: str, sep: str = ",") -> list[str]:
            return [x.strip() for x in self.value(field).split(sep) if x.strip()]

        system = parse_nodegroup(self.value("system"), "system") if self.value("system") else None
        workers = [parse_nodegroup(w, "workers") for w in items("workers", ";")]
        volume = int(self.value("volume") or 0)
        groups = ([system] if system else []) + workers
        for group in groups:
            group.volume_gib = volume
        if system:
            system.labels = {"role": "system"}
        apply_labels(groups, items("labels"), "labels")
        namespace, slash, account = self.value("account").partition("/")
        if not slash or not namespace or not account:
            raise SpecError("account", "expected NAMESPACE/NAME", "e.g. default/torchdeck-s3")
        plan = ClusterPlan(
            name=self.value("name"),
            region=self.value("region"),
            zones=items("zones"),
            version=self.value("version"),
            vpc_id=self.value("vpc") or None,
            subnets=parse_subnets(items("subnets")),
            nodegroups=groups,
            s3_bucket=self.value("bucket") or None,
            s3_prefix=self.value("prefix"),
            service_account=account,
            namespace=namespace,
        )
        validate_plan(plan)
        self.check_offered(plan)
        return plan

    def check_offered(self, plan: ClusterPlan) -> None:
        """With the region's catalogue loaded: every type must be offered in every chosen zone."""
        catalogue = self.catalogue
        if catalogue is None or not catalogue.live or catalogue.region != plan.region:
            return
        for group in plan.nodegroups:
            offered = catalogue.zones_of.get(group.instance_type, set())
            missing = [z for z in plan.zones if z not in offered]
            if missing:
                field = "nodegroups[system]" if group.name == "system" else f"nodegroups[{group.name}]"
                raise SpecError(
                    field,
                    f"{group.instance_type} is not offered in {', '.join(missing)}",
                    f"zones that offer it: {', '.join(sorted(offered)) or 'none'}",
                )

    def check_form(self) -> ClusterPlan | None:
        try:
            plan = self.build_plan()
        except SpecError as exc:
            self.spec_error(exc, field_for(exc.field))
            self.plan = None
            self.query_one("#plan-yaml", Static).update(
                Text("the plan shows here once every field is right", style="dim")
            )
            self.query_one("#cost", Static).update("")
            return None
        self.field_error("", "")
        self.plan = plan
        self.query_one("#cost", Static).update(cost_text(plan))
        self.query_one("#plan-yaml", Static).update(plan_to_yaml(plan))
        return plan

    # -- the catalogue ------------------------------------------------------------------

    def show_catalogue(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        table = self.query_one("#catalogue", DataTable)
        table.clear()
        for t in catalogue.offered_everywhere():
            gpus = f"{t.gpus}x {t.gpu_model.removeprefix('NVIDIA ')} {t.gpu_memory_gib:g}G" if t.gpus else "-"
            table.add_row(
                t.name,
                str(t.vcpus),
                f"{t.memory_gib:g} GiB",
                gpus,
                "yes" if t.efa else "-",
                f"{t.price:.3f}" if t.price is not None else "?",
                key=t.name,
            )
        source = (
            f"{len(table.rows)} types offered in every zone of {', '.join(catalogue.zones)} (from EC2)"
            if catalogue.live
            else "the shipped catalogue (ctrl+l: the region's own, from EC2)"
        )
        self.query_one("#catalogue-source", Static).update(source + "; a: add the highlighted type as workers")

    def action_load_catalogue(self) -> None:
        region, zones = self.value("region"), [z.strip() for z in self.value("zones").split(",") if z.strip()]
        self.query_one("#catalogue-source", Static).update(f"asking EC2 for the types of {region}...")
        self.load_catalogue(region, zones)

    @work(thread=True, exclusive=True, group="catalogue", exit_on_error=False)
    def load_catalogue(self, region: str, zones: list[str]) -> None:
        self.post_message(CatalogueLoaded(self.app.cloud.catalogue(region, zones or None)))

    def on_catalogue_loaded(self, message: CatalogueLoaded) -> None:
        if not self.value("zones"):  # asked EC2 for the region's zones: offer the first three
            self.set_value("zones", ",".join(message.catalogue.zones[:3]))
        self.show_catalogue(message.catalogue)
        self.check_form()

    def action_add_worker(self) -> None:
        table = self.query_one("#catalogue", DataTable)
        if not table.has_focus or table.row_count == 0:
            return
        kind = str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        if self.catalogue is None or kind not in self.catalogue.types:
            return
        info = self.catalogue.types[kind]
        existing = [w for w in self.value("workers").split(";") if w.strip()]
        name = f"{'gpu' if info.gpus else 'cpu'}-{kind.replace('.', '-')}"
        existing.append(f"{name}:{kind}:0:1:2" + (":gpu" if info.gpus else ""))
        self.set_value("workers", "; ".join(w.strip() for w in existing))
        self.notify(f"added {name}: 0..2 nodes of {kind}, 1 at first; edit the sizes in Workers")

    # -- save, check, create ------------------------------------------------------------------

    def action_save(self) -> bool:
        plan = self.submit_form()
        if plan is None:
            self.notify("the plan has errors: see the red lines", severity="error")
            return False
        try:
            save_plan(plan, self.plan_file)
        except OSError as exc:
            self.form_error(f"cannot write {self.plan_file}: {exc.strerror}")
            return False
        self.notify(f"saved {self.plan_file}")
        return True

    def action_check(self) -> None:
        plan = self.submit_form()
        if plan is None:
            return
        self.log_line("preflight: asking AWS...", "bold")
        self.preflight(plan)

    @work(thread=True, exclusive=True, group="preflight", exit_on_error=False)
    def preflight(self, plan: ClusterPlan, then_create: bool = False) -> None:
        self.post_message(PreflightChecked(self.app.cloud.preflight(plan), then_create))

    def on_preflight_checked(self, message: PreflightChecked) -> None:
        report = message.report
        styles = {"ok": "green", "warn": "yellow", "error": "bold red"}
        for finding in report.findings:
            hint = f"  (hint: {finding.hint})" if finding.hint else ""
            self.log_line(f"{finding.level:<5} {finding.text}{hint}", styles[finding.level])
        self.log_line(f"about ${report.total_per_hour:,.2f} an hour", "bold")
        if not message.then_create:
            return
        if not report.ok:
            self.log_line("not creating: fix the errors above first", "bold red")
            return
        plan = self.plan
        if plan is None:  # the form was changed into a wrong one while AWS answered
            self.log_line("not creating: the form has errors now", "bold red")
            return
        try:
            path, binary = self.app.cloud.pick_path()
        except BackendError as exc:
            self.form_error(error_text(exc))
            return
        question = (
            f"Create cluster {plan.name} in {plan.region} with {path}? It costs about "
            f"${report.total_per_hour:,.2f} an hour until you delete it."
        )

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.start("create")
                self.create(plan, path, binary)

        self.app.push_screen(ConfirmScreen(question), confirmed)

    def action_create(self) -> None:
        if not self.action_save() or self.plan is None:
            return
        self.log_line(f"create: preflight of {self.plan.name} first...", "bold")
        self.preflight(self.plan, then_create=True)

    @work(thread=True, exclusive=True, group="create", exit_on_error=False)
    def create(self, plan: ClusterPlan, path: str, eksctl: str | None) -> None:
        self.forward("create", lambda: self.app.cloud.create_cluster(plan, self.plan_file, path, eksctl))

    def worker_failed(self, group: str, text: str) -> None:
        if group == "catalogue":
            self.query_one("#catalogue-source", Static).update(f"no catalogue from EC2: {text}")
        else:
            super().worker_failed(group, text)
