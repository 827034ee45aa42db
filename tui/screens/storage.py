"""The storage screen: EFS or FSx for Lustre for a cluster's jobs, and the
bucket for its models, checked field by field as typed; then create (with
what it costs), status, delete, and CIFAR-10 onto the new volume, each with
its phase, elapsed time and events as they come."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Input, Select, Static

from torchdeck.backends.capabilities import CifarTasks, DataReady
from torchdeck.backends.eks.progress import Progress, StorageReady
from torchdeck.backends.eks.storage_plan import FSX_DEPLOYMENTS, StoragePlan, validate_storage
from torchdeck.backends.eks.storage_state import StorageState
from torchdeck.backends.errors import SpecError

from .base import shown_path
from .cloud_steps import CloudStepsScreen
from .confirm import ConfirmScreen
from .form import Field

FIELDS: list[Field] = [
    Field("cluster", "EKS cluster", "torchdeck-demo", "The EKS cluster whose jobs use the storage (c makes one)"),
    Field("region", "Region", "us-west-2", "The cluster's AWS region"),
    Field("kind", "File system", help="The shared file system: EFS (elastic), FSx for Lustre (fast) or none"),
    Field("fsx_deployment", "FSx deployment", help="FSx for Lustre's deployment type (SCRATCH: no replication)"),
    Field("fsx_capacity", "FSx capacity GiB", "1200", "FSx capacity in GiB: 1200, 2400, then steps of 2400"),
    Field("fsx_s3_link", "FSx S3 link", "s3://bucket/prefix (optional)", "An S3 prefix FSx for Lustre imports"),
    Field("bucket", "Model bucket", "empty: none", "The S3 bucket for models (empty: none)"),
    Field("prefix", "Key prefix", "models/", "The key prefix jobs may use in the bucket"),
    Field("namespace", "Namespace", "default", "The namespace of the claim and the service account"),
    Field("pvc", "Claim name", "shared", "The PersistentVolumeClaim jobs mount (cluster.pvc in the job spec)"),
]
KINDS = [("EFS (elastic, shared)", "efs"), ("FSx for Lustre (fast)", "fsx"), ("none: a bucket only", "none")]


class StorageScreen(CloudStepsScreen["StoragePlan"]):
    FORM = FIELDS
    TITLE_TEXT = "Shared storage and the model bucket"
    BINDINGS = [
        Binding("f2", "side", "Progress"),
        Binding("ctrl+g", "create", "Create", priority=True),
        Binding("ctrl+t", "status", "Status", priority=True),
        Binding("ctrl+r", "prepare_data", "CIFAR-10", priority=True),
        Binding("ctrl+d", "delete", "Delete", priority=True),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def field_widgets(self) -> dict[str, Widget]:
        return {
            "kind": Select(KINDS, allow_blank=False, value="efs", id="f-kind"),
            "fsx_deployment": Select(
                [(d, d) for d in FSX_DEPLOYMENTS], allow_blank=False, value="SCRATCH_2", id="f-fsx_deployment"
            ),
            "fsx_capacity": Input(id="f-fsx_capacity", restrict=r"[0-9]*"),
        }

    def side(self) -> ComposeResult:
        yield Static(id="summary")
        yield Static(id="side-hint")

    def on_mount(self) -> None:
        known = self.app.cloud.clusters()
        only = self.app.cloud.only_cluster()
        name, region = (only.name, only.region) if only else ("", "")
        made = only.storage if only else None  # what its last storage create chose
        for field, value in (
            ("cluster", name),
            ("region", region),
            ("fsx_capacity", "1200"),
            ("bucket", (made.bucket if made else None) or ""),
            ("prefix", made.prefix if made else "models/"),
            ("namespace", made.namespace if made else "default"),
            ("pvc", made.pvc if made else "shared"),
        ):
            self.set_value(field, value)
        if made is not None:
            self.set_value("kind", made.kind)
        self.query_one("#side-hint", Static).update(
            Text(
                "ctrl+g creates, ctrl+t shows what exists, ctrl+r puts CIFAR-10 on the volume, "
                "ctrl+d deletes"
                + (
                    f"; clusters torchdeck knows: {', '.join(r.name for r in known)}"
                    if known
                    else "; no cluster yet: make one with c from the runs"
                ),
                style="dim",
            )
        )
        self.query_one("#f-cluster", Input).focus()

    def build_plan(self) -> StoragePlan:
        if not self.value("cluster"):
            raise SpecError("--cluster", "which cluster?", "the name of an EKS cluster (c makes one)")
        if not self.value("region"):
            raise SpecError("--region", "which region is it in?")
        return validate_storage(
            StoragePlan(
                self.value("cluster"),
                self.value("region"),
                kind=self.value("kind") or "efs",
                fsx_deployment=self.value("fsx_deployment") or "SCRATCH_2",
                fsx_capacity_gib=int(self.value("fsx_capacity") or 0),
                fsx_s3_link=self.value("fsx_s3_link") or None,
                bucket=self.value("bucket") or None,
                prefix=self.value("prefix"),
                namespace=self.value("namespace"),
                pvc=self.value("pvc"),
            )
        )

    def check_form(self) -> StoragePlan | None:
        try:
            plan = self.build_plan()
        except SpecError as exc:
            field = exc.field.lstrip("-").replace("-", "_")
            field = {"fsx_throughput": "fsx_deployment"}.get(field, field)
            self.spec_error(exc, field)
            self.query_one("#summary", Static).update("")
            return None
        self.field_error("", "")
        what = {
            "efs": "EFS: encrypted, NFS from the cluster's security group only, a mount target per node zone; "
            "$0.30 per GB-month stored",
            "fsx": f"FSx for Lustre {plan.fsx_deployment}, {plan.fsx_capacity_gib} GiB: about "
            f"${plan.fsx_per_hour:.3f}/h",
            "none": "no file system",
        }[plan.kind]
        bucket = (
            (
                f"\nbucket {plan.bucket}: private, encrypted; {plan.namespace}/{plan.service_account} may use "
                f"s3://{plan.bucket}/{plan.prefix} only"
            )
            if plan.bucket
            else ""
        )
        claim = f"\nclaim {plan.namespace}/{plan.pvc} (ReadWriteMany)" if plan.kind != "none" else ""
        self.query_one("#summary", Static).update(f"{what}{claim}{bucket}")
        return plan

    def action_create(self) -> None:
        plan = self.submit_form()
        if plan is None:
            self.notify("fix the fields marked in red first", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.start("create")
                self.create(plan)

        cost = f" (about ${plan.fsx_per_hour:.3f}/h until deleted)" if plan.kind == "fsx" else ""
        self.app.push_screen(ConfirmScreen(f"Create this storage for cluster {plan.cluster}{cost}?"), confirmed)

    @work(thread=True, exclusive=True, group="storage", exit_on_error=False)
    def create(self, plan: StoragePlan) -> None:
        self.forward("storage", lambda: self.app.cloud.create_storage(plan))

    def finished(self, group: str, progress: Progress) -> None:
        """A create ended with its typed result: what a job spec needs to use this storage goes into
        the console's spec file (as ``storage create --spec`` writes it)."""
        from torchdeck.backends.spec import update_spec_file

        if not isinstance(progress.result, StorageReady):
            return
        path, changes = self.app.settings.spec_file, progress.result.spec_settings
        try:
            update_spec_file(path, changes)
        except SpecError as exc:
            self.log_line(f"could not write {shown_path(path)}: {exc}", "bold red")
            return
        self.log_line(f"{shown_path(path)}: " + ", ".join(f"{k}={v}" for k, v in changes.items()), "bold green")

    def action_status(self) -> None:
        plan = self.submit_form()
        if plan is not None:
            self.status(plan)

    @work(thread=True, exclusive=True, group="status", exit_on_error=False)
    def status(self, plan: StoragePlan) -> None:
        cloud = self.app.cloud
        state = cloud.storage_state(cloud.record(plan.cluster, plan.region))
        self.app.call_from_thread(self.show_state, state)

    def show_state(self, state: StorageState) -> None:
        styles = {"heading": "bold", "detail": "", "problem": "bold red"}
        for line in state.lines():
            self.log_line(line.text, styles[line.kind])

    def action_delete(self) -> None:
        plan = self.submit_form()
        if plan is None:
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.start("delete")
                self.delete(plan)

        self.app.push_screen(
            ConfirmScreen(
                f"Delete the storage torchdeck made for {plan.cluster}, the data on it and the model bucket?"
            ),
            confirmed,
        )

    @work(thread=True, exclusive=True, group="storage", exit_on_error=False)
    def delete(self, plan: StoragePlan) -> None:
        cloud = self.app.cloud
        record = cloud.record(plan.cluster, plan.region)
        steps = cloud.storage_steps(record)
        self.forward("storage", lambda: cloud.delete_storage(record, steps))

    def action_prepare_data(self) -> None:
        plan = self.submit_form()
        if plan is None:  # the data would go to a claim the form does not name
            self.notify("fix the fields marked in red first", severity="warning")
            return
        self.start("data")
        self.prepare_data(plan)

    @work(thread=True, exclusive=True, group="data", exit_on_error=False)
    def prepare_data(self, plan: StoragePlan) -> None:
        from torchdeck.backends.spec import JobSpec, load_spec, with_overrides

        settings = self.app.settings
        spec = load_spec(settings.spec_file) if settings.spec_file.exists() else JobSpec()
        # the claim this form names (a local run reads its own data folder and ignores it)
        spec = with_overrides(spec, self.app.cloud.storage_settings(self.app.cloud.record(plan.cluster, plan.region)))
        self.app.call_from_thread(
            self.log_line, f"data: CIFAR-10 for {spec.name} on the {self.app.backend.name} backend", "bold"
        )
        ready = self.app.backend.require(CifarTasks).prepare_data(
            spec, progress=lambda line: self.app.call_from_thread(self.log_line, f"data: {line}", "dim")
        )
        self.app.call_from_thread(self.data_ready, ready)

    def data_ready(self, ready: DataReady) -> None:
        self.phase, self.state = "done", "done"
        self.tick()
        self.log_line(
            f"data: CIFAR-10 ready in {ready.path}: {ready.train_images} training and {ready.test_images} test images",
            "bold green",
        )
