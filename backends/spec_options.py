"""What each field of a job spec is, declared once beside the field (``Option`` in the field's
metadata): its label, one-line help, example, choices, check and command-line flag. argparse
(``cli/main.py``), the launch form (``tui/screens/launch.py``), the spec's checks
(``spec_from_dict``) and ``init``'s commented template are all made from these; the checks
themselves live here too, each a function that says why a value is wrong (or None)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict, TypeVar, overload

from ..trainer.options import TrainerOption
from ..trainer.s3url import S3Url
from .cost import money
from .errors import SpecError
from .names import DNS_1035_RE, check_bucket_name, check_code_path, check_run_id, check_s3_prefix
from .names import SUBDOMAIN_RE as DNS_SUBDOMAIN_RE

if TYPE_CHECKING:  # typing has them from Python 3.11 (3.12: Unpack for keywords); they are only read by the checker
    from typing_extensions import Required, Unpack

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?\Z")
"""Names of objects a run makes (and so job names, which start them): a letter first, as Service
names, the PyTorchJob webhook and TrainJob's CEL rule demand."""
MAX_JOB_NAME = 40
LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
IMAGE_RE = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?\Z"
)
"""An image reference as the engines take one: a registry host that starts and ends with a letter or
digit (``--privileged/x`` is an option, not a host), anchored at the very end (``\\Z``: ``$`` would
let a trailing newline through)."""
QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?\Z")

Check = Callable[[object], "str | None"]
"""A field's check: why a value is wrong, or None."""

Where = Literal["all", "local", "cluster"]
"""Which backends a field means something on: every one, the local backend only, or clusters
(kubernetes, eks) only. The launch form shows a field only where it applies."""
Widget = Literal["text", "int", "bool", "choice", "args", "map", "number"]


@dataclass(frozen=True)
class Option:
    """One spec field as every front end presents it. The field's docstring is its long
    documentation; this is what the flag, the form and the template need."""

    check: Check
    help: str
    """One line: the flag's help, the form's line under the field, the template's comment."""
    label: str = ""
    """The form's label (19 cells at most); empty: not on the launch form (``--set`` and the file)."""
    example: str = ""
    """The form's placeholder and the flag's metavar: an example value, or what empty means."""
    flag: str = ""
    """The command-line flag of ``train``, ``render`` and their kin (empty: ``--set FIELD=VALUE``)."""
    choices: tuple[str, ...] = ()
    """The values it takes, where there is a list (a select in the form)."""
    where: Where = "all"
    local_path: bool = False
    """A path on this machine: the command line and the form make it absolute (s3:// stays)."""
    coerce: Callable[[object], object] | None = None
    """Applied before the check (a number where a quantity goes, as its text)."""
    convert: Callable[[object], object] | None = None
    """Applied after the check passed (``"$12.50"`` is 12.5)."""
    trainer: str = ""
    """The built-in trainer's option this field is passed to, by name (``trainer/options.py``,
    where its default, choices and help are declared): ``trainer_arguments`` writes it."""

    def applies_to(self, fields: Where) -> bool:
        """Whether the field means something to a backend that reads ``fields`` (``Backend.fields``)."""
        return self.where in ("all", fields)


class FormFacts(TypedDict, total=False):
    """How the front ends show and read a field: ``Option``'s label, example, flag, where it
    applies and whether it is a path here."""

    label: str
    example: str
    flag: str
    where: Where
    local_path: bool


class OptionFacts(FormFacts, total=False):
    """``option()``'s keywords: the fields of ``Option`` (tests/unit/test_spec_options.py checks
    that they are the same names)."""

    check: Required[Check]
    help: Required[str]
    choices: tuple[str, ...]
    coerce: Callable[[object], object] | None
    convert: Callable[[object], object] | None
    trainer: str


class ChoiceFacts(TypedDict):
    """A list of values and the check that takes only them (``choices()``)."""

    choices: tuple[str, ...]
    check: Check


T = TypeVar("T")


@overload
def option(default: T, **facts: Unpack[OptionFacts]) -> T: ...


@overload
def option(*, factory: Callable[[], T], **facts: Unpack[OptionFacts]) -> T: ...


def option(
    default: object = dataclasses.MISSING,
    *,
    factory: Callable[[], object] | None = None,
    **facts: Unpack[OptionFacts],
) -> object:
    """A dataclass field that carries its ``Option``: ``nodes: int = option(1, check=..., help=...)``.
    It is the field's value to the type checker (``dataclasses.field`` is too)."""
    metadata = {"option": Option(**facts)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def trainer_field(opt: TrainerOption[T], *, check: Check | None = None, **facts: Unpack[FormFacts]) -> T:
    """A spec field that the built-in trainer takes as ``opt``: its default, choices, help and
    check come from the trainer's declaration (``trainer/options.py``), the way the form and the
    command line show it from ``facts``. ``check``: for a free text, which the trainer does not judge."""
    optional = opt.default is None
    if check is not None:
        pass
    elif opt.choices:
        check = choices_check(*((None,) if optional else ()), *opt.choices)
    elif opt.value_type is bool:
        check = is_bool
    elif opt.value_type is int and opt.minimum is not None:
        check = int_at_least(opt.minimum, optional=optional)
    else:
        raise TypeError(f"the spec field for --{opt.name} needs a check of its own")
    assert opt.help is not None, f"--{opt.name} is hidden from the spec"
    return option(opt.default, check=check, help=opt.help, choices=opt.choices, trainer=opt.name, **facts)


def widget_of(option: Option, type_text: str) -> Widget:
    """How a field is typed in: from its declared type (the annotation's text) and choices."""
    if type_text == "bool":
        return "bool"
    if type_text.startswith("list"):
        return "args"
    if type_text.startswith("dict"):
        return "map"
    if option.choices:
        return "choice"
    if type_text.startswith("int"):
        return "int"
    if type_text.startswith("float"):
        return "number"
    return "text"


def choices(*values: str, optional: bool = False) -> ChoiceFacts:
    """``choices=`` and the matching ``check=`` for an option (None too where ``optional``)."""
    return {"choices": values, "check": choices_check(*((None,) if optional else ()), *values)}


def choices_check(*values: str | None) -> Check:
    def check(v: object) -> str | None:
        if v not in values:
            shown = ", ".join(x for x in values if x is not None)
            return f"must be one of {shown}, got {v!r}"
        return None

    return check


def int_at_least(low: int, optional: bool = False) -> Check:
    def check(v: object) -> str | None:
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            return f"must be an integer >= {low}, got {v!r}"
        return None

    return check


def is_bool(v: object) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, got {v!r}"


def path_check(optional: bool) -> Check:
    def check(v: object) -> str | None:
        if v is None and optional:
            return None
        if not isinstance(v, str) or not v.strip():
            return f"must be a path, got {v!r}"
        return None

    return check


def quantity_text(v: object) -> object:
    """A number where a Kubernetes quantity goes (cpu: 90, memory: 1.5) as the quantity's text,
    as the API server takes it; anything else unchanged, for the check to judge."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    return str(v) if isinstance(v, int) or not v.is_integer() else str(int(v))


def quantity_check(optional: bool) -> Check:
    def check(v: object) -> str | None:
        if v is None and optional:
            return None
        if not isinstance(v, str) or not QUANTITY_RE.match(v):
            return f'must be a Kubernetes quantity such as "4", "500m" or "8Gi", got {v!r}'
        return None

    return check


def name_check(v: object) -> str | None:
    if not isinstance(v, str) or not NAME_RE.match(v):
        return f"must be 1-40 lower-case letters, digits or '-', starting and ending with a letter or digit, got {v!r}"
    return None


def job_name(v: object) -> str | None:
    if not isinstance(v, str) or len(v) > MAX_JOB_NAME or not DNS_1035_RE.match(v):
        return (
            f"must be 1-40 lower-case letters, digits or '-', starting with a letter and ending with a "
            f"letter or digit (Kubernetes' DNS-1035 names), got {v!r:.60}"
        )
    return None


def name_253(v: object) -> str | None:
    """A DNS subdomain name (RFC 1123): what Kubernetes takes for most object names."""
    if not isinstance(v, str) or len(v) > 253 or not DNS_SUBDOMAIN_RE.match(v):
        return (
            f"must be a DNS-1123 name (lower-case letters, digits, '-' and '.', starting and ending "
            f"with a letter or digit), got {v!r}"
        )
    return None


def node_names_check(v: object) -> str | None:
    """Node names (each a DNS subdomain name), as a list."""
    if not isinstance(v, list):
        return f"must be a list of node names, got {v!r:.60}"
    for name in v:
        problem = name_253(name)
        if problem is not None:
            return f"node {problem}"
    return None


def run_id_check(v: object) -> str | None:
    """A run's id (``names.check_run_id``)."""
    try:
        check_run_id(v)
    except SpecError as exc:
        return exc.reason
    return None


def label_named(label: str) -> Callable[[object], str | None]:
    """An object's name that is also the value of ``label`` (63 characters at most)."""

    def check(v: object) -> str | None:
        problem = name_253(v)
        if problem is None and isinstance(v, str) and len(v) > 63:
            return f"must be at most 63 characters (it becomes the {label} label), got {len(v)}"
        return problem

    return check


queue_name = label_named("kueue.x-k8s.io/queue-name")
"""A LocalQueue's name."""


def image_check(v: object) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or not IMAGE_RE.match(v):
        return (
            f"must be an image reference such as registry/repo:tag or repo@sha256:<64 hex>, got {v!r} "
            f"(lower-case repository, no spaces or scheme)"
        )
    return None


RESERVED_ENV_PREFIXES = ("TORCHDECK_", "KUBEFLOW_TRAINER_SERVER_")
"""Names torchdeck sets in every rank (the run's id, its node, the triage probe's folder) and names
Kubeflow Trainer gives a pod (its status server's URL, CA and token): a spec that set them would
steer torchdeck's own probe or send the Trainer's token elsewhere."""
ENV_KNOBS = ("TORCHDECK_TRIAGE_AFTER_S",)
"""torchdeck's own names that are a user's to set: how long a rank in a pod stays on one line before
its hang probe dumps where it is (docs/HANGS.md)."""


def reserved_env(name: str) -> bool:
    """Whether ``name`` is torchdeck's or Kubeflow Trainer's to set in every rank, not a spec's."""
    return name.upper().startswith(RESERVED_ENV_PREFIXES) and name.upper() not in ENV_KNOBS


LOADER_ENV = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
)
"""Names that change what code a rank loads: a spec may set them, and ``import`` says so when the
job it reads (someone else's) does."""


def env_check(v: object) -> str | None:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        return 'must map names to string values (quote numbers: "1")'
    bad = [k for k in v if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", k)]
    if bad:
        return f"{bad[0]!r} is not a valid variable name"
    reserved = sorted(k for k in v if reserved_env(k))
    if reserved:
        return f"{reserved[0]} is torchdeck's or Kubeflow Trainer's to set in every rank (names starting {', '.join(RESERVED_ENV_PREFIXES)})"
    return None


def money_check(positive: bool) -> Check:
    def check(v: object) -> str | None:
        if v is None:
            return None
        try:
            money(v, positive=positive)
        except ValueError as exc:
            return str(exc)
        return None

    return check


def labels_check(v: object) -> str | None:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        return "must map label names to string values"
    for key, value in v.items():
        if not LABEL_KEY_RE.match(key):
            return f"{key!r} is not a valid label name"
        if not LABEL_VALUE_RE.match(value):
            return f"{value!r} is not a valid label value (63 characters at most: letters, digits, '-', '_', '.')"
    return None


def abs_path(v: object) -> str | None:
    return None if isinstance(v, str) and v.startswith("/") else f"must be an absolute path in the pod, got {v!r}"


def s3_prefix(v: object) -> str | None:
    try:
        location = S3Url.parse(v)
    except ValueError:
        return f"must be s3://BUCKET or s3://BUCKET/PREFIX, got {v!r:.80}"
    try:
        check_bucket_name(location.bucket, "bucket")
        check_s3_prefix(location.key, "prefix", empty_ok=True)
    except SpecError as exc:
        return f"must be s3://BUCKET or s3://BUCKET/PREFIX: {exc.reason}"
    return None


def optional_check(check: Check) -> Check:
    return lambda v: None if v is None else check(v)


def relative_path(v: object) -> str | None:
    try:
        check_code_path(v, "")
    except SpecError as exc:
        return exc.reason
    return None


def module_check(v: object) -> str | None:
    ok = isinstance(v, str) and all(part.isidentifier() for part in v.split("."))
    return None if ok else f"must be a dotted module name such as mypkg.train, got {v!r}"


def arguments_check(v: object) -> str | None:
    if not isinstance(v, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in v):
        return "must be a list of arguments, e.g. [--lr, '0.1']"
    return None


def as_arguments(v: object) -> list[str]:
    """Arguments as the command line takes them: numbers in YAML (``[--lr, 0.1]``) as text (after
    ``arguments_check``: a list)."""
    return [str(a) for a in v] if isinstance(v, list) else []


def pattern_check(v: object) -> str | None:
    from torchdeck.trainer.textmetrics import check_pattern

    return check_pattern(v)


def metric_tags(v: object) -> str | None:
    from torchdeck.trainer.logfiles import ROLES

    if not isinstance(v, dict) or len(v) > len(ROLES):
        return f"must be a mapping of {', '.join(ROLES)} to a scalar's name"
    for role, name in v.items():
        if role not in ROLES:
            return f"{role!r:.40} is not one of {', '.join(ROLES)}"
        if not isinstance(name, str) or not 0 < len(name) <= 200 or not name.isprintable():
            return f"{role}: a scalar's name is 1-200 printable characters"
    return None
