"""The help screen: what each screen's keys do."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# torchdeck

**Everywhere**: `?` this help, `ctrl+p` command palette (launch, open a run,
switch screens), `q` quit. Jobs keep running after the console closes; open
it again, or run `torchdeck monitor RUN`, to reattach.

**Runs** (home): `n` launch a job, `enter` monitor the highlighted run,
`s` stop it, `t` test its trained model (accuracy per class; the model
test Job on a cluster), `v` storage, `i` image, `r` refresh. Below the
runs: what torchdeck made in the cloud, its cost per hour and so far.

**Launch**: fill the form (it starts from `torchdeck.yaml` where there is
one), `ctrl+l` launch, `ctrl+s` save the form to the spec file, `escape`
back. A bad field is named under the form and nothing is started.

**Cluster** (`c` from the runs): the EKS wizard. Type the plan field by
field (each field says what is wrong with it, as you type); `ctrl+l` loads
the region's instance types from EC2 (`a` on a row adds it as a worker
nodegroup); the eksctl ClusterConfig and its cost per hour show beside.
`ctrl+s` saves it to `cluster.yaml`, `ctrl+t` runs the preflight (credentials,
zones, quotas, an existing cluster), `ctrl+g` creates the cluster after a
confirmation, showing phase, elapsed time and events.

**Storage** (`v`): EFS or FSx for Lustre for a cluster, and the model
bucket, checked as typed. `ctrl+g` creates (after a confirmation with the
cost), `ctrl+t` shows what exists, `ctrl+r` puts CIFAR-10 on the volume,
`ctrl+d` deletes it.

**Image** (`i`): the Dockerfile, the ECR repository and how it is built
here (docker where an engine answers, else Kaniko in the cluster).
`ctrl+g` builds and pushes, and pins the pushed digest in the job spec.

**Monitor**: per-rank loss, rank table (flags: SLOW = below the straggler
ratio of the median samples/s, SILENT = no line for several step times,
ERROR), eval accuracy per epoch, node gauges, logs. `l` filter logs by rank,
`/` search them, `c` choose the ranks the chart draws (at most 8, e.g.
`0,8,16-21`; it draws the flagged ranks first, then the lowest, until you
choose), `s` stop the run, `escape` back to the runs.

Headless, the same from a shell: `torchdeck train`, `jobs`, `status`,
`logs RUN [--rank R] [-f]`, `stop RUN`, `monitor RUN`, `test --run RUN`,
`data prepare`, `render`, `cluster init|types|plan|create|connect|status|delete`,
`storage create|status|delete`, `image build|push`, `model get`, `resources`,
`cleanup`.
"""


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: 90%; border: round $primary;
                                  background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP)
