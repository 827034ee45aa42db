"""The image screen: which Dockerfile, which ECR repository, and how it is
built here (docker where an engine answers, else a Kaniko job in the
cluster), with the build context's tag; then build and push with the
phase, elapsed time and the build's output, and the pushed digest written
into the job spec."""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Input, Select, Static

from torchdeck.backends.eks.image_plan import BuildContext, ImagePlan, validate_image
from torchdeck.backends.eks.progress import ImageRef, Progress
from torchdeck.backends.errors import SpecError

from .base import shown_path
from .cloud_steps import CloudStepsScreen
from .form import Field

FIELDS: list[Field] = [
    Field(
        "cluster", "EKS cluster", "torchdeck-demo", "The EKS cluster: the image goes to ECR in its account and region"
    ),
    Field("region", "Region", "us-west-2", "The cluster's AWS region"),
    Field("variant", "Image", help="Which Dockerfile: the CPU or the GPU (CUDA) image"),
    Field("repository", "ECR repository", "torchdeck-trainer", "The ECR repository to push to (made if absent)"),
    Field("builder", "Build with", help="docker where an engine answers here, else a Kaniko job in the cluster"),
    Field("bucket", "Kaniko bucket", "empty: the model bucket", "Kaniko: the S3 bucket for the build context"),
    Field("namespace", "Kaniko namespace", "default", "Kaniko: the namespace of the build job"),
    Field("spec", "Job spec", "torchdeck.yaml", "The job spec the pushed image's digest is pinned in"),
]


class ImageScreen(CloudStepsScreen["ImagePlan"]):
    FORM = FIELDS
    TITLE_TEXT = "Training image"
    BINDINGS = [
        Binding("f2", "side", "Progress"),
        Binding("ctrl+g", "build", "Build and push", priority=True),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def field_widgets(self) -> dict[str, Widget]:
        return {
            "variant": Select(
                [("CPU (docker/Dockerfile.cpu)", "cpu"), ("GPU (docker/Dockerfile.gpu)", "gpu")],
                allow_blank=False,
                value="cpu",
                id="f-variant",
            ),
            "builder": Select(
                [("auto", "auto"), ("docker", "docker"), ("kaniko (in the cluster)", "kaniko")],
                allow_blank=False,
                value="auto",
                id="f-builder",
            ),
        }

    def side(self) -> ComposeResult:
        yield Static("looking for a Docker engine and reading the build context...", id="summary")

    def on_mount(self) -> None:
        only = self.app.cloud.only_cluster()
        name, region = (only.name, only.region) if only else ("", "")
        for field, value in (
            ("cluster", name),
            ("region", region),
            ("repository", "torchdeck-trainer"),
            ("namespace", "default"),
            ("spec", shown_path(self.app.settings.spec_file)),
        ):
            self.set_value(field, value)
        self.query_one("#f-cluster", Input).focus()
        self.context: BuildContext | None = None
        self.look_around()

    @work(thread=True, exclusive=True, group="context", exit_on_error=False)
    def look_around(self) -> None:
        self.app.call_from_thread(self.looked, self.app.cloud.build_context())

    def looked(self, context: BuildContext) -> None:
        self.context = context
        self.check_form()

    def build_plan(self) -> ImagePlan:
        if not self.value("cluster"):
            raise SpecError("--cluster", "which cluster?", "the image is pushed to ECR in its account and region")
        if not self.value("region"):
            raise SpecError("--region", "which region is it in?")
        if not self.value("spec"):
            raise SpecError("--spec", "where should the image's digest go?", "e.g. torchdeck.yaml")
        return validate_image(
            ImagePlan(
                self.value("cluster"),
                self.value("region"),
                variant=self.value("variant"),
                repository=self.value("repository"),
                builder=self.value("builder"),
                bucket=self.value("bucket") or None,
                namespace=self.value("namespace"),
            )
        )

    def check_form(self) -> ImagePlan | None:
        try:
            plan: ImagePlan | None = self.build_plan()
        except SpecError as exc:
            field = exc.field.lstrip("-").replace("-", "_")
            self.spec_error(exc, field)
            plan = None
        else:
            self.field_error("", "")
        context = self.context
        if context is not None:
            builder = plan.builder if plan else self.value("builder")
            how = ("docker" if context.engine else "kaniko") if builder == "auto" else builder
            engine = "a Docker engine answers here" if context.engine else "no Docker engine answers here"
            what = (
                f"{plan.dockerfile} -> {plan.repository}:{context.tags[plan.variant]} "
                if plan
                else f"the {self.value('variant') or 'cpu'} image is tagged {context.tags.get(self.value('variant'), '')} "
            )
            self.query_one("#summary", Static).update(
                f"{engine}: builds with {how}\n{what}"
                f"(context {context.size_kib:.0f} KiB; an unchanged context is not built twice)\n"
                f"the pushed digest goes into {self.value('spec')}"
            )
        return plan

    def action_build(self) -> None:
        plan = self.submit_form()
        if plan is None:
            self.notify("fix the fields marked in red first", severity="warning")
            return
        self.spec_file = Path(self.value("spec"))
        self.start("build")
        self.build(plan)

    @work(thread=True, exclusive=True, group="image", exit_on_error=False)
    def build(self, plan: ImagePlan) -> None:
        self.forward("image", lambda: self.app.cloud.build_image(plan))

    def finished(self, group: str, progress: Progress) -> None:
        from torchdeck.backends.eks.image import write_image_to_spec

        if not isinstance(progress.result, ImageRef):
            return
        image = progress.result.reference
        try:
            write_image_to_spec(self.spec_file, image)
        except SpecError as exc:
            self.log_line(f"could not write {self.spec_file}: {exc}", "bold red")
            return
        self.log_line(f"{self.spec_file}: image: {image}", "bold green")
        self.notify(f"jobs now pull {image.rsplit('/', 1)[-1]}", title="image pinned")
