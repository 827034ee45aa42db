"""Metrics from user scripts' output: every built-in text format, JSON lines
from the reporting helper, a spec's own pattern, and lines counted where a
line has no step number."""

from __future__ import annotations

import json

import pytest

from torchdeck.trainer.textmetrics import TextMetrics, check_pattern

FORMATS = [
    # (line, loss, step, epoch, accuracy, samples_per_s)
    ("loss: 1.23", 1.23, None, None, None, None),
    ("step 10/500 loss=0.75 12.5 samples/s", 0.75, 10, None, None, 12.5),
    # a batch within an epoch is a global step: epoch 3 (counted from 0) of 391 batches, batch 120
    ("Epoch: [3][120/391]  Time 0.2  Loss 1.2345e+00 (1.3e+00)  Acc@1  57.81 ( 51.2)", 1.2345, 1293, 3, 0.5781, None),
    ("| epoch 002 | 200/ 2983 batches | lr 5.00 | ms/batch 27.3 | loss  7.63 | ppl 2060.2", 7.63, 6166, 2, None, None),
    ("train_loss 1.2 iter 40", 1.2, 40, None, None, None),
    ("{'loss': 0.3081, 'learning_rate': 4.9e-05, 'epoch': 1.0}", 0.3081, None, 0, None, None),  # 1 epoch done
    ("Train Epoch: 1 [640/60000 (1%)]\tLoss: 0.318", 0.318, None, 1, None, None),
    ("batch 7 | loss 2.5 | accuracy 41%", 2.5, 7, None, 0.41, None),
]


@pytest.mark.parametrize(("line", "loss", "step", "epoch", "accuracy", "speed"), FORMATS)
def test_every_built_in_text_format_is_recognised(line, loss, step, epoch, accuracy, speed):
    parser = TextMetrics(rank=1)
    parser.count = 41  # 41 loss lines before: a line without a step number is the 42nd step
    record = parser.feed(line, now=5.0)
    assert record is not None and record["event"] == "step" and record["rank"] == 1 and record["time"] == 5.0
    assert record["loss"] == pytest.approx(loss)
    assert record["step"] == (step if step is not None else 42)
    assert record["epoch"] == epoch
    assert record.get("accuracy") == (pytest.approx(accuracy) if accuracy is not None else None)
    assert record["samples_per_s"] == speed


def test_lines_without_metrics_and_validation_lines():
    parser = TextMetrics(rank=0)
    for line in ("starting training", "batch_size 32", "loading 'loss' module", ""):
        assert parser.feed(line) is None, line
    for line in ("val_loss 2.0", "test loss: 2.0", "Validation loss: 2.0"):  # held out: a series of its own
        record = parser.feed(line)
        assert record is not None and record["event"] == "eval" and record["val_loss"] == 2.0, line
        assert "loss" not in record, line
    record = parser.feed("epoch 2 val_acc: 0.873")
    assert record is not None and record["event"] == "eval" and record["accuracy"] == pytest.approx(0.873)
    assert record["epoch"] == 2


def test_steps_are_counted_per_rank_where_lines_have_none_and_epochs_carry_over():
    parser = TextMetrics(rank=3, world_size=4)
    assert parser.feed("Epoch 1/5") is None
    parser.feed("epoch 1")  # no loss: not a step
    steps = [parser.feed(f"loss {2.0 - i / 10}") for i in range(3)]
    assert [r["step"] for r in steps] == [1, 2, 3] and all(r["world_size"] == 4 for r in steps)
    assert parser.feed("epoch 2 loss 1.0")["step"] == 4
    assert parser.feed("loss 0.9")["epoch"] == 2


def test_json_lines_from_the_reporting_helper_pass_through():
    parser = TextMetrics(rank=2)
    line = json.dumps({"schema": 1, "event": "step", "step": 7, "loss": 0.5, "time": 1.0})
    assert parser.feed(line) == {"schema": 1, "event": "step", "step": 7, "loss": 0.5, "time": 1.0, "rank": 2}
    assert parser.feed('{"schema": 2, "event": "step", "step": 3}') is None  # another schema, no text metric
    assert parser.feed('{"loss": 3.5}')["loss"] == 3.5  # a script's own JSON is read as text


def test_a_spec_pattern_replaces_the_built_in_formats():
    parser = TextMetrics(rank=0, pattern=r"it=(?P<step>\d+) L=(?P<loss>[\d.]+)(?: top1=(?P<accuracy>[\d.]+)%)?")
    assert parser.feed("loss: 1.0") is None  # the built-in formats are off
    record = parser.feed("it=12 L=0.25 top1=80.5%")
    assert (record["step"], record["loss"], record["accuracy"]) == (12, 0.25, pytest.approx(0.805))


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("(", "is not a regular expression"),
        (r"(?P<lr>[\d.]+)", "does not know: lr"),
        (r"step (?P<step>\d+)", "needs a (?P<loss>...) or (?P<accuracy>...) group"),
        ("", "named groups"),
        (r"(?<=loss )(?P<loss>[\d.]+)", "look-around and back-references are out"),
    ],
)
def test_bad_patterns_are_named(pattern, words):
    assert words in check_pattern(pattern)
    assert check_pattern(r"L=(?P<loss>[\d.]+)") is None


def test_a_pattern_that_backtracks_cannot_stall_the_reader():
    """Issue 16: (a+)+b took Python's re about a second at 24 characters and doubles with each one
    more; a reader for 64 ranks would stop for good. On RE2 matching is linear in the line, so a
    line of 2,000 a's (as far as a line is read) ends at once. Run in a child with a generous
    limit, so a regression fails the test instead of hanging the suite."""
    import subprocess
    import sys

    code = (
        "from torchdeck.trainer.textmetrics import TextMetrics\n"
        "t = TextMetrics(0, 1, r'(?P<loss>(a+)+)b')\n"
        "for _ in range(100): assert t.feed('a' * 5000) is None\n"
        "print(t.feed('a' * 3 + 'b'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # RE2 keeps its reasons off the console's terminal
    assert check_pattern(r"(?P<loss>(a+)+)b") is None


def test_a_long_line_is_looked_at_only_so_far():
    parser = TextMetrics(rank=0)
    assert parser.feed("x" * 5000 + " loss 1.0") is None
    assert parser.feed("loss 1.0 " + "x" * 5000)["loss"] == 1.0


def test_pod_log_lines_say_their_rank_by_torchruns_prefix():
    from torchdeck.trainer.textmetrics import RankedText

    reader = RankedText(nproc_per_node=2, world_size=4, program="train.py")
    rank, text, records = reader.read(1, b"[rank3]:step 4/9 loss: 0.5", now=1.0)
    assert (rank, text) == (3, b"step 4/9 loss: 0.5")
    assert [r["event"] for r in records] == ["start", "step"] and records[0]["model"] == "train.py"
    assert records[1]["loss"] == 0.5 and records[1]["rank"] == 3 and records[1]["total_steps"] == 9
    rank, text, records = reader.read(1, b"[default0]:loss=0.7", now=2.0)  # torchrun's own --tee prefix
    assert rank == 2 and [r["step"] for r in records if r["event"] == "step"] == [1]
    assert reader.read(0, b"no prefix, no metrics")[:2] == (0, b"no prefix, no metrics")
    assert reader.read(-1, b"mpirun: launcher line") == (-1, b"mpirun: launcher line", [])
    assert reader.read(-1, b"[rank1]:loss 2.0")[0] == 1  # mpirun's output says the rank
    reader.read(1, b"[rank3]:Traceback (most recent call last):")
    reader.read(1, b'[rank3]:  File "train.py", line 1')
    _, _, records = reader.read(1, b"[rank3]:RuntimeError: boom")
    assert records == [
        {"schema": 1, "event": "error", "rank": 3, "time": records[0]["time"], "step": 4, "epoch": None,
         "message": "RuntimeError: boom", "hint": "the rank's log has the whole traceback"}
    ]  # fmt: skip


def test_the_pytorch_tutorial_and_workshop_lines_give_epoch_and_counted_steps():
    """``[epoch, batch] loss: x`` as the EKS workshop's CIFAR-10 script prints it (its README's log)."""
    parser = TextMetrics(rank=1)
    first = parser.feed("[1,     5] loss: 2.335")
    second = parser.feed("[2,     5] loss: 0.470")
    assert (first["epoch"], first["step"], first["loss"]) == (1, 1, 2.335)
    assert (second["epoch"], second["step"], second["loss"]) == (2, 2, 0.47)


BAR = "Epoch {e}: {pct:3d}%|##########| {n}/{m} [01:17<00:00, 1.97it/s, v_num=0, train_loss={loss}]"


def test_a_progress_bar_is_read_per_update_with_its_epoch_total_rate_and_postfix():
    """Issue 31: a tqdm bar (Lightning's here) rewrites one line with \\r; each update is a step of
    the run, its epoch and batch making the global step, its postfix the loss (v_num ignored)."""
    from torchdeck.trainer.rewrites import updates_in

    parser = TextMetrics(rank=1)
    epoch0 = "".join("\r" + BAR.format(e=0, pct=n * 5, n=n, m=20, loss=8 - n / 10) for n in range(1, 21))
    records = [parser.feed(update) for update in updates_in(epoch0 + "\x1b[0m")]
    assert [r["step"] for r in records] == list(range(1, 21))
    assert records[-1]["loss"] == pytest.approx(8 - 2.0) and records[-1]["epoch"] == 0
    assert records[-1]["epoch_steps"] == 20 and records[-1]["steps_per_s"] == pytest.approx(1.97)
    assert parser.feed(BAR.format(e=2, pct=80, n=16, m=20, loss=1.5))["step"] == 2 * 20 + 16
    # the validation bar's counter is not the training step
    assert parser.feed("Validation DataLoader 0:  50%|#####     | 4/8 [00:01<00:01, 3.1it/s]") is None
    one = TextMetrics(rank=0).feed("Epoch 2: 100%|##########| 32/32 [00:09<00:00,  3.40it/s]")
    assert one is not None and (one["step"], one["epoch"], one["epoch_steps"], one["loss"]) == (96, 2, 32, None)
    plain = TextMetrics(rank=0).feed(" 45%|####5     | 450/1000 [00:30<00:37, 14.7it/s, loss=0.52]")
    assert plain is not None and (plain["step"], plain["total_steps"], plain["loss"]) == (450, 1000, 0.52)
    slow = TextMetrics(rank=0).feed("train: 3it [00:09,  3.00s/it, train_loss_step=0.9, train_loss_epoch=1.2]")
    assert slow is not None and slow["loss"] == 0.9 and slow["steps_per_s"] == pytest.approx(1 / 3)


def test_many_updates_arriving_together_are_read_spread_and_the_last():
    from torchdeck.trainer.rewrites import UPDATES_KEPT, updates_in

    line = "".join(f"\r{n}/1000 [00:01<00:01, 9.9it/s, loss={n}]" for n in range(1, 1001))
    kept = updates_in(line)
    assert len(kept) == UPDATES_KEPT + 1 and kept[0].startswith("1/1000") and kept[-1].startswith("1000/1000")


def test_steps_and_totals_from_the_words_scripts_use():
    assert TextMetrics(rank=0).feed("Loss: 0.000739 after 409 batches")["step"] == 409
    parser = TextMetrics(rank=0)
    assert parser.feed("epoch 1") is None
    assert parser.feed("| epoch   1 |    20/  310 batches | loss  5.1")["step"] == 20  # epoch 1 counts from 1
    assert parser.feed("| epoch   2 |    20/  310 batches | loss  4.9")["step"] == 330
    # a step marker on a line of its own: the closure's loss lines after it are that step's
    lbfgs = TextMetrics(rank=0)
    kept = [lbfgs.feed(line) for line in ("STEP: 0", "loss: 1.5", "loss: 1.2", "loss: 1.1", "STEP: 1", "loss: 0.9")]
    assert [(r["step"], r["loss"]) for r in kept if r] == [(0, 1.5), (1, 0.9)]
    # "saved at step 100" is no marker: a plain script's loss lines are still counted
    counted = TextMetrics(rank=0)
    assert counted.feed("checkpoint saved at step 100") is None
    assert [counted.feed(f"loss: {x}")["step"] for x in (1.0, 0.9)] == [1, 2]


def test_output_rewritten_in_place_is_read_as_it_updates_throttled_and_its_last_state_always():
    from torchdeck.trainer.rewrites import Rewrites

    now = [0.0]
    reader = Rewrites(every_s=0.5, clock=lambda: now[0])
    assert reader.feed(b"starting\n\r 1/10 [00:00, loss=9]") == ["starting", " 1/10 [00:00, loss=9]"]
    now[0] = 0.1  # within the throttle: the updates are held, not read
    assert reader.feed(b"\r 2/10 [00:00, loss=8]\r 3/10 [00:00, loss=7]") == []
    now[0] = 0.7  # nothing new arrives, but the bar's newest state is read once the throttle allows
    assert reader.idle() == [" 3/10 [00:00, loss=7]"]
    assert reader.idle() == []  # and only once
    now[0] = 0.8  # the bar ends its line: its last state is read at once, whatever the throttle
    assert reader.feed(b"\r10/10 [00:01, loss=1]\r") == []  # a CR last may be half a CRLF: held
    assert reader.feed(b"\ndone\r\n") == ["10/10 [00:01, loss=1]", "done"]
    assert reader.feed(b"tail without newline") == [] and reader.close() == ["tail without newline"]


def test_a_traceback_gives_its_whole_message_the_line_that_raised_it_and_whether_it_repeats():
    from torchdeck.trainer.tracebacks import traceback_error

    lines = [
        "starting",
        "Traceback (most recent call last):",
        '  File "/home/me/proj/train.py", line 12, in <module>',
        "    load(path)",
        '  File "/venv/lib/python3.11/site-packages/torch/serialization.py", line 99, in load',
        "    raise pickle.UnpicklingError(msg)",
        "_pickle.UnpicklingError: Weights only load failed.",
        "Re-running torch.load with weights_only set to False will likely succeed.",
    ]
    error = traceback_error(lines)
    assert error is not None and error["repeats"] == "yes"
    assert error["message"] == (
        "_pickle.UnpicklingError: Weights only load failed. Re-running torch.load with weights_only set to "
        "False will likely succeed. (at train.py:12: load(path))"
    )
    gone = traceback_error(["Traceback (most recent call last):", "torch.distributed.DistNetworkError: reset"])
    assert gone is not None and gone["repeats"] == "no"  # the network: another attempt may get through
    nccl = traceback_error(["RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!"])
    assert nccl is not None and nccl["message"].startswith("the script needs a GPU (NCCL needs GPUs")
    assert traceback_error(["loss 1.0", "all fine"]) is None
