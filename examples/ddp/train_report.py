"""The same DDP script, reporting through torchdeck's helper
(``torchdeck.report``: standard library only, one JSON line per call), so
torchdeck knows the run's length, each step's loss and speed, and the
accuracy without reading text.

    torchdeck train examples/ddp/train_report.py -- --epochs 3

Locally torchdeck makes the helper importable for the script; a training
image needs torchdeck installed (torchdeck's own image has it) or report.py
copied beside the script.
"""

from toy import accuracy, batches, finish, prepare, train_step

from torchdeck import report


def main() -> None:
    args, rank, net, opt, x, y = prepare()
    per_epoch = len(x) // args.batch_size
    report.start(epochs=args.epochs, total_steps=per_epoch * args.epochs, model="toy-mlp")
    step, acc = 0, 0.0
    for epoch in range(1, args.epochs + 1):
        for batch in batches(len(x), epoch, args.batch_size):
            loss, speed = train_step(net, opt, x[batch], y[batch])
            step += 1
            report.step(loss=loss, step=step, epoch=epoch, samples_per_s=speed, lr=args.lr)
        acc = accuracy(net, x, y)
        report.eval(accuracy=acc, epoch=epoch)
    report.done(accuracy=acc)
    finish()


if __name__ == "__main__":
    main()
